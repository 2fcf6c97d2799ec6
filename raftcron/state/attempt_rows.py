"""An attempt's row as the attempt aggregate reads it: the columns, their positions, and
the loads (one row, many rows in one SQLite step, the jobs' specs)."""

from __future__ import annotations

import sqlite3
from typing import Any

from raftcron.state.context import parse_spec
from raftcron.state.one_step import select_all

ATT_COLS = (
    "id, occurrence_id, job_id, number, status, not_before_ms, worker_id, fencing_token, "
    "heartbeat_ms, lease_expires_ms, runtime_deadline_ms, cancel_requested, exit_code, queue, "
    "ack_deadline_ms, started_ms"
)
N_ATT_COLS = len(ATT_COLS.split(","))
(A_ID, A_OCC, A_JOB, A_NUM, A_STATUS, A_NOT_BEFORE, A_WORKER, A_TOKEN, A_HB, A_EXPIRES,
 A_RUNTIME, A_CANCEL, A_EXIT, A_QUEUE, A_ACK_DEADLINE, A_STARTED) = range(N_ATT_COLS)

TERMINAL = ("succeeded", "failed", "lost", "timed_out", "cancelled")


def load_attempt(conn: sqlite3.Connection, attempt_id: str) -> tuple | None:
    return conn.execute(f"SELECT {ATT_COLS} FROM attempts WHERE id = ?", (attempt_id,)).fetchone()


def job_spec(conn: sqlite3.Connection, job_id: str, cache: dict[str, Any]) -> dict | None:
    if job_id not in cache:
        row = conn.execute("SELECT spec FROM jobs WHERE id = ?", (job_id,)).fetchone()
        cache[job_id] = parse_spec(row[0]) if row else None
    return cache[job_id]


def load_attempts(conn: sqlite3.Connection, ids: list[str]) -> dict[str, tuple]:
    found: dict[str, tuple] = {}
    unique = list(dict.fromkeys(ids))
    for i in range(0, len(unique), 500):
        chunk = unique[i : i + 500]
        marks = ",".join("?" * len(chunk))
        for row in select_all(conn, f"SELECT {ATT_COLS} FROM attempts WHERE id IN ({marks})",
                              chunk, N_ATT_COLS):
            found[row[A_ID]] = row
    return found


def load_specs(conn: sqlite3.Connection, job_ids: set[str], cache: dict[str, Any]) -> None:
    """Fill `cache` (as `job_spec` does) with these jobs' specs, in one read per 500."""
    missing = sorted(job_id for job_id in job_ids if job_id not in cache)
    for i in range(0, len(missing), 500):
        chunk = missing[i : i + 500]
        specs = dict(select_all(conn, "SELECT id, spec FROM jobs WHERE id IN "
                                f"({','.join('?' * len(chunk))})", chunk, 2))
        for job_id in chunk:
            cache[job_id] = parse_spec(specs[job_id]) if job_id in specs else None
