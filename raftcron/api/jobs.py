"""/v1/jobs routes."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from raftcron.api.auth import (
    can_see,
    principal_of,
    require_tenant_write,
    reveals_secrets,
    tenant_clause,
)
from raftcron.api.calendars import compiled_calendars_of, pause_note
from raftcron.api.context import ApiContext, idempotency_key, now_ms, request_hash, request_id
from raftcron.api.errors import HTTPError, json_body, rejection_error
from raftcron.api.policy import refuse_batch_outside_policy
from raftcron.core import commands as c
from raftcron.core.backfill import MAX_BACKFILL_INSTANTS, backfill_instants, check_backfill_span
from raftcron.core.calendar import without_excluded
from raftcron.core.errors import ALREADY_EXISTS, ValidationError
from raftcron.core.model import JOB_ID_RE, Job, parse_job
from raftcron.core.protocol import (
    BACKFILL_BY_INSTANT_LEVEL,
    JOB_HISTORY_LEVEL,
    TENANT_QUOTAS_LEVEL,
)
from raftcron.core.secrets import holds_redacted, restore_redacted
from raftcron.core.tenant_policy import TenantQuotas
from raftcron.core.timefmt import ms_to_iso, ms_to_local_iso, parse_iso_ms
from raftcron.state import backfills
from raftcron.state.queries import (
    JOB_SELECT,
    OCC_SELECT,
    job_to_api,
    occurrence_to_api,
    recent_occurrences,
)
from raftcron.state.tenants import PENDING_SQL, QUOTAS_SELECT, pending_refusal

MAX_PAGE = 500
MAX_BATCH_CREATE = 1000
CREATE_JOBS_CHUNK = 250
MAX_BACKFILL = MAX_BACKFILL_INSTANTS
BACKFILL_CHUNK = 1000


def ctx_of(request: Request) -> ApiContext:
    return request.app.state.ctx


def path_job_id(request: Request) -> str:
    job_id = request.path_params["job_id"]
    if not JOB_ID_RE.fullmatch(job_id):
        raise ValidationError("id", "must be 1-128 characters of A-Z a-z 0-9 . _ -")
    return job_id


async def who(request: Request, ctx: ApiContext) -> str | None:
    """The principal a job's history names for this request's change; None (not sent)
    while some member's build could not read it (core.protocol: a rolling upgrade)."""
    if ctx.writable_level() < JOB_HISTORY_LEVEL:
        return None
    return principal_of(request).identity


def page_limit(request: Request, default: int = 100) -> int:
    raw = request.query_params.get("limit", str(default))
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_PAGE:
        raise ValidationError("limit", f"must be an integer from 1 to {MAX_PAGE}")
    return int(raw)


def _no_job(job_id: str) -> HTTPError:
    return HTTPError(404, "not_found", f"job {job_id!r} does not exist", "id")


async def load_job_row(ctx: ApiContext, job_id: str) -> tuple:
    row = await ctx.fetchone(f"{JOB_SELECT} WHERE id = ?", (job_id,))
    if row is None:
        raise _no_job(job_id)
    return row


async def visible_job_row(request: Request, ctx: ApiContext, job_id: str) -> tuple:
    """The job's row, or 404 when it does not exist or the caller may not see it."""
    row = await load_job_row(ctx, job_id)
    if not can_see(request, row[1]):
        raise _no_job(job_id)
    return row


async def guard_job_write(request: Request, ctx: ApiContext, job_id: str) -> None:
    """A write to a stored job needs admin or the job's tenant. Non-admins are checked
    against the committed state (a barrier first if this node has not seen the job)."""
    if principal_of(request).admin:
        return
    row = await ctx.fetchone(f"{JOB_SELECT} WHERE id = ?", (job_id,))
    if row is None:
        await ctx.barrier()
        row = await load_job_row(ctx, job_id)
    require_tenant_write(request, row[1])


