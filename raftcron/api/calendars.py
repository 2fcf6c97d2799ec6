"""/v1/calendars routes, and bulk pause/resume of jobs (`POST /v1/jobs:pause`, `:resume`).

Calendars are tenant-scoped like jobs: a principal sees and writes only the calendars of
its tenants (another tenant's reads as absent, 404), `read` tokens see all and write
none. Names are cluster-wide, like job ids.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from raftcron.api.auth import can_see, principal_of, require_tenant_write, tenant_clause
from raftcron.api.context import ApiContext, request_hash, request_id
from raftcron.api.errors import HTTPError, json_body
from raftcron.core import commands as c
from raftcron.core.calendar import Calendar, CompiledCalendar, parse_calendar
from raftcron.core.errors import ValidationError
from raftcron.core.model import LABEL_VALUE_RE, NAME_RE, Job
from raftcron.core.timefmt import ms_to_iso

MAX_NOTE = 1000
SELECTORS = ("tenant", "queue", "label")
CALENDAR_SELECT = "SELECT name, tenant, spec, updated_ms FROM calendars"
# Jobs shown as a calendar's users on its detail (the count is exact).
MAX_USERS_SHOWN = 100


def _ctx(request: Request) -> ApiContext:
    return request.app.state.ctx


def path_name(request: Request) -> str:
    name = request.path_params["name"]
    if not NAME_RE.fullmatch(name):
        raise ValidationError("name", "must be 1-64 characters of A-Z a-z 0-9 . _ -")
    return name


def _absent(name: str) -> HTTPError:
    return HTTPError(404, "not_found", f"calendar {name!r} does not exist", "name")


def calendar_to_api(row: tuple) -> dict[str, Any]:
    out = Calendar.from_spec(json.loads(row[2])).to_api()
    out["updated_at"] = ms_to_iso(row[3])
    return out


async def _visible_row(request: Request, ctx: ApiContext, name: str) -> tuple:
    row = await ctx.fetchone(f"{CALENDAR_SELECT} WHERE name = ?", (name,))
    if row is None or not can_see(request, row[1]):
        raise _absent(name)
    return row


async def compiled_calendars_of(ctx: ApiContext, job: Job) -> list[CompiledCalendar]:
    """The job's calendars in its order (apply keeps them existing while it lists them)."""
    out = []
    for name in job.calendars:
        row = await ctx.fetchone("SELECT spec FROM calendars WHERE name = ?", (name,))
        if row is not None:
            out.append(Calendar.from_spec(json.loads(row[0])).compiled())
    return out


async def list_calendars(request: Request) -> JSONResponse:
    ctx = _ctx(request)
    await ctx.maybe_barrier(request)
    clause, params = tenant_clause(request)
    rows = await ctx.fetchall(
        f"{CALENDAR_SELECT}{f' WHERE {clause}' if clause else ''} ORDER BY name", params)
    return JSONResponse({"calendars": [calendar_to_api(r) for r in rows]})


async def get_calendar(request: Request) -> JSONResponse:
    ctx = _ctx(request)
    await ctx.maybe_barrier(request)
    name = path_name(request)
    row = await _visible_row(request, ctx, name)
    out = calendar_to_api(row)
    clause, params = tenant_clause(request)
    users = await ctx.fetchall(
        "SELECT id FROM jobs WHERE json_extract(spec, '$.calendars') IS NOT NULL AND "
        "EXISTS (SELECT 1 FROM json_each(spec, '$.calendars') WHERE value = ?)"
        f"{f' AND {clause}' if clause else ''} ORDER BY id", (name, *params))
    out["jobs"] = [u[0] for u in users[:MAX_USERS_SHOWN]]
    out["job_count"] = len(users)
    return JSONResponse(out)


async def put_calendar(request: Request) -> JSONResponse:
    ctx = _ctx(request)
    name = path_name(request)
    body = await json_body(request)
    cal = parse_calendar(body, name)
    require_tenant_write(request, cal.tenant)
    result = await ctx.propose(c.PutCalendar(request_id(request), ctx.stamp_ms(), cal.to_spec(),
                                             request_hash(request, body)))
    row = await _visible_row(request, ctx, name)
    return JSONResponse(calendar_to_api(row), status_code=201 if result.get("created") else 200)


async def delete_calendar(request: Request) -> JSONResponse:
    ctx = _ctx(request)
    name = path_name(request)
    p = principal_of(request)
    tenants = None if p.admin else sorted(p.tenants)
    await ctx.propose(c.DeleteCalendar(request_id(request), ctx.stamp_ms(), name, tenants,
                                       request_hash(request)))
    return JSONResponse({"deleted": name})


def parse_selector(body: Any) -> tuple[dict[str, Any], str]:
    """The selector (exactly one of tenant, queue, label "key=value") and the note."""
    if not isinstance(body, dict):
        raise ValidationError("body", "must be a JSON object")
    unknown = sorted(set(body) - {*SELECTORS, "note"})
    if unknown:
        raise ValidationError(unknown[0], "unknown field")
    given = [k for k in SELECTORS if k in body]
    if len(given) != 1:
        raise ValidationError("tenant" if not given else given[1],
                              "give exactly one of tenant, queue or label")
    key = given[0]
    value = body[key]
    if key == "label":
        if not isinstance(value, str) or "=" not in value:
            raise ValidationError("label", 'must be "name=value", e.g. "team=billing"')
        lname, lvalue = value.split("=", 1)
        if not NAME_RE.fullmatch(lname) or not LABEL_VALUE_RE.fullmatch(lvalue):
            raise ValidationError("label", 'must be "name=value" of A-Z a-z 0-9 . _ - '
                                  "(name 1-64, value 0-64 characters)")
        selector: dict[str, Any] = {"label": [lname, lvalue]}
    else:
        if not isinstance(value, str) or not NAME_RE.fullmatch(value):
            raise ValidationError(key, "must be 1-64 characters of A-Z a-z 0-9 . _ -")
        selector = {key: value}
    return selector, body["note"]  # the note's schema (schemas.NOTE) was checked


async def _bulk(request: Request, paused: bool) -> JSONResponse:
    ctx = _ctx(request)
    body = await json_body(request)
    selector, note = parse_selector(body)
    p = principal_of(request)
    if "tenant" in selector:
        require_tenant_write(request, selector["tenant"])
    tenants = None if p.admin else sorted(p.tenants)
    result = await ctx.propose(c.BulkPause(
        request_id(request), ctx.stamp_ms(), selector, paused, p.identity, note, tenants,
        request_hash(request, body)))
    return JSONResponse({"action": result["action"], "matched": result["matched"],
                         "changed": result["changed"], "job_ids": result["job_ids"],
                         "by": p.identity, "note": note})


async def bulk_pause(request: Request) -> JSONResponse:
    return await _bulk(request, True)


async def bulk_resume(request: Request) -> JSONResponse:
    return await _bulk(request, False)


async def pause_note(ctx: ApiContext, job_id: str) -> dict[str, Any] | None:
    """The last bulk pause or resume that reached the job: who, when, why."""
    row = await ctx.fetchone(
        "SELECT action, who, note, at_ms FROM job_pause_notes WHERE job_id = ?", (job_id,))
    if row is None:
        return None
    return {"action": row[0], "by": row[1], "note": row[2], "at": ms_to_iso(row[3])}
