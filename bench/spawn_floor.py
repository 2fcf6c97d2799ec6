"""The floor of a worker's shell runs: how fast this machine starts and reaps processes.

    python bench/spawn_floor.py [--seconds 5] [--parallel 1,2,8,32]

A worker runs each shell target as `/bin/sh -c <command>` in its own process group, and
reaps it; nothing it adds (leasing, heartbeats, reporting) can make runs faster than the
machine forks, execs and reaps. This measures, for --seconds each, with N spawns in flight
at once (asyncio, as the worker does):

  exec true        asyncio.create_subprocess_exec("true"), then wait
  sh -c true       asyncio.create_subprocess_exec("/bin/sh", "-c", "true"), then wait

and prints spawns/s for each N, the median of --repeat runs, and the ratio of `sh -c true`
to the worker's goal of 1,000 runs/s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import machine_line  # noqa: E402

GOAL_RUNS_S = 1000


async def _spawn_loop(argv: list[str], parallel: int, seconds: float) -> float:
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
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args()
    lanes = [int(x) for x in args.parallel.split(",")]
    lines = [f"$ python bench/spawn_floor.py --seconds {args.seconds:g} "
             f"--parallel {args.parallel} --repeat {args.repeat}",
             f"# {machine_line()}",
             f"{'command':<12} {'in flight':>9} {'spawns/s (median)':>18} "
             f"{'runs':>24} {'/ goal 1,000':>13}"]
    for name, argv in (("exec true", ["true"]), ("sh -c true", ["/bin/sh", "-c", "true"])):
        for n in lanes:
            rates = [asyncio.run(_spawn_loop(argv, n, args.seconds))
                     for _ in range(args.repeat)]
            med = statistics.median(rates)
            shown = ", ".join(f"{r:,.0f}" for r in rates)
            lines.append(f"{name:<12} {n:>9} {med:>18,.0f} {shown:>24} "
                         f"{med / GOAL_RUNS_S:>13.2f}")
            print(lines[-1], flush=True)
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        Path(args.out).write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
