"""`ApplyJobs`: a plan of job creates, edits and deletes applied whole, or not at all.

Each item names the version the plan read (0: the job did not exist), and so does every
job the plan left unchanged. One job that moved since (edited, created or deleted by
someone else), or one item the state refuses (a tenant quota or policy, a calendar that
does not exist), rolls the whole entry back to its savepoint: the result names that job
and nothing of the plan is written. Deterministic: the same entry gives the same result
on every node.
"""

from __future__ import annotations

from typing import Any

from raftcron.core import errors
from raftcron.core.commands import ApplyJobs, DeleteJob, PutJob
from raftcron.core.model import Job
from raftcron.state.context import ApplyContext, ok, rejected
from raftcron.state.jobs import create_job, delete_job, load_job, put_job
from raftcron.state.tenants import TenantUsage


def _version_of(ctx: ApplyContext, job_id: str) -> int:
    row = load_job(ctx.conn, job_id)
    return 0 if row is None else int(row[2])


def _moved(job_id: str, expected: int, now: int) -> dict[str, Any]:
    said = "did not exist" if expected == 0 else f"was at version {expected}"
    is_now = "does not exist" if now == 0 else f"is at version {now}"
    return rejected(errors.VERSION_CONFLICT,
                    f"job {job_id!r} changed since the plan: it {said} and {is_now} now; "
                    "nothing was applied", f"expect.{job_id}", current_version=now)


def apply_jobs(ctx: ApplyContext, cmd: ApplyJobs) -> dict[str, Any]:
    conn = ctx.conn
    conn.execute("SAVEPOINT apply_jobs")
    try:
        result = _apply(ctx, cmd)
    except BaseException:
        conn.execute("ROLLBACK TO apply_jobs")
        conn.execute("RELEASE apply_jobs")
        raise
    if not result["ok"]:
        conn.execute("ROLLBACK TO apply_jobs")
    conn.execute("RELEASE apply_jobs")
    return result


def _apply(ctx: ApplyContext, cmd: ApplyJobs) -> dict[str, Any]:
    for job_id, expected in cmd.unchanged:
        now = _version_of(ctx, job_id)
        if now != expected:
            return _moved(job_id, expected, now)
    created: list[str] = []
    changed: list[str] = []
    usage = TenantUsage(ctx.conn)
    for i, (spec, expected) in enumerate(cmd.puts):
        job = Job.from_spec(spec)
        row = load_job(ctx.conn, job.id)
        now = 0 if row is None else int(row[2])
        if now != expected:
            return _moved(job.id, expected, now)
        if row is None:
            result = create_job(ctx, job, None, cmd.now_ms, cmd.who, usage)
        else:
            result = put_job(ctx, PutJob(cmd.request_id, cmd.now_ms, spec, False, expected,
                                         who=cmd.who), usage)
        if not result["ok"]:
            field = result.get("field")
            return {**result, "field": f"jobs.{i}" + (f".{field}" if field else ""),
                    "message": f"job {job.id!r}: {result.get('message', '')}; nothing was "
                               "applied"}
        (created if row is None else changed).append(job.id)
    deleted: list[str] = []
    for job_id, expected in cmd.deletes:
        now = _version_of(ctx, job_id)
        if now != expected:
            return _moved(job_id, expected, now)
        result = delete_job(ctx, DeleteJob(cmd.request_id, cmd.now_ms, job_id, expected,
                                           who=cmd.who))
        if not result["ok"]:
            return {**result, "message": f"job {job_id!r}: {result.get('message', '')}"}
        deleted.append(job_id)
    return ok(created=created, changed=changed, deleted=deleted)

