"""Bulk SQLite statements row by row versus in one step (raftcron.state.one_step), idle and
beside busy Python threads of the same process.

    python bench/one_step.py [--rows 1000] [--busy 1,2] [--reps 15]

Python's sqlite3 lets go of the GIL at every step: once per row fetched and once per
parameter set of an `executemany`. Beside a busy thread (a node's event loop or its Raft
thread at a herd), each of those steps may wait for the switch interval (the node sets 1 ms)
before it runs again. The one-step forms move the rows as one JSON array. For each shape
it prints the median time of each form and their ratio, idle and with each number of busy
threads.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import machine_line  # noqa: E402
from raftcron.state.db import open_writer  # noqa: E402
from raftcron.state.one_step import select_all, update_all  # noqa: E402

N_ROWS = 40_000  # attempts in the table


def _median_ms(fn: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1000, help="rows per statement")
    p.add_argument("--busy", default="1,2", help="numbers of busy threads to run beside")
    p.add_argument("--reps", type=int, default=15)
    args = p.parse_args()
    print(machine_line())
    sys.setswitchinterval(0.001)  # as the node sets it
    with tempfile.TemporaryDirectory() as tmp:
        conn = open_writer(str(Path(tmp) / "state.db"))
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO attempts (id, occurrence_id, job_id, tenant, queue, number, status, "
            "not_before_ms, created_ms) VALUES (?, ?, ?, 'default', 'herd', 1, 'pending', ?, 0)",
            [(f"job-{i:05d}@1@1", f"job-{i:05d}@1", f"job-{i:05d}", 1000 + i)
             for i in range(N_ROWS)])
        conn.execute("COMMIT")
        step = max(1, N_ROWS // args.rows)
        ids = [f"job-{i:05d}@1@1" for i in range(0, N_ROWS, step)][:args.rows]
        marks = ",".join("?" * len(ids))
        by_id = f"SELECT id, job_id, status, not_before_ms FROM attempts WHERE id IN ({marks})"
        oldest = ("SELECT id, job_id, status, not_before_ms FROM attempts WHERE status = "
                  "'pending' AND queue = 'herd' ORDER BY not_before_ms, id LIMIT ?")

        def write(rows_fn: Callable[[int], None]) -> Callable[[], None]:
            def run() -> None:
                conn.execute("BEGIN")
                rows_fn(int(time.time() * 1000))
                conn.execute("COMMIT")
            return run

        shapes: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
            (f"read {len(ids)} rows by id",
             lambda: conn.execute(by_id, ids).fetchall(),
             lambda: select_all(conn, by_id, ids, 4)),
            (f"read the {4 * len(ids)} oldest due rows",
             lambda: conn.execute(oldest, (4 * len(ids),)).fetchall(),
             lambda: select_all(conn, oldest, (4 * len(ids),), 4)),
            (f"update {len(ids)} rows, one value set",
             write(lambda now: conn.executemany(
                 "UPDATE attempts SET heartbeat_ms = ?, worker_id = ? WHERE id = ?",
                 [(now, "w", i) for i in ids])),
             write(lambda now: update_all(
                 conn, "attempts", "heartbeat_ms = ?", ("worker_id",),
                 [(i, "w") for i in ids], leading=(now,)))),
            (f"update {len(ids)} rows, a value each",
             write(lambda now: conn.executemany(
                 "UPDATE attempts SET heartbeat_ms = ? WHERE id = ?",
                 [(now + k, i) for k, i in enumerate(ids)])),
             write(lambda now: update_all(
                 conn, "attempts", "worker_id = 'w'", ("heartbeat_ms",),
                 [(i, now + k) for k, i in enumerate(ids)]))),
        ]
        assert sorted(conn.execute(by_id, ids).fetchall()) == \
            sorted(select_all(conn, by_id, ids, 4))
        stop = threading.Event()

        def busy() -> None:
            x = 0
            while not stop.is_set():
                for i in range(1000):
                    x += i

        print(f"{'statement':36s} {'busy':>4s} {'row by row ms':>14s} {'one step ms':>12s} "
              f"{'ratio':>7s}")
        threads: list[threading.Thread] = []
        try:
            for n_busy in [0, *(int(b) for b in args.busy.split(",") if b)]:
                while len(threads) < n_busy:
                    threads.append(threading.Thread(target=busy, daemon=True))
                    threads[-1].start()
                for label, by_row, one_step in shapes:
                    a, b = _median_ms(by_row, args.reps), _median_ms(one_step, args.reps)
                    print(f"{label:36s} {n_busy:4d} {a:14.2f} {b:12.2f} {a / b:7.1f}x",
                          flush=True)
        finally:
            stop.set()
            for t in threads:
                t.join()
        conn.close()


if __name__ == "__main__":
    main()
