"""Job aggregate: create, edit, delete, pause, resume."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from raftcron.core import errors, identity
from raftcron.core.commands import CreateJobs, DeleteJob, PauseJob, PutJob, ResumeJob
from raftcron.core.model import Job
from raftcron.core.notify_refs import channel_refs
from raftcron.state import job_history, run_alerts
from raftcron.state.calendars import check_job_calendars
from raftcron.state.chains import check_after
from raftcron.state.channels import check_job_channels
from raftcron.state.channels import forget_job as forget_channel_trouble
from raftcron.state.context import ApplyContext, ok, rejected
from raftcron.state.tenants import TenantUsage, check_job_policy

JOB_COLUMNS = "id, tenant, version, spec, paused, queue, watermark_ms, created_ms, updated_ms"


def load_job(conn: sqlite3.Connection, job_id: str) -> sqlite3.Row | tuple | None:
    return conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()


def job_summary(row: tuple) -> dict[str, Any]:
    return {"job_id": row[0], "version": row[2], "paused": bool(row[4])}


def spec_json(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def create_job(ctx: ApplyContext, job: Job, row: tuple | None, now_ms: int,
               who: str | None = None, usage: TenantUsage | None = None) -> dict[str, Any]:
    """`usage`: the quota counts of the command creating it (one per command)."""
    if row is not None:
        return rejected(errors.ALREADY_EXISTS, f"job {job.id!r} already exists", "id")
    spec = job.with_version(1).to_spec()
    usage = usage or TenantUsage(ctx.conn)
    over = (check_job_policy(ctx.conn, job.tenant, spec)
            or check_job_calendars(ctx.conn, job.tenant, list(job.calendars))
            or check_after(ctx.conn, job)
            or check_job_channels(ctx.conn, job.tenant, job.notify)
            or usage.refuse_create(job.tenant, spec))
    if over is not None:
        return over
    usage.created(job.tenant, spec)
    # A re-created job id must not re-claim instants its earlier life already has.
    newest = ctx.conn.execute(
        "SELECT scheduled_for_ms FROM occurrences WHERE id >= ? AND id < ? "
        "ORDER BY id DESC LIMIT 1",
        identity.job_scheduled_occurrences(job.id),
    ).fetchone()
    watermark = max(now_ms, newest[0] if newest else 0)
    text = spec_json(spec)
    ctx.conn.execute(
        f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES (?, ?, 1, ?, ?, ?, ?, ?, ?)",
        (job.id, job.tenant, text, int(job.paused), job.queue, watermark, now_ms, now_ms),
    )
    job_history.record(ctx, job_id=job.id, tenant=job.tenant, version=1, kind="create",
                       who=who, at_ms=now_ms, spec=text)
    return ok(job_id=job.id, version=1, created=True)


def create_jobs(ctx: ApplyContext, cmd: CreateJobs) -> dict[str, Any]:
    """Each job is created or refused on its own (exists, quota); one result per job, in
    order. Ids repeated within the batch: the first wins, later ones are `already_exists`."""
    results = []
    usage = TenantUsage(ctx.conn)
    for spec in cmd.jobs:
        job = Job.from_spec(spec)
        results.append(create_job(ctx, job, load_job(ctx.conn, job.id), cmd.now_ms, cmd.who,
                                  usage))
    created = sum(1 for r in results if r["ok"])
    return ok(created=created, results=results)


def put_job(ctx: ApplyContext, cmd: PutJob, usage: TenantUsage | None = None
            ) -> dict[str, Any]:
    """`usage`: the quota counts of a command that creates and edits several jobs."""
    job = Job.from_spec(cmd.job)
    row = load_job(ctx.conn, job.id)
    usage = usage or TenantUsage(ctx.conn)
    if cmd.create:
        return create_job(ctx, job, row, cmd.now_ms, cmd.who, usage)
    if row is None:
        return rejected(errors.NOT_FOUND, f"job {job.id!r} does not exist", "id")
    if cmd.expected_version is not None and row[2] != cmd.expected_version:
        return rejected(
            errors.VERSION_CONFLICT,
            f"job {job.id!r} is at version {row[2]}, not {cmd.expected_version}",
            "version", current_version=row[2],
        )
    if row[1] != job.tenant:
        return rejected(errors.INVALID_STATE, "a job cannot move to another tenant", "tenant")
    version = row[2] + 1
    spec = job.with_version(version).to_spec()
    denied = (check_job_policy(ctx.conn, job.tenant, spec)
              or check_job_calendars(ctx.conn, job.tenant, list(job.calendars))
              or check_after(ctx.conn, job, json.loads(row[3]))
              or check_job_channels(ctx.conn, job.tenant, job.notify)
              or usage.refuse_edit(job.tenant, json.loads(row[3]), spec))
    if denied is not None:
        return denied
    usage.edited(job.tenant, json.loads(row[3]), spec)
    if not channel_refs(job.notify):  # no channel to tell of a recovery any more
        forget_channel_trouble(ctx, job.id)
    # The watermark is kept: an edit takes effect from the next instant not yet claimed.
    text = spec_json(spec)
    ctx.conn.execute(
        "UPDATE jobs SET version = ?, spec = ?, paused = ?, queue = ?, updated_ms = ? "
        "WHERE id = ?",
        (version, text, int(job.paused), job.queue, cmd.now_ms, job.id),
    )
    job_history.record(ctx, job_id=job.id, tenant=job.tenant, version=version, kind="edit",
                       who=cmd.who, at_ms=cmd.now_ms, spec=text)
    return ok(job_id=job.id, version=version, created=False)


def delete_job(ctx: ApplyContext, cmd: DeleteJob) -> dict[str, Any]:
    row = load_job(ctx.conn, cmd.job_id)
    if row is None:
        return rejected(errors.NOT_FOUND, f"job {cmd.job_id!r} does not exist", "id")
    if cmd.expected_version is not None and row[2] != cmd.expected_version:
        return rejected(
            errors.VERSION_CONFLICT,
            f"job {cmd.job_id!r} is at version {row[2]}, not {cmd.expected_version}",
            "version", current_version=row[2],
        )
    c = ctx.conn
    c.execute("DELETE FROM jobs WHERE id = ?", (cmd.job_id,))
    job_history.record(ctx, job_id=cmd.job_id, tenant=row[1], version=row[2], kind="delete",
                       who=cmd.who, at_ms=cmd.now_ms, spec=row[3])
    c.execute("DELETE FROM job_pause_notes WHERE job_id = ?", (cmd.job_id,))
    run_alerts.forget_job(ctx, cmd.job_id)
    c.execute(
        "UPDATE attempts SET status = 'cancelled', finished_ms = ?, error = 'job deleted' "
        "WHERE job_id = ? AND status = 'pending'",
        (cmd.now_ms, cmd.job_id),
    )
    c.execute(
        "UPDATE attempts SET cancel_requested = 1 WHERE job_id = ? AND status = 'running'",
        (cmd.job_id,),
    )
    c.execute(
        "UPDATE occurrences SET status = 'cancelled', reason = 'job deleted', finished_ms = ? "
        "WHERE job_id = ? AND status = 'pending'",
        (cmd.now_ms, cmd.job_id),
    )
    return ok(job_id=cmd.job_id, deleted=True)


def _set_paused(ctx: ApplyContext, job_id: str, paused: bool, now_ms: int,
                who: str | None) -> dict[str, Any]:
    row = load_job(ctx.conn, job_id)
    if row is None:
        return rejected(errors.NOT_FOUND, f"job {job_id!r} does not exist", "id")
    spec = json.loads(row[3])
    spec["paused"] = paused
    text = spec_json(spec)
    ctx.conn.execute(
        "UPDATE jobs SET paused = ?, spec = ?, updated_ms = ? WHERE id = ?",
        (int(paused), text, now_ms, job_id),
    )
    if bool(row[4]) != paused:  # pausing a paused job changes nothing worth a row
        job_history.record(ctx, job_id=job_id, tenant=row[1], version=row[2],
                           kind="pause" if paused else "resume", who=who, at_ms=now_ms,
                           spec=text)
    return ok(job_id=job_id, version=row[2], paused=paused)


def pause_job(ctx: ApplyContext, cmd: PauseJob) -> dict[str, Any]:
    return _set_paused(ctx, cmd.job_id, True, cmd.now_ms, cmd.who)


def resume_job(ctx: ApplyContext, cmd: ResumeJob) -> dict[str, Any]:
    return _set_paused(ctx, cmd.job_id, False, cmd.now_ms, cmd.who)
