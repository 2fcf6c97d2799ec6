"""/v1/concurrency-groups: a tenant's groups, their limits, holders and waiters.

A group belongs to a tenant (`?tenant=`, or `"tenant"` in the PUT body; default: the
caller's only tenant, else `default`). Its limit is set by an admin or the tenant itself
(a tenant can only restrict its own runs). A group named by jobs but never set is shown
with `configured: false` and the default limit (state.groups.DEFAULT_LIMIT)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from raftcron.api.auth import can_see, principal_of, require_tenant_write, tenant_clause
from raftcron.api.context import ApiContext, request_hash, request_id
from raftcron.api.errors import HTTPError, json_body
from raftcron.api.jobs import ctx_of, only_fields
from raftcron.core import commands as c
from raftcron.core.errors import ValidationError
from raftcron.core.model import NAME_RE, json_int
from raftcron.core.timefmt import ms_to_iso
from raftcron.state.groups import DEFAULT_LIMIT

MAX_LIMIT = 10_000
SHOWN = 100  # holders and waiters listed per group (their counts are exact)
NAME_RULE = "must be 1-64 characters of A-Z a-z 0-9 . _ -"
GROUP_SQL = "json_extract(j.spec, '$.concurrency_group')"
# Every group of the visible tenants, set or only named by a job.
GROUPS_SQL = (
    "SELECT tenant, name, max_running, updated_ms FROM concurrency_groups {where} "
    "UNION SELECT DISTINCT j.tenant, " + GROUP_SQL + ", NULL, NULL FROM jobs j "
    "WHERE " + GROUP_SQL + " IS NOT NULL {and_jobs} AND NOT EXISTS (SELECT 1 FROM "
    "concurrency_groups g WHERE g.tenant = j.tenant AND g.name = " + GROUP_SQL + ") "
    "ORDER BY 1, 2 LIMIT 10000"
)
ATTEMPTS_OF_GROUP = (
    "SELECT a.id, a.occurrence_id, a.job_id, a.worker_id, a.leased_ms, a.heartbeat_ms, "
    "a.not_before_ms FROM attempts a JOIN jobs j ON j.id = a.job_id "
    "WHERE a.status = ?1 AND a.tenant = ?2 AND j.tenant = ?2 AND " + GROUP_SQL + " = ?3 "
    "ORDER BY a.not_before_ms, a.id LIMIT ?4"
)
COUNT_OF_GROUP = (
    "SELECT a.status, count(*) FROM attempts a JOIN jobs j ON j.id = a.job_id "
    "WHERE a.status IN ('running', 'pending') AND a.tenant = ?1 AND j.tenant = ?1 "
    "AND " + GROUP_SQL + " = ?2 GROUP BY a.status"
)


def _group_name(request: Request) -> str:
    name = request.path_params["name"]
    if not NAME_RE.fullmatch(name):
        raise ValidationError("name", NAME_RULE)
    return name


def _default_tenant(request: Request) -> str:
    principal = principal_of(request)
    if not principal.admin and len(principal.tenants) == 1:
        return next(iter(principal.tenants))
    return "default"


def _query_tenant(request: Request) -> str:
    tenant = request.query_params.get("tenant")
    if tenant is None:
        return _default_tenant(request)
    if not NAME_RE.fullmatch(tenant):
        raise ValidationError("tenant", NAME_RULE)
    return tenant


def parse_group_body(body: Any, default_tenant: str) -> tuple[str, int]:
    only_fields(body, {"limit", "tenant"})
    if "limit" not in body:
        raise ValidationError("limit", "is required")
    limit = json_int(body["limit"])
    if limit is None or not 1 <= limit <= MAX_LIMIT:
        raise ValidationError("limit", f"must be an integer from 1 to {MAX_LIMIT}")
    tenant = body.get("tenant", default_tenant)
    if not isinstance(tenant, str) or not NAME_RE.fullmatch(tenant):
        raise ValidationError("tenant", NAME_RULE)
    return tenant, limit


async def put_group(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    name = _group_name(request)
    body = await json_body(request)
    tenant, limit = parse_group_body(body, _default_tenant(request))
    require_tenant_write(request, tenant)
    await ctx.propose(c.PutConcurrencyGroup(request_id(request), ctx.stamp_ms(), tenant, name,
                                            limit, request_hash(request, body)))
    return JSONResponse(await group_detail(ctx, tenant, name))


async def _counts(ctx: ApiContext, tenant: str, name: str) -> dict[str, int]:
    found = dict(await ctx.fetchall(COUNT_OF_GROUP, (tenant, name)))
    return {"holding": found.get("running", 0), "waiting": found.get("pending", 0)}


async def group_detail(ctx: ApiContext, tenant: str, name: str) -> dict[str, Any]:
    """The group with its holders (running attempts) and waiters (queued ones)."""
    row = await ctx.fetchone("SELECT max_running, updated_ms FROM concurrency_groups "
                             "WHERE tenant = ? AND name = ?", (tenant, name))
    jobs = [r[0] for r in await ctx.fetchall(
        f"SELECT j.id FROM jobs j WHERE j.tenant = ? AND {GROUP_SQL} = ? ORDER BY j.id "
        "LIMIT 1000", (tenant, name))]
    if row is None and not jobs:
        raise HTTPError(404, "not_found", f"tenant {tenant!r} has no concurrency group "
                        f"{name!r}", "name")
    holders = [{"attempt_id": r[0], "occurrence_id": r[1], "job_id": r[2], "worker_id": r[3],
                "leased_at": ms_to_iso(r[4]), "heartbeat_at": ms_to_iso(r[5])}
               for r in await ctx.fetchall(ATTEMPTS_OF_GROUP, ("running", tenant, name, SHOWN))]
    waiters = [{"attempt_id": r[0], "occurrence_id": r[1], "job_id": r[2],
                "due": ms_to_iso(r[6])}
               for r in await ctx.fetchall(ATTEMPTS_OF_GROUP, ("pending", tenant, name, SHOWN))]
    return {"tenant": tenant, "name": name,
            "limit": DEFAULT_LIMIT if row is None else row[0], "configured": row is not None,
            "updated_at": None if row is None else ms_to_iso(row[1]),
            **await _counts(ctx, tenant, name), "jobs": jobs,
            "holders": holders, "waiters": waiters}


async def get_group(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    name = _group_name(request)
    tenant = _query_tenant(request)
    if not can_see(request, tenant):
        raise HTTPError(404, "not_found", f"tenant {tenant!r} has no concurrency group "
                        f"{name!r}", "name")
    return JSONResponse(await group_detail(ctx, tenant, name))


async def list_groups(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    clause, params = tenant_clause(request)
    jobs_clause, _ = tenant_clause(request, "j.tenant")
    sql = GROUPS_SQL.format(where=f"WHERE {clause}" if clause else "",
                            and_jobs=f"AND {jobs_clause}" if jobs_clause else "")
    groups = []
    for tenant, name, limit, updated in await ctx.fetchall(sql, (*params, *params)):
        groups.append({"tenant": tenant, "name": name,
                       "limit": DEFAULT_LIMIT if limit is None else limit,
                       "configured": limit is not None, "updated_at": ms_to_iso(updated),
                       **await _counts(ctx, tenant, name)})
    return JSONResponse({"concurrency_groups": groups})
