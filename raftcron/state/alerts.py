"""Alerts, the notification outbox, and retention."""

from __future__ import annotations

from typing import Any

from raftcron.core import errors, identity
from raftcron.core.commands import AckOutbox, AlertAction, Prune, RaiseAlert, ResolveAlert
from raftcron.core.protocol import ALERT_REOCCURRENCE_LEVEL
from raftcron.core.timefmt import ms_to_iso
from raftcron.state import availability, channels, job_history
from raftcron.state.cluster_level import committed_level
from raftcron.state.context import ApplyContext, ok, rejected


def _history(ctx: ApplyContext, alert_id: str, event: str, reason: str | None,
             scheduled_for_ms: int | None, message: str, at_ms: int) -> None:
    ctx.conn.execute(
        "INSERT INTO alert_events (alert_id, event, reason, scheduled_for_ms, message, at_ms) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (alert_id, event, reason, scheduled_for_ms, message[:1000] or None, at_ms),
    )


def raise_alert(ctx: ApplyContext, cmd: RaiseAlert) -> dict[str, Any]:
    cause = None
    if cmd.deadline_ms is not None and cmd.scheduled_for_ms is not None \
            and cmd.reason in availability.CAUSE_REASONS:
        cause = availability.cause(ctx, cmd.scheduled_for_ms, cmd.deadline_ms)
    raised = open_alert(ctx, cmd.alert_id, cmd.kind, cmd.reason, cmd.now_ms,
                        job_id=cmd.job_id, occurrence_id=cmd.occurrence_id,
                        scheduled_for_ms=cmd.scheduled_for_ms, message=cmd.message,
                        cause=cause)
    return ok(alert_id=cmd.alert_id, raised=raised)


def open_alert(ctx: ApplyContext, alert_id: str, kind: str, reason: str, now_ms: int, *,
               job_id: str | None = None, occurrence_id: str | None = None,
               scheduled_for_ms: int | None = None, message: str = "",
               cause: str | None = None) -> bool:
    """Raise an alert (or raise a resolved one again), with its history row and its
    `alert.raised` webhook. False, and nothing written, when it is open already."""
    row = ctx.conn.execute("SELECT status FROM alerts WHERE id = ?", (alert_id,)).fetchone()
    if row is not None and row[0] == "open":
        return False
    reraised = "" if row is None or not _reraise_takes_occurrence(ctx) else (
        ", occurrence_id = excluded.occurrence_id, cause = excluded.cause")
    ctx.conn.execute(
        "INSERT INTO alerts (id, kind, job_id, occurrence_id, reason, status, raised_ms, cause) "
        "VALUES (?, ?, ?, ?, ?, 'open', ?, ?) ON CONFLICT (id) DO UPDATE SET status = 'open', "
        "reason = excluded.reason, raised_ms = excluded.raised_ms, resolved_ms = NULL, "
        "acked_ms = NULL, acked_by = NULL, ack_note = NULL" + reraised,
        (alert_id, kind, job_id, occurrence_id, reason, now_ms, cause),
    )
    _history(ctx, alert_id, "raised", reason, scheduled_for_ms, message, now_ms)
    payload: dict[str, Any] = {
        "alert_id": alert_id, "kind": kind, "job_id": job_id,
        "occurrence_id": occurrence_id, "reason": reason, "at_ms": now_ms,
    }
    if scheduled_for_ms is not None:
        payload["scheduled_for"] = ms_to_iso(scheduled_for_ms)
    if message:
        payload["message"] = message
    if cause is not None:
        payload["cause"] = cause
    ctx.enqueue_outbox("alert.raised", payload, now_ms)
    channels.note_alert(ctx, job_id, occurrence_id, kind, now_ms)
    return True


def _reraise_takes_occurrence(ctx: ApplyContext) -> bool:
    """Whether an alert raised again takes the new raise's occurrence and cause: not below
    protocol.ALERT_REOCCURRENCE_LEVEL, where a level-1 build, which keeps the first raise's
    occurrence, applies the same log (equal states in a rolling upgrade). Below it no
    raise carries a cause (`RaiseAlert.deadline_ms` is a level-2 field)."""
    return committed_level(ctx.conn) >= ALERT_REOCCURRENCE_LEVEL


def resolve_alert(ctx: ApplyContext, cmd: ResolveAlert) -> dict[str, Any]:
    resolved = close_alert(ctx, cmd.alert_id, cmd.now_ms, cmd.message)
    if resolved is None:
        return rejected(errors.NOT_FOUND, f"alert {cmd.alert_id!r} does not exist")
    return ok(alert_id=cmd.alert_id, resolved=resolved)


