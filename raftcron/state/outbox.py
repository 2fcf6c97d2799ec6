"""Per-receiver webhook delivery state (the `outbox_deliveries` table).

The leader routes each new outbox row to its receivers (`RouteOutbox`), then reports the
outcome of every delivery (`AckDeliveries`). Backoff, give-up and the receiver's alert are
decided here, from the times and bounds carried in the command.
"""

from __future__ import annotations

from typing import Any

from raftcron.core import delivery, errors
from raftcron.core.commands import AckDeliveries, RaiseAlert, ResolveAlert, RetryOutbox, RouteOutbox
from raftcron.state import alerts
from raftcron.state.context import ApplyContext, ok, rejected

MAX_ERROR = 1000


def route_outbox(ctx: ApplyContext, cmd: RouteOutbox) -> dict[str, Any]:
    conn = ctx.conn
    routed = 0
    for outbox_id, receivers in cmd.routes:
        row = conn.execute("SELECT status FROM outbox WHERE id = ?", (outbox_id,)).fetchone()
        if row is None or row[0] != "pending":
            continue
        if conn.execute("SELECT 1 FROM outbox_deliveries WHERE outbox_id = ? LIMIT 1",
                        (outbox_id,)).fetchone():
            continue  # routed already (by an earlier leader)
        conn.executemany(
            "INSERT OR IGNORE INTO outbox_deliveries (outbox_id, receiver, signer, status, "
            "attempts, next_ms, first_ms, updated_ms) VALUES (?, ?, ?, 'pending', 0, ?, ?, ?)",
            [(outbox_id, r[0], r[1], cmd.now_ms, cmd.now_ms, cmd.now_ms)
             for r in receivers if len(r) == 2],
        )
        # A muted channel's delivery (leader.channels): held until its window ends, then
        # sent in one summary with the others held for that receiver until then.
        conn.executemany(
            "INSERT OR IGNORE INTO outbox_deliveries (outbox_id, receiver, signer, status, "
            "attempts, next_ms, first_ms, updated_ms, held_ms) "
            "VALUES (?, ?, ?, 'pending', 0, ?, ?, ?, ?)",
            # Its give-up bound counts from the window's end, when it is first due.
            [(outbox_id, r[0], r[1], max(r[2], cmd.now_ms), max(r[2], cmd.now_ms),
              cmd.now_ms, r[2]) for r in receivers if len(r) == 3 and type(r[2]) is int],
        )
        if not receivers:
            _finish(ctx, outbox_id, cmd.now_ms)
        routed += 1
    return ok(routed=routed)


def ack_deliveries(ctx: ApplyContext, cmd: AckDeliveries) -> dict[str, Any]:
    conn = ctx.conn
    touched: set[int] = set()
    delivered_to: set[str] = set()
    dead: list[tuple[int, str, int, str]] = []
    for outbox_id, receiver, succeeded, error in cmd.results:
        row = conn.execute(
            "SELECT status, attempts, first_ms FROM outbox_deliveries "
            "WHERE outbox_id = ? AND receiver = ?", (outbox_id, receiver)).fetchone()
        if row is None or row[0] != "pending":
            continue  # a duplicate outcome, or retried/pruned meanwhile
        attempts = row[1] + 1
        touched.add(outbox_id)
        if succeeded:
            conn.execute(
                "UPDATE outbox_deliveries SET status = 'delivered', attempts = ?, "
                "updated_ms = ? WHERE outbox_id = ? AND receiver = ?",
                (attempts, cmd.now_ms, outbox_id, receiver))
            delivered_to.add(receiver)
            continue
        gone = delivery.gives_up(attempts, row[2], cmd.now_ms, cmd.give_up_ms, cmd.max_attempts)
        conn.execute(
            "UPDATE outbox_deliveries SET status = ?, attempts = ?, next_ms = ?, "
            "last_error = ?, updated_ms = ? WHERE outbox_id = ? AND receiver = ?",
            ("dead" if gone else "pending", attempts,
             cmd.now_ms + delivery.backoff_ms(attempts), str(error)[:MAX_ERROR], cmd.now_ms,
             outbox_id, receiver))
        if gone:
            dead.append((outbox_id, receiver, attempts, str(error)))
    for outbox_id in sorted(touched):
        if conn.execute("SELECT 1 FROM outbox_deliveries WHERE outbox_id = ? AND "
                        "status = 'pending' LIMIT 1", (outbox_id,)).fetchone() is None:
            _finish(ctx, outbox_id, cmd.now_ms)
    for receiver in sorted(delivered_to):
        alert_id = delivery.dead_alert_id(receiver)
        if conn.execute("SELECT 1 FROM alerts WHERE id = ? AND status = 'open'",
                        (alert_id,)).fetchone():
            alerts.resolve_alert(ctx, ResolveAlert(
                cmd.epoch, cmd.now_ms, alert_id,
                f"webhook receiver {delivery.redact_url(receiver)} answered again"))
    for outbox_id, receiver, attempts, error in dead:
        alerts.raise_alert(ctx, RaiseAlert(
            cmd.epoch, cmd.now_ms, delivery.dead_alert_id(receiver), delivery.DEAD_ALERT_KIND,
            reason="dead",
            message=(f"gave up delivering outbox row {outbox_id} to webhook receiver "
                     f"{delivery.redact_url(receiver)} after {attempts} attempts "
                     f"(last: {_redact_error(error, receiver)})")[:MAX_ERROR]))
    return ok(acked=len(touched), dead=len(dead))


def _redact_error(error: str, receiver: str) -> str:
    """Errors name the URL they were about; the alert goes to other receivers."""
    return error.replace(receiver, delivery.redact_url(receiver))


def _finish(ctx: ApplyContext, outbox_id: int, now_ms: int) -> None:
    ctx.conn.execute(
        "UPDATE outbox SET status = 'delivered', delivered_ms = ? WHERE id = ?",
        (now_ms, outbox_id))


def retry_outbox(ctx: ApplyContext, cmd: RetryOutbox) -> dict[str, Any]:
    conn = ctx.conn
    if conn.execute("SELECT 1 FROM outbox WHERE id = ?", (cmd.outbox_id,)).fetchone() is None:
        return rejected(errors.NOT_FOUND, f"outbox row {cmd.outbox_id} does not exist", "id")
    where, params = "outbox_id = ? AND status = 'dead'", [cmd.outbox_id]
    if cmd.receiver is not None:
        where += " AND receiver = ?"
        params.append(cmd.receiver)
    count = conn.execute(f"UPDATE outbox_deliveries SET status = 'pending', attempts = 0, "
                         f"next_ms = ?, first_ms = ?, updated_ms = ? WHERE {where}",
                         (cmd.now_ms, cmd.now_ms, cmd.now_ms, *params)).rowcount
    if count == 0:
        what = f"to {cmd.receiver!r}" if cmd.receiver is not None else "to any receiver"
        return rejected(errors.INVALID_STATE,
                        f"outbox row {cmd.outbox_id} has no dead delivery {what}",
                        "receiver" if cmd.receiver is not None else "id")
    conn.execute("UPDATE outbox SET status = 'pending', delivered_ms = NULL WHERE id = ?",
                 (cmd.outbox_id,))
    return ok(outbox_id=cmd.outbox_id, retried=count)
