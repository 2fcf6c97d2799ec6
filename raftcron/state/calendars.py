"""Calendar aggregate (put, delete) and bulk pause/resume of jobs by selector."""

from __future__ import annotations

import json
import sqlite3
import threading
from typing import Any

from raftcron.core import errors
from raftcron.core.calendar import Calendar, CompiledCalendar
from raftcron.core.commands import BulkPause, DeleteCalendar, PutCalendar
from raftcron.state import job_history
from raftcron.state.context import ApplyContext, ok, rejected

# Names of jobs a refusal lists (a calendar named by thousands of jobs is refused naming
# the first of them and how many there are).
MAX_NAMED_JOBS = 20


def _spec_text(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


class CompiledCalendars:
    """Every calendar, compiled, by name, as of the connection it is loaded from.

    Compiling is the costly part, so a calendar is compiled again only when its stored
    spec text differs from the one it was compiled from. Reading the specs is cheap and
    done on every load, so the cache adds no staleness of its own: a load returns the
    calendars as that load's read of `conn` saw them. The ticker and the deadline check
    share one instance from different threads, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._compiled: dict[str, tuple[str, CompiledCalendar]] = {}  # name -> (spec, cal)

    def load(self, conn: sqlite3.Connection) -> dict[str, CompiledCalendar]:
        rows = conn.execute("SELECT name, spec FROM calendars").fetchall()
        with self._lock:
            kept: dict[str, tuple[str, CompiledCalendar]] = {}
            for name, spec in rows:
                held = self._compiled.get(name)
                if held is None or held[0] != spec:
                    held = (spec, Calendar.from_spec(json.loads(spec)).compiled())
                kept[name] = held
            self._compiled = kept
        return {name: cal for name, (_, cal) in kept.items()}


def jobs_naming(conn: sqlite3.Connection, name: str) -> list[str]:
    """The ids of the jobs whose `calendars` list `name`, in id order."""
    return [row[0] for row in conn.execute(
        "SELECT id FROM jobs WHERE json_extract(spec, '$.calendars') IS NOT NULL "
        "AND EXISTS (SELECT 1 FROM json_each(spec, '$.calendars') WHERE value = ?) "
        "ORDER BY id", (name,))]


def check_job_calendars(conn: sqlite3.Connection, tenant: str,
                        names: list[str]) -> dict[str, Any] | None:
    """A rejection when the job names a calendar that does not exist in its tenant (one
    of another tenant reads as absent), else None."""
    for i, name in enumerate(names):
        row = conn.execute("SELECT tenant FROM calendars WHERE name = ?", (name,)).fetchone()
        if row is None or row[0] != tenant:
            return rejected(errors.NOT_FOUND, f"calendar {name!r} does not exist in tenant "
                            f"{tenant!r}", f"calendars.{i}")
    return None


def put_calendar(ctx: ApplyContext, cmd: PutCalendar) -> dict[str, Any]:
    cal = Calendar.from_spec(cmd.calendar)
    row = ctx.conn.execute("SELECT tenant FROM calendars WHERE name = ?",
                           (cal.name,)).fetchone()
    if row is not None and row[0] != cal.tenant:
        return rejected(errors.ALREADY_EXISTS, f"calendar name {cal.name!r} is taken",
                        "name")
    ctx.conn.execute(
        "INSERT INTO calendars (name, tenant, spec, updated_ms) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, "
        "updated_ms = excluded.updated_ms",
        (cal.name, cal.tenant, _spec_text(cal.to_spec()), cmd.now_ms),
    )
    return ok(name=cal.name, created=row is None)


def delete_calendar(ctx: ApplyContext, cmd: DeleteCalendar) -> dict[str, Any]:
    conn = ctx.conn
    row = conn.execute("SELECT tenant FROM calendars WHERE name = ?", (cmd.name,)).fetchone()
    if row is None or (cmd.tenants is not None and row[0] not in cmd.tenants):
        return rejected(errors.NOT_FOUND, f"calendar {cmd.name!r} does not exist", "name")
    users = jobs_naming(conn, cmd.name)
    if users:
        shown = ", ".join(users[:MAX_NAMED_JOBS])
        more = f" and {len(users) - MAX_NAMED_JOBS} more" if len(users) > MAX_NAMED_JOBS else ""
        return rejected(errors.CONFLICT, f"calendar {cmd.name!r} is listed by jobs {shown}"
                        f"{more}: remove it from them first", "name",
                        jobs=users[:MAX_NAMED_JOBS], job_count=len(users))
    muting = [r[0] for r in conn.execute(
        "SELECT name FROM channels WHERE json_extract(spec, '$.mute') = ? ORDER BY name",
        (cmd.name,))]
    if muting:
        return rejected(errors.CONFLICT, f"calendar {cmd.name!r} mutes channels "
                        f"{', '.join(muting[:MAX_NAMED_JOBS])}: remove it from them first",
                        "name", channels=muting[:MAX_NAMED_JOBS])
    conn.execute("DELETE FROM calendars WHERE name = ?", (cmd.name,))
    return ok(name=cmd.name, deleted=True)


def _selected(conn: sqlite3.Connection, cmd: BulkPause) -> list[tuple[str, str, str, int]]:
    """(id, spec, tenant, version) of the jobs the selector names, within the caller's tenants."""
    sel = cmd.selector
    if "tenant" in sel:
        where, params = "tenant = ?", [sel["tenant"]]
    elif "queue" in sel:
        where, params = "queue = ?", [sel["queue"]]
    else:
        key, value = sel["label"]
        where, params = "json_extract(spec, '$.labels.' || json_quote(?)) = ?", [key, value]
    if cmd.tenants is not None:
        where += f" AND tenant IN ({','.join('?' * len(cmd.tenants))})"
        params += list(cmd.tenants)
    return list(conn.execute(f"SELECT id, spec, tenant, version FROM jobs WHERE {where} "
                             "ORDER BY id", params))


def bulk_pause(ctx: ApplyContext, cmd: BulkPause) -> dict[str, Any]:
    """Pause or resume every selected job whose state differs; each job reached records
    who and why. The result lists the jobs changed (the ticker reloads them)."""
    conn = ctx.conn
    action = "paused" if cmd.paused else "resumed"
    changed: list[str] = []
    matched = 0
    for job_id, spec_text, tenant, version in _selected(conn, cmd):
        matched += 1
        spec = json.loads(spec_text)
        if bool(spec.get("paused")) != cmd.paused:
            spec["paused"] = cmd.paused
            text = _spec_text(spec)
            conn.execute("UPDATE jobs SET paused = ?, spec = ?, updated_ms = ? WHERE id = ?",
                         (int(cmd.paused), text, cmd.now_ms, job_id))
            job_history.record(ctx, job_id=job_id, tenant=tenant, version=version,
                               kind="bulk_pause" if cmd.paused else "bulk_resume",
                               who=cmd.who, at_ms=cmd.now_ms, spec=text, note=cmd.note)
            changed.append(job_id)
        conn.execute(
            "INSERT INTO job_pause_notes (job_id, action, who, note, at_ms) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (job_id) DO UPDATE SET "
            "action = excluded.action, who = excluded.who, note = excluded.note, "
            "at_ms = excluded.at_ms",
            (job_id, action, cmd.who, cmd.note, cmd.now_ms))
    return ok(action=action, matched=matched, job_ids=changed, changed=len(changed))