def close_alert(ctx: ApplyContext, alert_id: str, now_ms: int, message: str = ""
                ) -> bool | None:
    """Resolve an alert automatically, with its history row and its `alert.resolved`
    webhook. False when it was resolved already; None when it does not exist."""
    row = ctx.conn.execute(
        "SELECT status, kind, job_id, occurrence_id FROM alerts WHERE id = ?", (alert_id,)
    ).fetchone()
    if row is None:
        return None
    if row[0] == "resolved":
        return False
    ctx.conn.execute(
        "UPDATE alerts SET status = 'resolved', resolved_ms = ? WHERE id = ?",
        (now_ms, alert_id),
    )
    _history(ctx, alert_id, "resolved", None, None, message, now_ms)
    payload: dict[str, Any] = {
        "alert_id": alert_id, "kind": row[1], "job_id": row[2], "occurrence_id": row[3],
        "at_ms": now_ms,
    }
    if message:
        payload["message"] = message
    ctx.enqueue_outbox("alert.resolved", payload, now_ms)
    return True


MAX_NOTE = 1000
ALERT_ACTIONS = ("ack", "resolve")


def alert_action(ctx: ApplyContext, cmd: AlertAction) -> dict[str, Any]:
    """A person acknowledges or resolves an alert. Refused (the same on every node) for an
    alert outside `cmd.tenants` (reported as not found, as the API hides it), an alert
    already resolved, and a second acknowledgement of the same raise."""
    row = ctx.conn.execute(
        "SELECT a.status, a.acked_by, a.kind, a.job_id, a.occurrence_id, j.tenant "
        "FROM alerts a LEFT JOIN jobs j ON j.id = a.job_id WHERE a.id = ?", (cmd.alert_id,)
    ).fetchone()
    if row is None or (cmd.tenants is not None and row[5] not in cmd.tenants):
        return rejected(errors.NOT_FOUND, f"alert {cmd.alert_id!r} does not exist", "id")
    if cmd.action not in ALERT_ACTIONS:
        return rejected(errors.INVALID_STATE, f"unknown alert action {cmd.action!r}")
    status, acked_by, kind, job_id, occurrence_id, _tenant = row
    if status == "resolved":
        return rejected(errors.INVALID_STATE, f"alert {cmd.alert_id!r} is already resolved",
                        "id")
    note = cmd.note[:MAX_NOTE]
    if cmd.action == "ack":
        if acked_by is not None:
            return rejected(errors.INVALID_STATE, f"alert {cmd.alert_id!r} is already "
                            f"acknowledged by {acked_by}", "id")
        ctx.conn.execute("UPDATE alerts SET acked_ms = ?, acked_by = ?, ack_note = ? "
                         "WHERE id = ?", (cmd.now_ms, cmd.who, note, cmd.alert_id))
        event = "acknowledged"
    else:
        ctx.conn.execute("UPDATE alerts SET status = 'resolved', resolved_ms = ? WHERE id = ?",
                         (cmd.now_ms, cmd.alert_id))
        event = "resolved"
        ctx.enqueue_outbox("alert.resolved", {
            "alert_id": cmd.alert_id, "kind": kind, "job_id": job_id,
            "occurrence_id": occurrence_id, "at_ms": cmd.now_ms, "message": note,
            "by": cmd.who,
        }, cmd.now_ms)
    ctx.conn.execute(
        "INSERT INTO alert_actions (alert_id, action, who, note, at_ms) VALUES (?, ?, ?, ?, ?)",
        (cmd.alert_id, event, cmd.who, note, cmd.now_ms))
    return ok(alert_id=cmd.alert_id, event=event)


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
    """Delete finished history older than `before_ms`, at most `limit` occurrences (and
    the change history of jobs deleted before it, state.job_history)."""
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
        conn.execute(f"DELETE FROM cancellations WHERE occurrence_id IN ({marks})", chunk)
    conn.execute("DELETE FROM requests WHERE applied_ms < ?", (cmd.before_ms,))
    conn.execute(
        "DELETE FROM alert_actions WHERE alert_id IN (SELECT id FROM alerts "
        "WHERE status = 'resolved' AND resolved_ms < ?)", (cmd.before_ms,)
    )
    conn.execute(
        "DELETE FROM alert_events WHERE alert_id IN (SELECT id FROM alerts "
        "WHERE status = 'resolved' AND resolved_ms < ?)", (cmd.before_ms,)
    )
    conn.execute(
        "DELETE FROM alerts WHERE status = 'resolved' AND resolved_ms < ?", (cmd.before_ms,)
    )
    availability.prune(ctx, cmd.before_ms)
    job_history.prune_deleted(ctx, cmd.before_ms)  # of jobs deleted before it
    conn.execute(
        "DELETE FROM outbox_deliveries WHERE outbox_id IN (SELECT id FROM outbox "
        "WHERE status = 'delivered' AND delivered_ms < ?)", (cmd.before_ms,)
    )
    conn.execute(
        "DELETE FROM outbox WHERE status = 'delivered' AND delivered_ms < ?", (cmd.before_ms,)
    )
    return ok(pruned_occurrences=len(ids))
