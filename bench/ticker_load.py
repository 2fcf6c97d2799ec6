"""A new leader's ticker loading a large fleet: the part of a whole-cluster restart that
grows with the number of jobs (issue 36: a million jobs, restart to serving ≤ 30 s).

Builds one state database of N `H H * * *` jobs (as `bench/scale.py` creates them, with
the schema a node uses), then times what a leader does before it ticks: `Ticker._reload`
of every job, on its worker thread, beside a thread that stands in for the Raft thread.
Printed: the load's wall time (median of the repetitions), µs per job, the share spent
reading rows, and how long the stand-in's ticks took, which must stay well under an
election timeout.

    python bench/ticker_load.py [--jobs 1000000] [--reps 3] [--db PATH]

`--db` keeps the database between runs (it is built only when missing).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import socket
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import machine_line, write_jobs  # noqa: E402
from raftcron.leader.ticker import JOB_ROW_SQL, Ticker  # noqa: E402

CREATED_MS = 1_764_900_000_000  # 2025-12-05: every job's watermark, as after a batch create


def build(path: Path, jobs: int) -> None:
    write_jobs(path, jobs, {"schedule": "H H * * *", "target": {"shell": "true"}},
               "scale-", created_ms=CREATED_MS, spread_watermarks=True)


class GilWatch:
    """A thread that works as pysyncobj's tick thread does: every 10 ms it wakes and makes
    SYSCALLS_PER_TICK socket round trips, each of which lets go of the GIL and must take
    it back from the loading thread. Records how long each tick took beyond its sleep: a
    leader whose ticks take longer than the election timeout (0.3-0.6 s) is replaced."""

    SYSCALLS_PER_TICK = 40

    def __init__(self) -> None:
        self.worst_s = 0.0
        self.late: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        a, b = socket.socketpair()
        with a, b:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                time.sleep(0.01)
                for _ in range(self.SYSCALLS_PER_TICK):
                    a.send(b"x")
                    b.recv(1)
                late = time.perf_counter() - t0 - 0.01
                self.late.append(late)
                self.worst_s = max(self.worst_s, late)

    def __enter__(self) -> GilWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def read_rows_s(db: Path) -> float:
    conn = sqlite3.connect(db)
    t0 = time.perf_counter()
    conn.execute(JOB_ROW_SQL).fetchall()
    conn.close()
    return time.perf_counter() - t0


def load_once(db: Path) -> tuple[float, int, GilWatch]:
    ticker = Ticker(1, object(), lambda: sqlite3.connect(db))  # type: ignore[arg-type]
    with GilWatch() as watch:
        t0 = time.perf_counter()
        asyncio.run(ticker._reload(None))
        elapsed = time.perf_counter() - t0
    n = len(ticker.planner.jobs)
    del ticker
    gc.unfreeze()
    gc.collect()
    return elapsed, n, watch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--db", type=Path, help="keep the database here (built when missing)")
    args = ap.parse_args()
    print(machine_line())
    sys.setswitchinterval(0.001)  # as a node runs (raftcron.node.main)
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or Path(tmp) / "state.db"
        if not db.exists():
            t0 = time.perf_counter()
            build(db, args.jobs)
            print(f"built {args.jobs:,} jobs in {time.perf_counter() - t0:.1f} s ({db})")
        reads = [read_rows_s(db) for _ in range(args.reps)]
        loads = [load_once(db) for _ in range(args.reps)]
        n = loads[0][1]
        wall = statistics.median(x[0] for x in loads)
        read = statistics.median(reads)
        worst = max(x[2].worst_s for x in loads)
        p99 = statistics.median(sorted(x[2].late)[int(0.99 * len(x[2].late))] for x in loads)
        print(f"| jobs loaded | {n:,} |")
        print(f"| whole load (Ticker._reload), median of {args.reps} | {wall:.2f} s "
              f"({', '.join(f'{x[0]:.2f}' for x in loads)}) |")
        print(f"| per job | {wall / n * 1e6:.1f} µs |")
        print(f"| of which reading the rows (the same SELECT alone) | {read:.2f} s "
              f"({read / wall:.0%}) |")
        print(f"| a Raft-like tick thread beside it ({GilWatch.SYSCALLS_PER_TICK} socket "
              f"round trips every 10 ms): tick p99 / worst | {p99 * 1000:.1f} ms / "
              f"{worst * 1000:.1f} ms |")


if __name__ == "__main__":
    main()