def next_fire_times(job: dict[str, Any], spec_row: tuple, count: int = 5) -> list[dict]:
    """The next instants of the union of the job's schedules; each in the zone of the
    first schedule that names it, and with those schedules' names when there are several."""
    fires = Job.from_spec(json.loads(spec_row[3])).fire_times()
    out = []
    after = (max(now_ms(), spec_row[6]) // 1000) * 1000 + 999
    for t in itertools.islice(fires.iter_after(after), count):
        members = fires.matching(t)
        tz = members[0].schedule.timezone if members else fires.timezone
        entry = {"utc": ms_to_iso(t), "local": ms_to_local_iso(t, tz)}
        if not fires.is_single:
            entry["schedules"] = fires.matched_names(t)
        out.append(entry)
    return out


async def job_detail(ctx: ApiContext, job_id: str, request: Request) -> dict[str, Any]:
    """The job as `request`'s caller may see it (404 if not at all; secrets as `***`
    unless admin)."""
    row = await visible_job_row(request, ctx, job_id)
    out = job_to_api(row, reveal_secrets=reveals_secrets(request))
    out["next_fire_times"] = next_fire_times(out, row)
    latest = await ctx.fetchone(*recent_occurrences(job_id, 1))
    out["latest_occurrence"] = occurrence_to_api(latest) if latest else None
    out["pause_note"] = await pause_note(ctx, job_id)
    return out


async def create_job(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    body = await json_body(request)
    job = parse_job(body)
    require_tenant_write(request, job.tenant)
    restore_redacted(job.target, None)  # a new job has no stored secret to keep: 400
    await ctx.propose(c.PutJob(request_id(request), ctx.stamp_ms(), job.to_spec(), create=True,
                               request_hash=request_hash(request, body),
                               who=await who(request, ctx)))
    # A replayed request is answered with the same visibility checks as a fresh one.
    return JSONResponse(await job_detail(ctx, job.id, request), status_code=201,
                        headers={"ETag": '"1"', "Location": f"/v1/jobs/{job.id}"})


def batch_jobs(body: Any) -> list[Job]:
    """The jobs of a batch body, each validated: ValidationError naming `jobs[i].<field>`."""
    items = body.get("jobs") if isinstance(body, dict) else None
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH_CREATE:
        raise ValidationError("jobs", f"must be a list of 1 to {MAX_BATCH_CREATE} job objects")
    jobs = []
    for i, item in enumerate(items):
        try:
            jobs.append(parse_job(item))
            restore_redacted(jobs[-1].target, None)  # nothing stored to keep: 400
        except ValidationError as e:
            field = f"jobs[{i}]" if e.field == "body" else f"jobs[{i}].{e.field}"
            raise ValidationError(field, e.message) from None
    return jobs


def explain_job(body: Any) -> None:
    """The core's refusal of a job body, in its own words (a PUT's id is its URL's)."""
    job_id = body.get("id") if isinstance(body, dict) else None
    parse_job(body, job_id=job_id if isinstance(job_id, str) and job_id else "job")


async def batch_create_jobs(request: Request) -> JSONResponse:
    """`POST /v1/jobs:batchCreate {"jobs": [...]}`: up to 1,000 jobs in one Raft entry.

    Every job is validated first (a 400 names `jobs[i].<field>` and nothing is created);
    then each is created or refused on its own, and `results` says which, in order."""
    ctx = ctx_of(request)
    body = await json_body(request)
    jobs = batch_jobs(body)
    items = body["jobs"]
    for job in jobs:
        require_tenant_write(request, job.tenant)
    await refuse_batch_outside_policy(ctx, jobs)
    # Entries of at most CREATE_JOBS_CHUNK jobs, one after another: each apply stays short
    # (it runs on the Raft thread, which must keep sending heartbeats). A retry with the same
    # Idempotency-Key gets each chunk's stored result rather than creating anything twice.
    # An Idempotency-Key reused for a different batch is refused (422) at its first chunk:
    # every chunk carries the hash of the whole request.
    rid, rhash = request_id(request), request_hash(request, body)
    applied: list[dict[str, Any]] = []
    for k in range(0, len(jobs), CREATE_JOBS_CHUNK):
        specs = [job.to_spec() for job in jobs[k:k + CREATE_JOBS_CHUNK]]
        async with ctx.bulk_entries:
            result = await ctx.propose(c.CreateJobs(f"{rid}#{k}", ctx.stamp_ms(), specs, rhash,
                                                    who=await who(request, ctx)))
        applied += result["results"]
    results = []
    for job, r in zip(jobs, applied, strict=True):
        if r["ok"]:
            results.append({"id": job.id, "created": True, "version": r["version"]})
        else:
            results.append({"id": job.id, "created": False, "error": {
                "code": r["rejected"], "message": r["message"], "field": r.get("field"),
                # a quota refusal names the quota, its limit, what is used and asked for
                **{k: r[k] for k in ("quota", "limit", "used", "requested") if k in r}}})
    await _describe_existing(request, ctx, items, jobs, results)
    return JSONResponse({"created": sum(1 for r in results if r["created"]),
                         "results": results})


async def _describe_existing(request: Request, ctx: ApiContext, items: list[Any],
                            jobs: list[Job], results: list[dict[str, Any]]) -> None:
    """Tell, for each job refused as `already_exists`, its current version and the fields
    in which the stored job differs from the one sent (`differs`, empty when none do), so
    that a client re-importing an edited file learns what was left unchanged.
    `paused` is compared only where the client sent it. Jobs the caller may not see are
    left undescribed."""
    existing = [i for i, r in enumerate(results)
                if not r["created"] and r["error"]["code"] == ALREADY_EXISTS]
    if not existing:
        return
    ids = sorted({jobs[i].id for i in existing})
    marks = ",".join("?" * len(ids))
    rows = {row[0]: row for row in await ctx.fetchall(
        f"{JOB_SELECT} WHERE id IN ({marks})", tuple(ids))}
    for i in existing:
        row = rows.get(jobs[i].id)
        if row is None or not can_see(request, row[1]):
            continue
        stored = Job.from_spec(json.loads(row[3]))  # pause and resume keep its `paused`
        results[i]["current_version"] = row[2]
        results[i]["differs"] = stored.fields_differing_from(
            jobs[i], compare_paused="paused" in items[i])


async def list_jobs(request: Request) -> Response:
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    limit = page_limit(request)
    cursor = request.query_params.get("cursor", "")
    if cursor and not JOB_ID_RE.fullmatch(cursor):
        raise ValidationError("cursor", "is not a cursor returned by this endpoint")
    where, params = ["id > ?"], [cursor]
    tenant = request.query_params.get("tenant")
    if tenant is not None:
        where.append("tenant = ?")
        params.append(tenant)
    clause, extra = tenant_clause(request)
    if clause:
        where.append(clause)
        params += extra
    paused = request.query_params.get("paused")
    if paused is not None:
        if paused not in ("true", "false"):
            raise ValidationError("paused", "must be true or false")
        where.append("paused = ?")
        params.append(int(paused == "true"))
    rows = await ctx.fetchall(
        f"{JOB_SELECT} WHERE {' AND '.join(where)} ORDER BY id LIMIT ?", (*params, limit + 1)
    )
    more = len(rows) > limit
    rows = rows[:limit]
    reveal = reveals_secrets(request)
    return await ctx.page_response(lambda: {
        "jobs": [job_to_api(r, reveal_secrets=reveal) for r in rows],
        "next_cursor": rows[-1][0] if more else None})


async def get_job(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    detail = await job_detail(ctx, path_job_id(request), request)
    return JSONResponse(detail, headers={"ETag": f'"{detail["version"]}"'})


def if_match(request: Request) -> int | None:
    raw = request.headers.get("if-match")
    if raw is None:
        return None
    raw = raw.strip().strip('"')
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise HTTPError(400, "invalid", "must be a job version number", "If-Match")
    return int(raw)


async def put_job(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    job_id = path_job_id(request)
    body = await json_body(request)
    job = parse_job(body, job_id=job_id)
    require_tenant_write(request, job.tenant)
    await guard_job_write(request, ctx, job_id)
    keep_paused = isinstance(body, dict) and "paused" not in body
    if keep_paused or holds_redacted(job.target):
        await ctx.barrier()
        current = await load_job_row(ctx, job_id)
        spec = job.to_spec()
        if keep_paused:
            spec["paused"] = bool(current[4])
        # "***" sent back for a secret keeps the stored value (same URL only), see
        # core.secrets.
        spec["target"] = restore_redacted(job.target, json.loads(current[3])["target"])
        job = type(job).from_spec(spec)
    result = await ctx.propose(c.PutJob(request_id(request), ctx.stamp_ms(), job.to_spec(),
                                        create=False, expected_version=if_match(request),
                                        request_hash=request_hash(request, body),
                                        who=await who(request, ctx)))
    detail = await job_detail(ctx, job_id, request)
    return JSONResponse(detail, headers={"ETag": f'"{result["version"]}"'})


async def delete_job(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    job_id = path_job_id(request)
    await guard_job_write(request, ctx, job_id)
    await ctx.propose(c.DeleteJob(request_id(request), ctx.stamp_ms(), job_id, if_match(request),
                                  request_hash(request), who=await who(request, ctx)))
    return JSONResponse({"deleted": job_id})


async def pause_job(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    job_id = path_job_id(request)
    await guard_job_write(request, ctx, job_id)
    await ctx.propose(c.PauseJob(request_id(request), ctx.stamp_ms(), job_id,
                                 request_hash(request), who=await who(request, ctx)))
    return JSONResponse(await job_detail(ctx, job_id, request))


async def resume_job(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    job_id = path_job_id(request)
    await guard_job_write(request, ctx, job_id)
    await ctx.propose(c.ResumeJob(request_id(request), ctx.stamp_ms(), job_id,
                                  request_hash(request), who=await who(request, ctx)))
    return JSONResponse(await job_detail(ctx, job_id, request))


async def occurrence_by_id(ctx: ApiContext, occ_id: str) -> dict[str, Any]:
    row = await ctx.fetchone(f"{OCC_SELECT} WHERE id = ?", (occ_id,))
    if row is None:
        raise HTTPError(404, "not_found", f"occurrence {occ_id!r} does not exist", "id")
    return occurrence_to_api(row)


def only_fields(body: Any, allowed: set[str]) -> None:
    """A body must be a JSON object of these fields: a misspelt one is an error, not a
    silently ignored option."""
    if not isinstance(body, dict):
        raise ValidationError("body", "must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise ValidationError(unknown[0], "unknown field")


async def trigger_job(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    job_id = path_job_id(request)
    await guard_job_write(request, ctx, job_id)
    body = await json_body(request, required=False)
    only_fields(body, {"override_overlap"})
    override = body.get("override_overlap", False)
    if not isinstance(override, bool):
        raise ValidationError("override_overlap", "must be true or false")
    # The key names the manual run (the same key never makes a second run, whoever sends
    # it); the request id binds it to the caller, and the hash to this request's body.
    key = idempotency_key(request) or request_id(request)
    result = await ctx.propose(c.TriggerManual(
        f"trigger {job_id} {principal_of(request).identity} {key}", ctx.stamp_ms(), job_id, key,
        override_overlap=override, request_hash=request_hash(request, body),
    ))
    occ = await occurrence_by_id(ctx, result["occurrence_id"])
    occ["duplicate"] = bool(result.get("duplicate") or result.get("replayed_request"))
    return JSONResponse(occ, status_code=202)


async def backfill_job(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    job_id = path_job_id(request)
    await guard_job_write(request, ctx, job_id)
    body = await json_body(request)
    only_fields(body, {"start", "end"})
    start = parse_iso_ms(body.get("start"), "start")
    end = parse_iso_ms(body.get("end"), "end")
    check_backfill_span(start, end)  # before any work: at most ten years
    await ctx.barrier()  # the job may have been created through another node a moment ago
    row = await load_job_row(ctx, job_id)
    job = Job.from_spec(json.loads(row[3]))
    # Bounded (span and count) and listed off the event loop: other requests keep flowing.
    instants = await asyncio.to_thread(backfill_instants, job.fire_times(), start, end,
                                       MAX_BACKFILL)
    # The job's calendars hold for a backfill too: excluded instants are left out, counted.
    instants, excluded = without_excluded(instants, await compiled_calendars_of(ctx, job))
    key = idempotency_key(request) or hashlib.sha256(
        f"{start}:{end}".encode()).hexdigest()[:16]
    await refuse_backfill_over_quota(ctx, row[1], job_id, instants, key)
    # The key names the backfill (its occurrences are (job, instant, key)): one key may
    # cover several ranges, as `raftcron job backfill` sends one slice after another. So a
    # chunk's request id is bound to the caller and to the chunk's own instants, which is
    # all its content; a request hash would add nothing.
    who = principal_of(request).identity
    ids: list[str] = []
    created = existing = 0
    for i in range(0, len(instants), BACKFILL_CHUNK):
        chunk = instants[i : i + BACKFILL_CHUNK]
        try:
            result = await ctx.propose(c.Backfill(
                f"backfill {job_id} {who} {key} {chunk[0]}-{chunk[-1]}", ctx.stamp_ms(), job_id,
                key, chunk,
            ))
        except HTTPError as e:
            if ids:  # earlier chunks are committed: the answer says exactly which
                await describe_partial_backfill(ctx, e, ids, created, len(instants), chunk)
            raise
        ids += result["occurrence_ids"]
        if not result.get("replayed_request"):
            created += result.get("created", 0)
            existing += result.get("existing", 0)
        else:  # this request was applied before: every instant of the chunk has its run
            existing += len(chunk)
    out = {"job_id": job_id, "request_key": key, "occurrence_ids": ids, "count": len(ids),
           "created": created, "excluded": excluded}
    if ctx.writable_level() >= BACKFILL_BY_INSTANT_LEVEL:
        out["existing"] = existing
    return JSONResponse(out, status_code=202)


async def refuse_backfill_over_quota(ctx: ApiContext, tenant: str, job_id: str,
                                     instants: list[int], key: str) -> None:
    """429 naming `max_pending_runs` before anything is proposed when the runs this
    backfill would create do not fit the tenant's quota, so that a refusal leaves nothing
    committed. Judged on this node's state, as apply judges each chunk (state.backfills,
    state.tenants): apply still has the last word, and a race with other writes is
    answered by `describe_partial_backfill`."""
    if not instants or ctx.writable_level() < TENANT_QUOTAS_LEVEL:
        return
    row = await ctx.fetchone(QUOTAS_SELECT, (tenant,))
    limit = (TenantQuotas(*row) if row else TenantQuotas()).in_effect(True).max_pending_runs
    if limit is None:
        return
    # The statements of backfills.plan, on this node's reader.
    own = backfills.own_ids(job_id, instants, key)
    rows: list[tuple[int, str]] = []
    for sql, params in backfills.cover_queries(job_id, instants):
        rows += [(r[0], r[1]) for r in await ctx.fetchall(sql, params)]
    have = {r[0] for sql, params in backfills.own_queries(own)
            for r in await ctx.fetchall(sql, params)}
    covered = backfills.covering(rows, instants, own)
    adding = len(backfills.to_create(instants, own, covered, have))
    pending_row = await ctx.fetchone(PENDING_SQL, (tenant,))
    refused = pending_refusal(tenant, int(pending_row[0]) if pending_row else 0, adding, limit)
    if refused is not None:
        raise rejection_error(refused)


async def describe_partial_backfill(ctx: ApiContext, error: HTTPError, ids: list[str],
                                    created: int, total: int, failed: list[int]) -> None:
    """Add to the error of a backfill chunk what the chunks before it committed.

    A backfill is sent in chunks of BACKFILL_CHUNK instants (each apply must stay short),
    so a chunk refused after others were applied — the job deleted meanwhile (404), the
    quota filled by another request (429), an unknown outcome (503) — leaves those
    committed. The error says so: `committed` lists the occurrence ids those chunks
    answered (runs they created, and runs that already covered their instants), how many
    runs they created, and the statuses of those runs now (a delete cancels the pending
    ones), and `not_committed_from` the first instant of the refused chunk. Read on this
    node, which applied the refused entry, and so whatever was committed before it."""
    statuses: dict[str, int] = {}
    for i in range(0, len(ids), 500):
        part = ids[i:i + 500]
        marks = ",".join("?" * len(part))
        for status, n in await ctx.fetchall(
                f"SELECT status, count(*) FROM occurrences WHERE id IN ({marks}) "
                "GROUP BY status", part):
            statuses[status] = statuses.get(status, 0) + int(n)
    error.extra["committed"] = {"count": len(ids), "created": created,
                                "occurrence_ids": ids, "statuses": statuses}
    error.extra["not_committed_from"] = ms_to_iso(failed[0])
    maybe = " (that chunk may have been applied too)" if error.status == 503 else ""
    error.message = (f"{error.message}; {len(ids):,} of the backfill's {total:,} instants "
                     f"were committed before this error (error.committed lists them), the "
                     f"instants from {ms_to_iso(failed[0])} were not{maybe}")
