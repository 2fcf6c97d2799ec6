"""The floor of a worker's shell runs: how fast this machine starts and reaps processes.

    python bench/spawn_floor.py [--seconds 5] [--parallel 1,2,8,32]

A worker runs each shell target as `/bin/sh -c <command>` in its own process group, and
reaps it; nothing it adds (leasing, heartbeats, reporting) can make runs faster than the
machine forks, execs and reaps. This measures, for --seconds each, with N spawns in flight
at once (asyncio, as the worker does):

  exec true        asyncio.create_subprocess_exec("true"), then wait
  sh -c true       asyncio.create_subprocess_exec("/bin/sh", "-c", "true"), then wait

and prints spawns/s for each N, the median of --repeat runs, and the ratio of `sh -c true`
to the worker's goal of 1,000 runs/s. Each is measured with both ways asyncio can learn
of an exit (raftcron.worker.child_watch): `threaded` (Python 3.11's default, a thread a
child) and `pidfd` (what the worker uses where the kernel has pidfds); `--watchers`
picks.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import machine_line  # noqa: E402
from raftcron.worker.child_watch import pidfds_work  # noqa: E402

GOAL_RUNS_S = 1000


async def spawn_rate(argv: list[str], parallel: int, seconds: float, watcher: str) -> float:
    loop = asyncio.get_running_loop()
    if watcher == "pidfd":
        chosen: asyncio.AbstractChildWatcher = asyncio.PidfdChildWatcher()
    else:
        chosen = asyncio.ThreadedChildWatcher()
    chosen.attach_loop(loop)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_child_watcher(chosen)
    try:
        return await spawns_per_s(argv, parallel, seconds)
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            asyncio.set_child_watcher(None)


async def spawns_per_s(argv: list[str], parallel: int, seconds: float) -> float:
    """How many `argv` processes this event loop starts and reaps a second, `parallel` at
    a time, with whichever child watcher the loop has."""
    done = 0
    stop = time.monotonic() + seconds

    async def one_lane() -> None:
        nonlocal done
        while time.monotonic() < stop:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
            await proc.wait()
            done += 1

    started = time.monotonic()
    await asyncio.gather(*(one_lane() for _ in range(parallel)))
    return done / (time.monotonic() - started)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--parallel", default="1,2,8,32")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--watchers", default="threaded,pidfd")
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args()
    lanes = [int(x) for x in args.parallel.split(",")]
    watchers = args.watchers.split(",")
    if "pidfd" in watchers and (sys.version_info >= (3, 14) or not pidfds_work()):
        watchers.remove("pidfd")
    lines = [f"$ python bench/spawn_floor.py --seconds {args.seconds:g} "
             f"--parallel {args.parallel} --repeat {args.repeat} --watchers {args.watchers}",
             f"# {machine_line()}",
             f"{'command':<12} {'watcher':<9} {'in flight':>9} {'spawns/s (median)':>18} "
             f"{'runs':>24} {'/ goal 1,000':>13}"]
    for name, argv in (("exec true", ["true"]), ("sh -c true", ["/bin/sh", "-c", "true"])):
        for n in lanes:
            rates: dict[str, list[float]] = {w: [] for w in watchers}
            for _ in range(args.repeat):  # side by side: the watchers take turns
                for watcher in watchers:
                    rates[watcher].append(
                        asyncio.run(spawn_rate(argv, n, args.seconds, watcher)))
            for watcher in watchers:
                med = statistics.median(rates[watcher])
                shown = ", ".join(f"{r:,.0f}" for r in rates[watcher])
                lines.append(f"{name:<12} {watcher:<9} {n:>9} {med:>18,.0f} {shown:>24} "
                             f"{med / GOAL_RUNS_S:>13.2f}")
                print(lines[-1], flush=True)
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
