"""The cron engine before and after croniter parsed its fields, and croniter's own search.

    python bench/cron_engine.py [--jobs 33000] [--repeats 5] [--croniter-sample 1000]

A fleet like the scheduler's largest (bench/scale.py, the herd chart): `H H * * *` jobs in
Europe/Berlin, `*/5 * * * *` in New York, `0 9 * * 1-5` at Lord Howe, `* * * * *` in UTC,
each job with its own hash key. Figures are CPU seconds of this process (process time,
so other load on the machine weighs less), medians over the repeats, every cache of the
engine cleared before each repeat:

  compile   compile_schedule for every job: split, H, parse and expand the fields (new:
            croniter expands the plain items), the never-fires check. Jobs whose fields
            agree share one expansion, as in the scheduler
  distinct  compile_schedule for some 2,900 expressions that all differ (every field
            text a cache miss: the cost of croniter's expansion itself)
  fires 24h iter_between over the 24 h from 2026-03-28T12:00Z, which holds Berlin's
            spring-forward gap: the planner's and the herd chart's hot path

The old engine is tests/unit/schedule_v1.py (the module before croniter, byte for byte).
`croniter get_next` is croniter's own iteration (zoneinfo start times) over the same 24 h
for a sample of the fleet's H-resolved expressions, per fire: what using it for the search
would cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from croniter import croniter  # noqa: E402

from bench.common import machine_line  # noqa: E402
from raftcron.core import schedule as new_engine  # noqa: E402
from tests.unit import schedule_v1 as old_engine  # noqa: E402

START = int(datetime(2026, 3, 28, 12, tzinfo=UTC).timestamp())
DAY = 86_400


def fleet(n: int) -> list[tuple[str, str, str]]:
    """(cron, zone, hash key) for n jobs, in the proportions of the scale runs."""
    kinds = [("H H * * *", "Europe/Berlin", 0.90), ("*/5 * * * *", "America/New_York", 0.06),
             ("0 9 * * 1-5", "Australia/Lord_Howe", 0.0397), ("* * * * *", "UTC", 0.0003)]
    counts = [max(1, int(n * share)) for _, _, share in kinds]
    counts[0] += n - sum(counts)
    jobs: list[tuple[str, str, str]] = []
    for (cron, zone, _), count in zip(kinds, counts, strict=True):
        jobs += [(cron, zone, f"job-{len(jobs) + i}") for i in range(count)]
    return jobs


def distinct_expressions(n: int = 5000) -> list[str]:
    out = []
    for i in range(n):
        minute = (f"{i % 60}", f"*/{1 + i % 30}", f"{i % 30}-{30 + i % 30}/{1 + i % 7}")[i % 3]
        hour = (f"{i // 3 % 24}", f"{i % 12}-{12 + i % 12}", "*")[i // 7 % 3]
        dom = ("*", f"{1 + i % 28}", f"1-{2 + i % 27}/{1 + i % 5}", "L")[i // 5 % 4]
        dow = ("*", "MON-FRI", f"{i % 7}", f"{i % 7}#{1 + i % 4}")[i // 11 % 4]
        out.append(f"{minute} {hour} {dom} {1 + i % 12},{1 + (i + 6) % 12} {dow}")
    return list(dict.fromkeys(out))


def measure_distinct(engine: ModuleType, exprs: list[str], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        clear_caches(engine)
        samples.append(cpu(lambda: [engine.compile_schedule(e) for e in exprs])[0])
    return statistics.median(samples)


def clear_caches(engine: ModuleType) -> None:
    for value in vars(engine).values():
        for candidate in (value, *vars(value).values()) if isinstance(value, type) else (value,):
            if hasattr(candidate, "cache_clear"):
                candidate.cache_clear()


def cpu(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def measure(engine: ModuleType, jobs: list[tuple[str, str, str]],
            repeats: int) -> tuple[float, float, int]:
    """Median CPU s of compiling the fleet and of its 24 h of fires; the fire count."""
    compiles, fires = [], []
    count = 0
    for _ in range(repeats):
        clear_caches(engine)
        t, schedules = cpu(lambda: [engine.compile_schedule(c, z, hash_key=k)
                                    for c, z, k in jobs])
        compiles.append(t)
        t, count = cpu(lambda s=schedules: sum(
            1 for x in s for _ in x.iter_between(START, START + DAY)))
        fires.append(t)
    return statistics.median(compiles), statistics.median(fires), count


def resolved(cron: str, key: str) -> str:
    """The job's H-free five-field expression (ours; croniter's H hashes differently)."""
    shape = new_engine._shape(cron)
    return " ".join(new_engine._resolve_hashes(shape, key)[1:])


def croniter_per_fire(jobs: list[tuple[str, str, str]], repeats: int) -> tuple[float, int]:
    """Median CPU s per fire of croniter's own search over the same 24 h."""
    def run() -> int:
        n = 0
        for cron, zone, key in jobs:
            it = croniter(resolved(cron, key), datetime.fromtimestamp(START, ZoneInfo(zone)))
            while it.get_next(float) <= START + DAY:
                n += 1
        return n

    samples, count = [], 0
    for _ in range(repeats):
        t, count = cpu(run)
        samples.append(t / max(count, 1))
    return statistics.median(samples), count


def sample_of(jobs: list[tuple[str, str, str]], n: int) -> list[tuple[str, str, str]]:
    step = max(1, len(jobs) // n)
    return jobs[::step][:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=33_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--croniter-sample", type=int, default=1000)
    args = parser.parse_args()
    jobs = fleet(args.jobs)
    print(machine_line())
    print(f"fleet: {len(jobs)} jobs; median CPU s over {args.repeats} repeats, caches cleared")
    old_c, old_f, old_n = measure(old_engine, jobs, args.repeats)
    new_c, new_f, new_n = measure(new_engine, jobs, args.repeats)
    assert old_n == new_n, (old_n, new_n)
    print(f"{'':14}{'old':>10}{'new':>10}{'new/old':>10}")
    print(f"{'compile':14}{old_c:10.3f}{new_c:10.3f}{new_c / old_c:10.2f}")
    print(f"{'fires 24h':14}{old_f:10.3f}{new_f:10.3f}{new_f / old_f:10.2f}   ({new_n} fires)")
    exprs = distinct_expressions()
    old_d = measure_distinct(old_engine, exprs, args.repeats)
    new_d = measure_distinct(new_engine, exprs, args.repeats)
    print(f"{'distinct':14}{old_d:10.3f}{new_d:10.3f}{new_d / old_d:10.2f}   "
          f"({len(exprs)} expressions)")
    sample = sample_of(jobs, args.croniter_sample)
    per_fire, n = croniter_per_fire(sample, args.repeats)
    ours = new_f / new_n
    print(f"per fire: engine {ours * 1e6:.2f} µs, croniter get_next {per_fire * 1e6:.2f} µs "
          f"({per_fire / ours:.0f}x; {n} fires of {len(sample)} sampled jobs); the fleet's "
          f"24 h with croniter's search: ~{per_fire * new_n:.1f} s")


if __name__ == "__main__":
    main()
