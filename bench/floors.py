"""The floors an end-to-end figure is printed beside, each measured on this machine in the
same run, right after the figure (issue 36):

- Raft alone: pysyncobj's bare commit rate of claim-sized items, three processes on
  loopback, encrypted as raftcron runs (bench/floor.py). A run is an item of three
  entries (its claim, lease and completion), so Raft alone carries at most a third of it
  in runs a second.
- SQLite alone: a bare table's rows written a second, each row inserted and then updated
  by its key in transactions of 1,000, with the node's settings (WAL, synchronous NORMAL).
  A run writes ROW_WRITES_PER_RUN rows on every node, and three replicas share the cores.
- One node's apply of a run's three entries through the real state machine
  (bench/apply_floor.py); three replicas on the machine's cores complete at most
  cores x that / 3.

Each line names the floor, its runs/s ceiling and the measured figure's ratio to it.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from pathlib import Path

from bench import apply_floor, floor
from bench.claim_apply import job_ids

REPLICAS = 3
# A run is an item of three entries: its claim, its lease and its completion.
ENTRIES_PER_RUN = 3
ITEMS = 1000
ITEM_BYTES = 60
# A run's rows on each node: its occurrence and attempt inserted (claim), both set running
# (lease), both ended (completion).
ROW_WRITES_PER_RUN = 6


def raft_items_per_s(seconds: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        entries = floor.measure("floor-secret", ITEMS * ITEM_BYTES, seconds, Path(tmp))
    return entries * ITEMS


def sqlite_rows_per_s(rows: int = 200_000) -> float:
    """Rows written a second into a bare table: each inserted, then updated by its key."""
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(os.path.join(tmp, "bare.db"), isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, job TEXT NOT NULL, "
                     "status TEXT NOT NULL, due_ms INTEGER NOT NULL, token INTEGER) "
                     "WITHOUT ROWID")
        ids = [f"job-{i:07d}@2026-01-01T00:00:00Z~1" for i in range(rows)]
        started = time.perf_counter()
        for sql in ("INSERT INTO runs VALUES (?, 'job', 'pending', 0, NULL)",
                    "UPDATE runs SET status = 'running', token = 7 WHERE id = ?"):
            for lo in range(0, rows, 1000):
                conn.execute("BEGIN")
                conn.executemany(sql, [(i,) for i in ids[lo:lo + 1000]])
                conn.execute("COMMIT")
        elapsed = time.perf_counter() - started
        conn.close()
    return 2 * rows / elapsed


def apply_runs_per_s(rounds: int = 30) -> float:
    """One node's runs a second through the state machine: claim, lease, complete."""
    with tempfile.TemporaryDirectory() as tmp:
        spent = apply_floor.one_rep(tmp, 0, job_ids(ITEMS), rounds)
    return ITEMS * rounds / sum(spent.values())


def floor_lines(runs_per_s: float, raft_seconds: float = 5.0) -> list[str]:
    """The three floors, measured now, as a table beside `runs_per_s`."""
    # Each replica applies on one thread: more cores than replicas add nothing.
    cores = min(os.cpu_count() or 1, REPLICAS)
    raft = raft_items_per_s(raft_seconds)
    rows = sqlite_rows_per_s()
    apply = apply_runs_per_s()
    ceilings = [
        ("Raft alone (pysyncobj, encrypted, 1,000 items an entry)",
         f"{raft:,.0f} items/s", raft / ENTRIES_PER_RUN),
        ("SQLite alone (bare rows, insert + update by key)",
         f"{rows:,.0f} rows/s", cores * rows / (REPLICAS * ROW_WRITES_PER_RUN)),
        ("one node's apply of a run's claim, lease and completion",
         f"{apply:,.0f} runs/s", cores * apply / REPLICAS),
    ]
    lines = ["", f"floors on this machine ({cores} cores, {REPLICAS} replicas), measured "
             "just after:", "| floor | measured | runs/s ceiling | measured runs/s / "
             "ceiling |", "|---|---:|---:|---:|"]
    for name, measured, ceiling in ceilings:
        lines.append(f"| {name} | {measured} | {ceiling:,.0f} | {runs_per_s / ceiling:.2f} |")
    lines.append(f"(ceilings: Raft items/s / {ENTRIES_PER_RUN} entries a run; SQLite {cores} "
                 f"cores x rows/s / ({REPLICAS} replicas x {ROW_WRITES_PER_RUN} rows a run); apply "
                 f"{cores} cores x runs/s / {REPLICAS} replicas)")
    return lines
