"""/v1/channels routes: notification channels (core.channels).

Tenant-scoped like calendars: a principal sees and writes only the channels of its
tenants (another tenant's reads as absent, 404); `read` tokens see all of them and write
none. Nobody reads an e-mail password back; only an admin reads a Slack webhook URL.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from raftcron.api.auth import can_see, principal_of, require_tenant_write, tenant_clause
from raftcron.api.calendars import path_name
from raftcron.api.context import ApiContext, request_hash, request_id
from raftcron.api.errors import HTTPError, json_body
from raftcron.api.jobs import ctx_of
from raftcron.core import commands as c
from raftcron.core.channels import Channel, parse_channel
from raftcron.core.timefmt import ms_to_iso

CHANNEL_SELECT = "SELECT name, tenant, spec, updated_ms FROM channels"
MAX_USERS_SHOWN = 100


def _absent(name: str) -> HTTPError:
    return HTTPError(404, "not_found", f"channel {name!r} does not exist", "name")


def channel_to_api(row: tuple, admin: bool) -> dict[str, Any]:
    out = Channel.from_spec(json.loads(row[2])).to_api(admin)
    out["updated_at"] = ms_to_iso(row[3])
    return out


async def _visible_row(request: Request, ctx: ApiContext, name: str) -> tuple:
    row = await ctx.fetchone(f"{CHANNEL_SELECT} WHERE name = ?", (name,))
    if row is None or not can_see(request, row[1]):
        raise _absent(name)
    return row


async def list_channels(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    clause, params = tenant_clause(request)
    rows = await ctx.fetchall(
        f"{CHANNEL_SELECT}{f' WHERE {clause}' if clause else ''} ORDER BY name", params)
    admin = principal_of(request).admin
    return JSONResponse({"channels": [channel_to_api(r, admin) for r in rows]})


async def get_channel(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    name = path_name(request)
    row = await _visible_row(request, ctx, name)
    out = channel_to_api(row, principal_of(request).admin)
    clause, params = tenant_clause(request)
    users = await ctx.fetchall(
        "SELECT id FROM jobs WHERE EXISTS (SELECT 1 FROM json_each(spec, '$.notify') "
        "WHERE type = 'object' AND json_extract(value, '$.channel') = ?)"
        f"{f' AND {clause}' if clause else ''} ORDER BY id", (name, *params))
    out["jobs"] = [u[0] for u in users[:MAX_USERS_SHOWN]]
    out["job_count"] = len(users)
    return JSONResponse(out)


async def put_channel(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    name = path_name(request)
    body = await json_body(request)
    row = await ctx.fetchone(f"{CHANNEL_SELECT} WHERE name = ?", (name,))
    # The stored channel keeps its secrets when they are sent back redacted, for a caller
    # that may write its tenant only (another's reads as absent).
    stored = None
    if row is not None and principal_of(request).can_write_tenant(row[1]):
        stored = Channel.from_spec(json.loads(row[2]))
    ch = parse_channel(body, name, stored)
    require_tenant_write(request, ch.tenant)
    result = await ctx.propose(c.PutChannel(request_id(request), ctx.stamp_ms(), ch.to_spec(),
                                            request_hash(request, body)))
    row = await _visible_row(request, ctx, name)
    return JSONResponse(channel_to_api(row, principal_of(request).admin),
                        status_code=201 if result.get("created") else 200)


async def delete_channel(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    name = path_name(request)
    p = principal_of(request)
    tenants = None if p.admin else sorted(p.tenants)
    await ctx.propose(c.DeleteChannel(request_id(request), ctx.stamp_ms(), name, tenants,
                                      request_hash(request)))
    return JSONResponse({"deleted": name})
