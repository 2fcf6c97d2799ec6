"""One real worker against a real three-node cluster: runs/s and lag.

Run: python bench/worker.py [--jobs 200] [--concurrency 4] [--seconds 20] [--warmup 5]
                            [--only pipeline,no-pipeline,threaded] [--out FILE]
                            [--profile DIR]

For each mode (by default both, one after the other, each on a fresh cluster) this starts
three `raftcron node` processes (as `raftcron up` does), adds `--jobs` every-second shell
jobs on one queue, starts one `raftcron worker --concurrency N` process and, after
`--warmup` seconds, looks at the runs due during the next `--seconds` seconds:

  runs/s   runs of those instants that succeeded, per second of the window
  done/s   runs of any instant that finished during the window, per second: what the
           worker got through, even when it is too far behind to reach the window's own
           instants
  lag      nominal instant → the job's process started (by the worker's clock, which is
           this machine's): p50, p99, max. A run not started when the state is read
           (`--grace` seconds after the window) counts with the time it has waited by
           then, and a figure that includes such runs is only a lower bound (">=").

The job is `date +%s.%N`: as trivial as `true`, and it prints the instant its process
started, so the lag is measured where it matters, not at lease or completion time.

Modes: `pipeline` is the worker as shipped (leases ahead: `--prefetch` defaults to the
concurrency, acknowledgements and completions off the slots' path); `no-pipeline` is
`--prefetch 0`, the worker leasing only for free slots; `threaded` is `pipeline` waiting
for its job processes as Python 3.11's asyncio does by default, a thread each
(raftcron.worker.child_watch). One run per mode, not a median of several: the machine is
shared, so rerun before trusting a small difference.

After the modes, the spawn floor is measured (`--floor-seconds`, 0 to skip): how many of
the bench's job processes this machine starts and reaps a second at the worker's
concurrency, waiting for them as the worker does (bench/spawn_floor.py), with nothing else
running; each mode's runs/s is printed as a ratio to it and to issue 36's goal of 1,000.

`--profile DIR` samples the nodes and the worker with py-spy through the window and prints
where their CPU went (bench/profiling.py).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.profiling import record_blocking, summarize  # noqa: E402
from bench.spawn_floor import spawns_per_s  # noqa: E402
from raftcron.config import load_config  # noqa: E402
from raftcron.testing import LocalCluster  # noqa: E402
from raftcron.worker.child_watch import watch_children_with_pidfds  # noqa: E402

TARGET_RUNS_S = 200
TARGET_P99_S = 1.0
GOAL_RUNS_S = 1000  # issue 36: one worker, trivial shell runs, p99 <= 1 s
JOB_COMMAND = "date +%s.%N"
WORKERS = 1
QUEUE = "bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")
# mode: (worker arguments, worker environment)
MODES: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "pipeline": ((), {}),
    "no-pipeline": (("--prefetch", "0"), {}),
    # Python 3.11's own way of waiting for job processes, a thread each, for comparison
    # (raftcron.worker.child_watch); the same as `pipeline` on 3.12 and later.
    "threaded": ((), {"RAFTCRON_WORKER_CHILD_WATCHER": "threaded"}),
}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def add_jobs(c: LocalCluster, nid: str, n: int) -> None:
    for i in range(n):
        body = {"id": f"w{i:04d}", "schedule": {"cron": "* * * * * *"}, "queue": QUEUE,
                "target": {"shell": JOB_COMMAND}}
        r = c.post(nid, "/v1/jobs", body)
        assert r.status_code in (200, 201), r.text


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the process's own CPU seconds, those of its children it has reaped), user+system."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return own, (int(fields[13]) + int(fields[14])) / CLK_TCK


def measure(c: LocalCluster, jobs: int, start_ms: int, end_ms: int) -> dict[str, Any]:
    """Read one node's SQLite state (read-only) for the instants in [start, end)."""
    path = load_config(str(c.configs[0])).db_path
    read_s = time.time()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT o.scheduled_for_ms, a.output FROM occurrences o "
            "JOIN attempts a ON a.occurrence_id = o.id AND a.status = 'succeeded' "
            "WHERE o.kind = 'scheduled' AND o.scheduled_for_ms >= ? AND o.scheduled_for_ms < ?",
            (start_ms, end_ms)).fetchall()
        ended = dict(conn.execute(
            "SELECT status, count(*) FROM attempts WHERE finished_ms >= ? AND finished_ms < ? "
            "GROUP BY status", (start_ms, end_ms)).fetchall())
        done = ended.get("succeeded", 0)
    finally:
        conn.close()
    lags: list[float] = []
    ran_at: dict[int, int] = {}
    for scheduled, output in rows:
        try:
            lags.append(max(0.0, float(output.split()[0]) - scheduled / 1000))
        except (AttributeError, ValueError, IndexError):
            continue
        ran_at[scheduled] = ran_at.get(scheduled, 0) + 1
    waited = [read_s - t / 1000 for t in range(start_ms, end_ms, 1000)
              for _ in range(jobs - ran_at.get(t, 0))]
    return {"ran_lags": lags, "unstarted_waits": waited, "done": done, "ended": ended}


