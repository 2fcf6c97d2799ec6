"""Alerts, the notification outbox, and retention."""

from __future__ import annotations

from typing import Any

from raftcron.core import errors, identity
from raftcron.core.commands import AckOutbox, Prune, RaiseAlert, ResolveAlert
from raftcron.core.timefmt import ms_to_iso
from raftcron.state.context import ApplyContext, ok, rejected


def _history(ctx: ApplyContext, alert_id: str, event: str, reason: str | None,
             scheduled_for_ms: int | None, message: str, at_ms: int) -> None:
    ctx.conn.execute(
        "INSERT INTO alert_events (alert_id, event, reason, scheduled_for_ms, message, at_ms) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (alert_id, event, reason, scheduled_for_ms, message[:1000] or None, at_ms),
    )


def raise_alert(ctx: ApplyContext, cmd: RaiseAlert) -> dict[str, Any]:
    row = ctx.conn.execute("SELECT status FROM alerts WHERE id = ?", (cmd.alert_id,)).fetchone()
    if row is not None and row[0] == "open":
        return ok(alert_id=cmd.alert_id, raised=False)
    ctx.conn.execute(
        "INSERT INTO alerts (id, kind, job_id, occurrence_id, reason, status, raised_ms) "
        "VALUES (?, ?, ?, ?, ?, 'open', ?) ON CONFLICT (id) DO UPDATE SET status = 'open', "
        "reason = excluded.reason, raised_ms = excluded.raised_ms, resolved_ms = NULL",
        (cmd.alert_id, cmd.kind, cmd.job_id, cmd.occurrence_id, cmd.reason, cmd.now_ms),
    )
    _history(ctx, cmd.alert_id, "raised", cmd.reason, cmd.scheduled_for_ms, cmd.message,
             cmd.now_ms)
    payload: dict[str, Any] = {
        "alert_id": cmd.alert_id, "kind": cmd.kind, "job_id": cmd.job_id,
        "occurrence_id": cmd.occurrence_id, "reason": cmd.reason, "at_ms": cmd.now_ms,
    }
    if cmd.scheduled_for_ms is not None:
        payload["scheduled_for"] = ms_to_iso(cmd.scheduled_for_ms)
    if cmd.message:
        payload["message"] = cmd.message
    ctx.enqueue_outbox("alert.raised", payload, cmd.now_ms)
    return ok(alert_id=cmd.alert_id, raised=True)


def resolve_alert(ctx: ApplyContext, cmd: ResolveAlert) -> dict[str, Any]:
    row = ctx.conn.execute(
        "SELECT status, kind, job_id, occurrence_id FROM alerts WHERE id = ?", (cmd.alert_id,)
    ).fetchone()
    if row is None:
        return rejected(errors.NOT_FOUND, f"alert {cmd.alert_id!r} does not exist")
    if row[0] == "resolved":
        return ok(alert_id=cmd.alert_id, resolved=False)
    ctx.conn.execute(
        "UPDATE alerts SET status = 'resolved', resolved_ms = ? WHERE id = ?",
        (cmd.now_ms, cmd.alert_id),
    )
    _history(ctx, cmd.alert_id, "resolved", None, None, cmd.message, cmd.now_ms)
    payload: dict[str, Any] = {
        "alert_id": cmd.alert_id, "kind": row[1], "job_id": row[2], "occurrence_id": row[3],
        "at_ms": cmd.now_ms,
    }
    if cmd.message:
        payload["message"] = cmd.message
    ctx.enqueue_outbox("alert.resolved", payload, cmd.now_ms)
    return ok(alert_id=cmd.alert_id, resolved=True)


def ack_outbox(ctx: ApplyContext, cmd: AckOutbox) -> dict[str, Any]:
    """Row-level outcome, as leaders before per-receiver delivery (state.outbox) wrote it:
    kept so that their log entries still apply."""
    row = ctx.conn.execute("SELECT status FROM outbox WHERE id = ?", (cmd.outbox_id,)).fetchone()
    if row is None:
        return rejected(errors.NOT_FOUND, f"outbox row {cmd.outbox_id} does not exist")
    if row[0] == "delivered":
        return ok(outbox_id=cmd.outbox_id, delivered=True, duplicate=True)
    if cmd.delivered:
        ctx.conn.execute(
            "UPDATE outbox SET status = 'delivered', attempts = attempts + 1, delivered_ms = ? "
            "WHERE id = ?",
            (cmd.now_ms, cmd.outbox_id),
        )
    else:
        ctx.conn.execute(
            "UPDATE outbox SET attempts = attempts + 1, last_error = ? WHERE id = ?",
            (cmd.error[:1000], cmd.outbox_id),
        )
    return ok(outbox_id=cmd.outbox_id, delivered=cmd.delivered, duplicate=False)


def prune(ctx: ApplyContext, cmd: Prune) -> dict[str, Any]:
    """Delete finished history older than `before_ms`, at most `limit` occurrences."""
    conn = ctx.conn
    ids = [r[0] for r in conn.execute(
        "SELECT id FROM occurrences WHERE finished_ms IS NOT NULL AND finished_ms < ? "
        "AND status IN ('succeeded', 'failed', 'skipped', 'cancelled') "
        "ORDER BY finished_ms, id LIMIT ?",
        (cmd.before_ms, cmd.limit),
    )]
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        marks = ",".join("?" * len(chunk))
        conn.executemany("DELETE FROM attempts WHERE id >= ? AND id < ?",
                         [identity.occurrence_attempts(occ_id) for occ_id in chunk])
        conn.execute(f"DELETE FROM occurrences WHERE id IN ({marks})", chunk)
    conn.execute("DELETE FROM requests WHERE applied_ms < ?", (cmd.before_ms,))
    conn.execute(
        "DELETE FROM alert_events WHERE alert_id IN (SELECT id FROM alerts "
        "WHERE status = 'resolved' AND resolved_ms < ?)", (cmd.before_ms,)
    )
    conn.execute(
        "DELETE FROM alerts WHERE status = 'resolved' AND resolved_ms < ?", (cmd.before_ms,)
    )
    conn.execute(
        "DELETE FROM outbox_deliveries WHERE outbox_id IN (SELECT id FROM outbox "
        "WHERE status = 'delivered' AND delivered_ms < ?)", (cmd.before_ms,)
    )
    conn.execute(
        "DELETE FROM outbox WHERE status = 'delivered' AND delivered_ms < ?", (cmd.before_ms,)
    )
    return ok(pruned_occurrences=len(ids))
