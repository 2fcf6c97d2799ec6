"""End-to-end benchmark: claim → lease → complete on a real three-node cluster.

A no-op worker runs in this process (async httpx): it long-polls leases in batches and
completes every run at once, so the figures measure the scheduler, not the jobs.

    python bench/e2e.py [--jobs 1000] [--seconds 20] [--pollers 4]

Prints the fire lag (nominal instant → worker holds the lease) p50/p99/max and the
sustained end-to-end runs/s, with the machine described.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import Received, create_jobs, machine_line, noop_poller, pct  # noqa: E402
from raftcron.testing import LocalCluster  # noqa: E402

QUEUE = "bench"


async def measure(jobs: int, seconds: int, pollers: int) -> dict[str, float]:
    """Runs/s and fire lag with `jobs` jobs firing every second for `seconds` (+3 warm-up)."""
    with tempfile.TemporaryDirectory() as tmp:
        c = LocalCluster(Path(tmp))
        c.start()
        try:
            leader = c.wait_leader(timeout=30)
            bodies = [{"id": f"bench-{i}", "schedule": {"cron": "* * * * * *"},
                       "queue": QUEUE, "target": {"shell": "true"}} for i in range(jobs)]
            created_s = await create_jobs(c.urls[leader], c.auth_headers(), bodies)
            seen = Received()
            start = time.time()
            stop_at = start + 3 + seconds
            worker = c.auth_headers(c.worker_token)
            await asyncio.gather(*(noop_poller([c.urls[leader]], f"bench-w{i}", QUEUE,
                                               lambda: time.time() >= stop_at, seen, worker)
                                   for i in range(pollers)))
            lags = [got - sched for got, sched, _ in seen.leases]
            steady = lags[len(lags) // 10:]  # drop the warm-up tenth
            return {
                "jobs": jobs, "seconds": seconds + 3, "created_s": created_s,
                "completed": seen.completed, "runs_per_s": seen.completed / (seconds + 3),
                "lag_p50_ms": pct(steady, 0.5) * 1000, "lag_p99_ms": pct(steady, 0.99) * 1000,
                "lag_max_ms": max(steady, default=float("nan")) * 1000,
                "lag_median_all_ms": (statistics.median(lags) if lags else float("nan")) * 1000,
            }
        finally:
            c.close()


def table(r: dict[str, float]) -> str:
    return "\n".join([
        f"jobs={r['jobs']} (every second), measured {r['seconds']}s; "
        f"created jobs in {r['created_s']:.1f}s",
        "| metric | value |", "|---|---|",
        f"| runs completed end to end | {r['completed']:.0f} |",
        f"| end-to-end runs/s | {r['runs_per_s']:.0f} |",
        f"| fire lag p50 (instant → lease held) | {r['lag_p50_ms']:.0f} ms |",
        f"| fire lag p99 | {r['lag_p99_ms']:.0f} ms |",
        f"| fire lag max | {r['lag_max_ms']:.0f} ms |",
        f"| fire lag median of all | {r['lag_median_all_ms']:.0f} ms |",
    ])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--seconds", type=int, default=20)
    p.add_argument("--pollers", type=int, default=4)
    args = p.parse_args()
    print(machine_line())
    print(table(asyncio.run(measure(args.jobs, args.seconds, args.pollers))))


if __name__ == "__main__":
    main()
