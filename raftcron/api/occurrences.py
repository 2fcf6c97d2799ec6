"""/v1/occurrences routes."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from raftcron.api.alerts import read_note
from raftcron.api.auth import can_see, principal_of, tenant_clause
from raftcron.api.context import ApiContext, request_hash, request_id
from raftcron.api.errors import HTTPError
from raftcron.api.jobs import ctx_of, occurrence_by_id, page_limit
from raftcron.core import commands as c
from raftcron.core import identity
from raftcron.core.errors import ValidationError
from raftcron.core.timefmt import ms_to_iso, parse_iso_ms
from raftcron.state.queries import (
    ATT_SELECT,
    OCC_SELECT,
    attempt_to_api,
    job_occurrence_page,
    occurrence_to_api,
)

STATUSES = ("pending", "running", "succeeded", "failed", "skipped", "cancelled")
KINDS = ("scheduled", "manual", "backfill", "chained")


def _cursor(raw: str) -> tuple[int, str]:
    ms, _, occ_id = raw.partition(":")
    if not (ms.isascii() and ms.isdigit()) or len(ms) > 18 or not occ_id:
        raise ValidationError("cursor", "is not a cursor returned by this endpoint")
    return int(ms), occ_id


async def list_occurrences(request: Request) -> Response:
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    q = request.query_params
    limit = page_limit(request)
    where: list[str] = []
    params: list[object] = []
    kind = q.get("kind")
    since = until = None
    if "status" in q:
        if q["status"] not in STATUSES:
            raise ValidationError("status", f"must be one of {', '.join(STATUSES)}")
        where.append("status = ?")
        params.append(q["status"])
    if kind is not None:
        if kind not in KINDS:
            raise ValidationError("kind", f"must be one of {', '.join(KINDS)}")
        if kind == "chained":  # stored as manual runs with an upstream
            where.append("upstream IS NOT NULL")
        else:
            where.append("kind = ?" + (" AND upstream IS NULL" if kind == "manual" else ""))
            params.append(kind)
    if "since" in q:
        since = parse_iso_ms(q["since"], "since")
        where.append("scheduled_for_ms >= ?")
        params.append(since)
    if "until" in q:
        until = parse_iso_ms(q["until"], "until")
        where.append("scheduled_for_ms <= ?")
        params.append(until)
    clause, extra = tenant_clause(request)
    if clause:
        where.append(clause)
        params += extra
    if "cursor" in q:
        ms, occ_id = _cursor(q["cursor"])
        where.append("(scheduled_for_ms < ? OR (scheduled_for_ms = ? AND id < ?))")
        params += [ms, ms, occ_id]
        until = ms if until is None else min(until, ms)
    if "job_id" in q:
        job_id = q["job_id"]
        where.append("job_id = ?")  # exact even for a value that is not a valid job id
        params.append(job_id)
        sql, args = job_occurrence_page(job_id, where, params, limit + 1, kind=kind,
                                        since_ms=since, until_ms=until)
    else:
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        sql = f"{OCC_SELECT}{clause} ORDER BY scheduled_for_ms DESC, id DESC LIMIT ?"
        args = (*params, limit + 1)
    rows = await ctx.fetchall(sql, args)
    more = len(rows) > limit
    rows = rows[:limit]
    cursor = f"{rows[-1][5]}:{rows[-1][0]}" if more else None
    return await ctx.page_response(lambda: {
        "occurrences": [occurrence_to_api(r) for r in rows], "next_cursor": cursor})


async def get_occurrence(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    occ = await occurrence_by_id(ctx, request.path_params["occurrence_id"])
    if not can_see(request, occ["tenant"]):
        raise HTTPError(404, "not_found", f"occurrence {occ['id']!r} does not exist", "id")
    rows = await ctx.fetchall(f"{ATT_SELECT} WHERE id >= ? AND id < ? ORDER BY number",
                              identity.occurrence_attempts(occ["id"]))
    occ["attempt_list"] = [attempt_to_api(r) for r in rows]
    occ["cancellation"] = await cancellation_of(ctx, occ["id"])
    return JSONResponse(occ)


async def cancellation_of(ctx: ApiContext, occ_id: str) -> dict[str, str] | None:
    """Who cancelled the run by hand, when and why (None: nobody)."""
    row = await ctx.fetchone("SELECT who, note, at_ms FROM cancellations "
                             "WHERE occurrence_id = ?", (occ_id,))
    return None if row is None else {"by": row[0], "note": row[1], "at": ms_to_iso(row[2])}


async def cancel_occurrence(request: Request) -> JSONResponse:
    """POST /v1/occurrences/{id}/cancel {"note"}: a queued run ends `cancelled` now; a
    running one is asked to stop (its worker learns it from its next heartbeat answer) and
    ends `cancelled` when it has. 409 naming the state for a run that already ended."""
    ctx = ctx_of(request)
    occ_id = request.path_params["occurrence_id"]
    note = await read_note(request)
    row = await ctx.fetchone("SELECT tenant FROM occurrences WHERE id = ?", (occ_id,))
    if row is None:  # created through another node a moment ago?
        await ctx.barrier()
        row = await ctx.fetchone("SELECT tenant FROM occurrences WHERE id = ?", (occ_id,))
    if row is None or not can_see(request, row[0]):
        raise HTTPError(404, "not_found", f"occurrence {occ_id!r} does not exist", "id")
    principal = principal_of(request)
    if not principal.can_write_tenant(row[0]):
        raise HTTPError(403, "forbidden", f"token {principal.name!r} may not cancel runs of "
                        f"tenant {row[0]!r}", "Authorization")
    tenants = None if principal.admin else sorted(principal.tenants)
    result = await ctx.propose(c.CancelOccurrence(
        request_id(request), ctx.stamp_ms(), occ_id, principal.name, note, tenants,
        request_hash(request, {"note": note})))
    occ = await occurrence_by_id(ctx, occ_id)
    occ["cancel_requested"] = bool(result.get("cancel_requested"))
    occ["cancellation"] = await cancellation_of(ctx, occ_id)
    return JSONResponse(occ)
