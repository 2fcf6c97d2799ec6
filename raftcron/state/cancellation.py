"""Cancelling a run by hand (POST /v1/occurrences/{id}/cancel).

A queued run (its attempt pending, a retry waiting included) ends `cancelled` at once. A
running attempt gets `cancel_requested`: its worker learns it from its next heartbeat
answer, kills the process group (SIGTERM, then SIGKILL after a grace period) and reports.
The cancellation row is the committed decision, and it fences what comes later: the
completion the worker reports ends the run `cancelled` whatever its outcome (a success
that raced the kill included), and a lease that expires instead is not retried.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from raftcron.core import errors, identity
from raftcron.core.commands import CancelOccurrence
from raftcron.state.context import ApplyContext, ok, rejected

FINISHED = ("succeeded", "failed", "skipped", "cancelled")


def cancel_reason(who: str) -> str:
    return f"cancelled by {who}"


def cancelled_by(conn: sqlite3.Connection, occurrence_id: str) -> str | None:
    """The occurrence's reason if a person cancelled it (None: nobody did)."""
    row = conn.execute("SELECT who FROM cancellations WHERE occurrence_id = ?",
                       (occurrence_id,)).fetchone()
    return None if row is None else cancel_reason(row[0])


def end_cancelled(ctx: ApplyContext, occurrence_id: str, job_id: str, now_ms: int) -> None:
    """End an occurrence that a person cancelled: `cancelled`, with who as its reason, and
    an `occurrence.cancelled` outbox row (to the cluster's receivers and the job's
    `notify` URLs) saying who and why, so a run that will not happen is not silent."""
    who, note = ctx.conn.execute("SELECT who, note FROM cancellations WHERE occurrence_id = ?",
                                 (occurrence_id,)).fetchone()
    ctx.conn.execute("UPDATE occurrences SET status = 'cancelled', reason = ?, finished_ms = ? "
                     "WHERE id = ?", (cancel_reason(who), now_ms, occurrence_id))
    ctx.enqueue_outbox("occurrence.cancelled", {
        "job_id": job_id, "occurrence_id": occurrence_id, "by": who, "note": note}, now_ms)


def cancel_occurrence(ctx: ApplyContext, cmd: CancelOccurrence) -> dict[str, Any]:
    conn = ctx.conn
    row = conn.execute("SELECT status, tenant, job_id FROM occurrences WHERE id = ?",
                       (cmd.occurrence_id,)).fetchone()
    if row is None or (cmd.tenants is not None and row[1] not in cmd.tenants):
        return rejected(errors.NOT_FOUND, f"occurrence {cmd.occurrence_id!r} does not exist",
                        "id")
    status = row[0]
    if status in FINISHED:
        return rejected(errors.INVALID_STATE, f"the run already ended: it is {status}",
                        "status", status=status)
    if conn.execute("SELECT 1 FROM cancellations WHERE occurrence_id = ?",
                    (cmd.occurrence_id,)).fetchone():
        # Asked before and still running (its worker has not reported yet): nothing new.
        return ok(status=status, cancel_requested=True, already_requested=True)
    conn.execute("INSERT INTO cancellations (occurrence_id, who, note, at_ms) "
                 "VALUES (?, ?, ?, ?)", (cmd.occurrence_id, cmd.who, cmd.note, cmd.now_ms))
    reason = cancel_reason(cmd.who)
    lo, hi = identity.occurrence_attempts(cmd.occurrence_id)
    conn.execute(
        "UPDATE attempts SET status = 'cancelled', error = ?, finished_ms = ? "
        "WHERE id >= ? AND id < ? AND status = 'pending'", (reason, cmd.now_ms, lo, hi))
    running = conn.execute(
        "UPDATE attempts SET cancel_requested = 1 "
        "WHERE id >= ? AND id < ? AND status = 'running'", (lo, hi)).rowcount
    if running:
        return ok(status="running", cancel_requested=True, already_requested=False)
    end_cancelled(ctx, cmd.occurrence_id, row[2], cmd.now_ms)
    return ok(status="cancelled", cancel_requested=False, already_requested=False)