def run_mode(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rc-bench-worker-") as tmp:
        c = LocalCluster(Path(tmp))
        try:
            c.start()
            leader = c.wait_leader(timeout=60)
            c.wait_serving()
            # The worker first: a backlog built while the jobs are added would be measured.
            worker_args, worker_env = MODES[mode]
            c.worker_env.update(worker_env)
            worker = c.start_worker("bench-w1", concurrency=args.concurrency, queues=QUEUE,
                                    extra_args=worker_args)
            add_jobs(c, leader, args.jobs)
            time.sleep(args.warmup)
            start_ms = (int(time.time()) + 1) * 1000
            end_ms = start_ms + args.seconds * 1000
            sampler = None
            if args.profile:
                pids = {nid: proc.pid for nid, proc in c.procs.items()}
                pids[f"worker ({mode})"] = worker.pid
                sampler = threading.Thread(target=record_blocking, args=(
                    pids, args.seconds, args.profile / mode, start_ms / 1000))
                sampler.start()
            time.sleep(max(0.0, start_ms / 1000 - time.time()))
            procs = {**{nid: proc.pid for nid, proc in c.procs.items()}, "worker": worker.pid}
            cpu_before = {name: cpu_seconds(pid) for name, pid in procs.items()}
            time.sleep(max(0.0, end_ms / 1000 - time.time()))
            cores = {name: (cpu_seconds(pid)[0] - cpu_before[name][0]) / args.seconds
                     for name, pid in procs.items()}
            cores["job processes"] = (cpu_seconds(worker.pid)[1]
                                      - cpu_before["worker"][1]) / args.seconds
            time.sleep(args.grace)
            if sampler is not None:
                sampler.join()
            got = measure(c, args.jobs, start_ms, end_ms)
        finally:
            c.close()
    ran, waited = got["ran_lags"], got["unstarted_waits"]
    lags = sorted(ran + waited)
    floor = min(waited, default=math.inf)  # figures at or past it include unstarted runs
    result = {"mode": mode, "cores": cores, "ended": got["ended"], "due": len(lags),
              "ran": len(ran), "unstarted": len(waited),
              "runs_s": len(ran) / args.seconds, "done_s": got["done"] / args.seconds}
    for name, value in (("p50", quantile(lags, 0.5)), ("p99", quantile(lags, 0.99)),
                        ("max", lags[-1])):
        result[name] = (value, value >= floor)
    return result


def spawn_floor_runs_s(concurrency: int, seconds: float) -> tuple[float, str]:
    """How many of the bench's job processes this machine starts and reaps a second, at
    the worker's concurrency, and the child watcher: the one `raftcron worker` chooses
    in this environment (raftcron.worker.child_watch), so it waits as the worker does."""
    async def measure() -> tuple[float, str]:
        watcher = watch_children_with_pidfds(asyncio.get_running_loop())
        return await spawns_per_s(["/bin/sh", "-c", JOB_COMMAND], concurrency, seconds), watcher

    return asyncio.run(measure())


def report(results: list[dict[str, Any]], args: argparse.Namespace, command: str,
           floor: tuple[float, str] | None = None) -> str:
    lines = [
        f"$ {command}",
        f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')} on {platform.node()}: "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}; 3 nodes and 1 worker on loopback",
        f"# {args.jobs} every-second shell jobs, one worker of concurrency "
        f"{args.concurrency}, window {args.seconds} s after {args.warmup} s warm-up; "
        f"target {TARGET_RUNS_S} runs/s at p99 <= {TARGET_P99_S:g} s",
        "",
        f"{'mode':<12} {'due':>6} {'ran':>6} {'unstarted':>9} {'runs/s':>7} {'done/s':>7} "
        f"{'lag p50':>9} {'lag p99':>9} {'lag max':>9}",
    ]

    def fig(value: tuple[float, bool]) -> str:
        return f"{'>=' if value[1] else ''}{value[0]:.3f}"

    for r in results:
        lines.append(f"{r['mode']:<12} {r['due']:>6} {r['ran']:>6} {r['unstarted']:>9} "
                     f"{r['runs_s']:>7.1f} {r['done_s']:>7.1f} {fig(r['p50']):>9} "
                     f"{fig(r['p99']):>9} {fig(r['max']):>9}")
    lines.append("")
    lines.append("cores used in the window (CPU seconds / window seconds; /proc):")
    for r in results:
        lines.append(f"  {r['mode']:<12} " + ", ".join(
            f"{name} {used:.2f}" for name, used in r["cores"].items())
            + f"; all {sum(r['cores'].values()):.2f} of {os.cpu_count()}")
    lines.append("attempts that ended in the window, by status:")
    for r in results:
        lines.append(f"  {r['mode']:<12} " + ", ".join(
            f"{status} {n}" for status, n in sorted(r["ended"].items())))
    if floor is not None:
        spawns, watcher = floor
        lines.append("")
        lines.append(f"spawn floor, measured just after with nothing else running: "
                     f"{spawns:,.0f} runs/s of `/bin/sh -c '{JOB_COMMAND}'` at "
                     f"{args.concurrency} in flight ({watcher} child watcher, as "
                     "the worker waits)")
        for r in results:
            lines.append(f"  {r['mode']:<12} runs/s / floor {r['runs_s'] / spawns:.2f}; "
                         f"runs/s / goal {GOAL_RUNS_S:,} {r['runs_s'] / GOAL_RUNS_S:.2f} "
                         f"({WORKERS} worker)")
        lines.append(f"  goal {GOAL_RUNS_S:,} / floor {GOAL_RUNS_S / spawns:.2f}")
    first = results[0]
    if len(results) > 1:
        lines.append("")
    for other in results[1:]:
        if other["done_s"]:
            lines.append(f"{first['mode']} / {other['mode']} done/s: "
                         f"{first['done_s'] / other['done_s']:.2f}")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--seconds", type=int, default=20)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--grace", type=float, default=3.0,
                   help="seconds after the window before the state is read")
    p.add_argument("--only", help="modes, comma-separated, of: " + ", ".join(MODES))
    p.add_argument("--out", help="also write the report to this file")
    p.add_argument("--floor-seconds", type=float, default=5.0,
                   help="measure the spawn floor this long after the modes (0: not at all)")
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="sample the processes with py-spy in the window; raw files in DIR")
    args = p.parse_args()
    modes = args.only.split(",") if args.only else ["pipeline", "no-pipeline"]
    if unknown := set(modes) - set(MODES):
        p.error(f"unknown mode(s): {', '.join(sorted(unknown))}")
    results = []
    for mode in modes:
        print(f"running {mode} ...", file=sys.stderr, flush=True)
        results.append(run_mode(mode, args))
    floor = (None if args.floor_seconds <= 0
             else spawn_floor_runs_s(args.concurrency, args.floor_seconds))
    text = report(results, args, "python bench/worker.py " + " ".join(sys.argv[1:]), floor)
    if args.profile:
        text += "\n" + "\n\n".join(summarize(sorted((args.profile / m).glob("*.txt")))
                                    for m in modes) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
