"""/v1/tenants: per-tenant quotas and policy (admin writes; readers see the tenants they
may see). The PUT body replaces every field: one left out is null (the quota's default or
unlimited, see core.tenant_policy; any, for a policy list)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from raftcron.api.auth import tenant_clause, visible_tenants
from raftcron.api.context import ApiContext, request_id
from raftcron.api.errors import HTTPError, json_body
from raftcron.api.jobs import ctx_of
from raftcron.core import commands as c
from raftcron.core.errors import ValidationError
from raftcron.core.model import NAME_RE, json_int
from raftcron.core.protocol import TENANT_QUOTAS_LEVEL
from raftcron.core.tenant_policy import (
    QUOTA_FIELDS,
    QUOTA_MAX,
    TenantQuotas,
    parse_policy,
    policy_from_row,
    spec_violation,
)
from raftcron.core.timefmt import ms_to_iso
from raftcron.state.tenants import PENDING_SQL, USAGE_SQL

QUOTAS = QUOTA_FIELDS
POLICY_FIELDS = ("queues", "targets", "http_hosts")
TENANT_SELECT = ("SELECT name, max_jobs, max_concurrent_runs, max_fires_per_minute, "
                 "updated_ms, queues, targets, http_hosts, max_schedules, max_pending_runs "
                 "FROM tenants")
OUTSIDE_POLICY_SHOWN = 100


def _name(request: Request) -> str:
    name = request.path_params["name"]
    if not NAME_RE.fullmatch(name):
        raise ValidationError("name", "must be 1-64 characters of A-Z a-z 0-9 . _ -")
    return name


def _stored_quotas(r: tuple) -> TenantQuotas:
    return TenantQuotas(max_jobs=r[1], max_concurrent_runs=r[2], max_fires_per_minute=r[3],
                        max_schedules=r[8], max_pending_runs=r[9])


def _row(r: tuple, defaults: bool) -> dict[str, Any]:
    """A tenant as stored (a null quota: not set), with `quotas_in_effect`: what applies,
    a default for an unset quota that bounds the state once the cluster's level has them."""
    policy = policy_from_row(r[5], r[6], r[7])
    stored = _stored_quotas(r)
    return {"name": r[0], **stored.to_api(), "updated_at": ms_to_iso(r[4]),
            **policy.to_api(), "policy_set": policy.is_set,
            "quotas_in_effect": stored.in_effect(defaults).to_api()}


def _defaults(ctx: ApiContext) -> bool:
    """Whether the quota defaults apply: the level this node applied has them."""
    return ctx.writable_level() >= TENANT_QUOTAS_LEVEL


def parse_quotas(body: Any) -> dict[str, int | None]:
    if not isinstance(body, dict):
        raise ValidationError("body", "must be a JSON object")
    unknown = sorted(set(body) - set(QUOTAS) - set(POLICY_FIELDS))
    if unknown:
        raise ValidationError(unknown[0], "is not a tenant field (use "
                              f"{', '.join(QUOTAS + POLICY_FIELDS)})")
    out: dict[str, int | None] = {}
    for key in QUOTAS:
        value = body.get(key)
        if value is not None:
            value = json_int(value)
            if value is None or not 1 <= value <= QUOTA_MAX:
                raise ValidationError(key, f"must be an integer from 1 to {QUOTA_MAX} or null")
        out[key] = value
    return out


def explain_tenant(body: Any) -> None:
    """The core's refusal of a tenant body, in its own words."""
    parse_quotas(body)
    parse_policy(body)


async def put_tenant(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    name = _name(request)
    body = await json_body(request)
    quotas = parse_quotas(body)
    policy = parse_policy(body)
    await ctx.propose(c.PutTenant(request_id(request), ctx.stamp_ms(), name, **quotas,
                                  **{k: None if v is None else list(v)
                                     for k, v in zip(POLICY_FIELDS,
                                                     (policy.queues, policy.targets,
                                                      policy.http_hosts), strict=True)}))
    row = await ctx.fetchone(f"{TENANT_SELECT} WHERE name = ?", (name,))
    if row is None:  # applied on this node before answering; only a race with a restore
        raise HTTPError(503, "unknown_outcome", "the tenant was saved but cannot be read back",
                        headers={"Retry-After": "1"})
    return JSONResponse(await _with_outside_policy(ctx, row))


async def _with_outside_policy(ctx: Any, row: tuple) -> dict[str, Any]:
    """The tenant, with what it uses of its quotas (`usage`) and the jobs its current
    policy refuses (saved before the policy was set or changed): their runs fail at lease
    time until they are edited or deleted."""
    out = _row(row, _defaults(ctx))
    jobs, schedules = await ctx.fetchone(USAGE_SQL, (row[0],))
    (pending,) = await ctx.fetchone(PENDING_SQL, (row[0],))
    out["usage"] = {"jobs": jobs, "schedules": schedules, "pending_runs": pending}
    policy = policy_from_row(row[5], row[6], row[7])
    outside: list[dict[str, Any]] = []
    if policy.is_set:
        for job_id, spec_text in await ctx.fetchall(
                "SELECT id, spec FROM jobs WHERE tenant = ? ORDER BY id", (row[0],)):
            violation = spec_violation(policy, json.loads(spec_text))
            if violation is not None:
                outside.append({"id": job_id, "field": violation.field,
                                "message": violation.message})
    out["jobs_outside_policy_count"] = len(outside)
    out["jobs_outside_policy"] = outside[:OUTSIDE_POLICY_SHOWN]
    return out


async def list_tenants(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    clause, params = tenant_clause(request, "name")
    rows = await ctx.fetchall(
        f"{TENANT_SELECT}{f' WHERE {clause}' if clause else ''} ORDER BY name LIMIT 10000",
        params)
    defaults = _defaults(ctx)
    return JSONResponse({"tenants": [_row(r, defaults) for r in rows]})


async def get_tenant(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    name = _name(request)
    tenants = visible_tenants(request)
    row = None
    if tenants is None or name in tenants:
        row = await ctx.fetchone(f"{TENANT_SELECT} WHERE name = ?", (name,))
    if row is None:
        raise HTTPError(404, "not_found", f"tenant {name!r} has no quotas or policy set",
                        "name")
    return JSONResponse(await _with_outside_policy(ctx, row))
