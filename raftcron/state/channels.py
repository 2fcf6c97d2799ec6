"""Notification channel aggregate (put, delete), the check of a job's channel references,
and the `job.recovered` event.

Recovery: a job that names a channel and had trouble a channel was told about (a run that
failed after its last retry, or an alert raised for it) is noted in `channel_trouble`; its
next success deletes the note and writes one `job.recovered` outbox row, in the same
transaction. Everything here reads the command's `now_ms` and the replicated rows only.
A job names a channel only from protocol level 2 on (core.protocol.NOTIFY_CHANNELS), so
a level-1 state never gets a row here.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from raftcron.core import errors
from raftcron.core.channels import Channel, policy_violation
from raftcron.core.commands import DeleteChannel, PutChannel
from raftcron.core.notify_refs import channel_refs
from raftcron.state.context import ApplyContext, ok, parse_spec, rejected
from raftcron.state.tenants import policy_of

MAX_NAMED_JOBS = 20
RECOVERED = "job.recovered"


def _spec_text(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def jobs_naming(conn: sqlite3.Connection, name: str) -> list[str]:
    """The ids of the jobs whose `notify` names channel `name`, in id order."""
    return [row[0] for row in conn.execute(
        "SELECT id FROM jobs WHERE EXISTS (SELECT 1 FROM json_each(spec, '$.notify') "
        "WHERE type = 'object' AND json_extract(value, '$.channel') = ?) ORDER BY id",
        (name,))]


def check_job_channels(conn: sqlite3.Connection, tenant: str,
                       notify: Any) -> dict[str, Any] | None:
    """A rejection (400, naming `notify.N.channel`) when the job names a channel that does
    not exist in its tenant (one of another tenant reads as absent), else None."""
    for i, name in channel_refs(notify):
        row = conn.execute("SELECT tenant FROM channels WHERE name = ?", (name,)).fetchone()
        if row is None or row[0] != tenant:
            return rejected(errors.INVALID_REFERENCE, f"channel {name!r} does not exist in "
                            f"tenant {tenant!r}", f"notify.{i}.channel")
    return None


def put_channel(ctx: ApplyContext, cmd: PutChannel) -> dict[str, Any]:
    ch = Channel.from_spec(cmd.channel)
    conn = ctx.conn
    row = conn.execute("SELECT tenant FROM channels WHERE name = ?", (ch.name,)).fetchone()
    if row is not None and row[0] != ch.tenant:
        return rejected(errors.ALREADY_EXISTS, f"channel name {ch.name!r} is taken", "name")
    if ch.mute is not None:
        cal = conn.execute("SELECT tenant FROM calendars WHERE name = ?",
                           (ch.mute,)).fetchone()
        if cal is None or cal[0] != ch.tenant:
            return rejected(errors.INVALID_REFERENCE, f"calendar {ch.mute!r} does not exist "
                            f"in tenant {ch.tenant!r}", "mute")
    violation = policy_violation(policy_of(conn, ch.tenant), ch)
    if violation is not None:
        return rejected(errors.POLICY_DENIED, f"tenant {ch.tenant!r} policy refuses "
                        f"{violation.field}: {violation.message}", violation.field)
    conn.execute(
        "INSERT INTO channels (name, tenant, spec, updated_ms) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, "
        "updated_ms = excluded.updated_ms",
        (ch.name, ch.tenant, _spec_text(ch.to_spec()), cmd.now_ms))
    return ok(name=ch.name, created=row is None)


def delete_channel(ctx: ApplyContext, cmd: DeleteChannel) -> dict[str, Any]:
    conn = ctx.conn
    row = conn.execute("SELECT tenant FROM channels WHERE name = ?", (cmd.name,)).fetchone()
    if row is None or (cmd.tenants is not None and row[0] not in cmd.tenants):
        return rejected(errors.NOT_FOUND, f"channel {cmd.name!r} does not exist", "name")
    users = jobs_naming(conn, cmd.name)
    if users:
        shown = ", ".join(users[:MAX_NAMED_JOBS])
        more = f" and {len(users) - MAX_NAMED_JOBS} more" if len(users) > MAX_NAMED_JOBS else ""
        return rejected(errors.CONFLICT, f"channel {cmd.name!r} is named by jobs {shown}"
                        f"{more}: remove it from their notify first", "name",
                        jobs=users[:MAX_NAMED_JOBS], job_count=len(users))
    conn.execute("DELETE FROM channels WHERE name = ?", (cmd.name,))
    return ok(name=cmd.name, deleted=True)


# --- recovery ------------------------------------------------------------------------------

def _names_channels(spec: dict[str, Any] | None) -> bool:
    return spec is not None and bool(channel_refs(spec.get("notify")))


def note_trouble(ctx: ApplyContext, job_id: str, occ_id: str | None,
                 spec: dict[str, Any] | None, event: str, now_ms: int) -> None:
    """The job's channels were told of trouble (`event`): its next success is a recovery."""
    if not _names_channels(spec):
        return
    ctx.conn.execute(
        "INSERT INTO channel_trouble (job_id, occurrence_id, event, since_ms) "
        "VALUES (?, ?, ?, ?) ON CONFLICT (job_id) DO UPDATE SET "
        "occurrence_id = excluded.occurrence_id, event = excluded.event",
        (job_id, occ_id, event, now_ms))


def note_alert(ctx: ApplyContext, job_id: str | None, occ_id: str | None, kind: str,
               now_ms: int) -> None:
    """An alert raised for a job (state.alerts.open_alert)."""
    if job_id is None:
        return
    row = ctx.conn.execute("SELECT spec FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is not None:
        note_trouble(ctx, job_id, occ_id, parse_spec(row[0]), f"alert:{kind}", now_ms)


def after_success(ctx: ApplyContext, job_id: str, occ_id: str, spec: dict[str, Any] | None,
                  now_ms: int) -> None:
    """A run of the job succeeded: the first one after trouble writes `job.recovered`."""
    if not _names_channels(spec):
        return
    # A SELECT then a DELETE: `DELETE ... RETURNING` needs SQLite 3.35 (db.MIN_SQLITE).
    row = ctx.conn.execute(
        "SELECT occurrence_id, event, since_ms FROM channel_trouble WHERE job_id = ?",
        (job_id,)).fetchone()
    if row is None:
        return
    ctx.conn.execute("DELETE FROM channel_trouble WHERE job_id = ?", (job_id,))
    ctx.enqueue_outbox(RECOVERED, {
        "job_id": job_id, "occurrence_id": occ_id, "after_occurrence_id": row[0],
        "after": row[1], "since_ms": row[2], "at_ms": now_ms}, now_ms)


def forget_job(ctx: ApplyContext, job_id: str) -> None:
    ctx.conn.execute("DELETE FROM channel_trouble WHERE job_id = ?", (job_id,))
