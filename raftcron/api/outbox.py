"""/v1/outbox (admin): webhook deliveries that are pending or were given up, and retries."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from raftcron.api.auth import require_admin
from raftcron.api.context import request_id
from raftcron.api.errors import json_body
from raftcron.api.jobs import MAX_PAGE, ctx_of
from raftcron.api.status import int_param
from raftcron.core import commands as c
from raftcron.core.errors import ValidationError
from raftcron.core.timefmt import ms_to_iso

STATUSES = ("dead", "pending")
MAX_OUTBOX_ID = 2**62
MAX_CURSOR_LEN = 4000
# Deliveries with the given status, plus (for "pending") rows not routed to receivers yet
# (receiver ''), in one keyset-paged order.
LIST_SQL = (
    "SELECT * FROM ("
    "SELECT d.outbox_id AS oid, d.receiver AS receiver, d.signer, d.status, d.attempts, "
    "d.next_ms, d.first_ms, d.last_error, o.event, o.created_ms, o.payload "
    "FROM outbox_deliveries d JOIN outbox o ON o.id = d.outbox_id WHERE d.status = ? "
    "UNION ALL "
    "SELECT o.id, '', NULL, 'pending', 0, NULL, NULL, NULL, o.event, o.created_ms, o.payload "
    "FROM outbox o WHERE ? = 'pending' AND o.status = 'pending' AND NOT EXISTS "
    "(SELECT 1 FROM outbox_deliveries x WHERE x.outbox_id = o.id)"
    ") WHERE oid > ? OR (oid = ? AND receiver > ?) ORDER BY oid, receiver LIMIT ?"
)


def _cursor(raw: str | None) -> tuple[int, str]:
    if not raw:
        return -1, ""
    oid, sep, receiver = raw.partition("|")
    if not sep or not (oid.isascii() and oid.isdigit()) or len(oid) > 19 \
            or int(oid) > MAX_OUTBOX_ID or len(raw) > MAX_CURSOR_LEN:
        raise ValidationError("cursor", "is not a cursor returned by this endpoint")
    return int(oid), receiver


def _item(r: tuple) -> dict[str, Any]:
    oid, receiver, signer, status, attempts, next_ms, first_ms, error, event, created, data = r
    return {
        "id": oid, "event": event, "created_at": ms_to_iso(created),
        "receiver": receiver or None, "signer": signer, "status": status,
        "attempts": attempts, "first_try_at": ms_to_iso(first_ms),
        "next_try_at": ms_to_iso(next_ms) if status == "pending" else None,
        "last_error": error, "data": json.loads(data),
    }


async def list_outbox(request: Request) -> JSONResponse:
    require_admin(request)
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    status = request.query_params.get("status", "dead")
    if status not in STATUSES:
        raise ValidationError("status", f"must be one of {', '.join(STATUSES)}")
    limit = int_param(request, "limit", 100, 1, MAX_PAGE)
    after_id, after_receiver = _cursor(request.query_params.get("cursor"))
    rows = await ctx.fetchall(LIST_SQL, (status, status, after_id, after_id, after_receiver,
                                         limit + 1))
    more = len(rows) > limit
    rows = rows[:limit]
    return JSONResponse({"deliveries": [_item(r) for r in rows],
                         "next_cursor": f"{rows[-1][0]}|{rows[-1][1]}" if more else None})


def _outbox_id(request: Request) -> int:
    raw = request.path_params["outbox_id"]
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19 or int(raw) > MAX_OUTBOX_ID:
        raise ValidationError("id", "must be an outbox row id (a positive integer)")
    return int(raw)


async def retry_outbox(request: Request) -> JSONResponse:
    """`{"receiver": url}` (optional): retry only the delivery to that receiver."""
    require_admin(request)
    ctx = ctx_of(request)
    outbox_id = _outbox_id(request)
    body = await json_body(request, required=False)
    if not isinstance(body, dict):
        raise ValidationError("body", "must be a JSON object")
    unknown = sorted(set(body) - {"receiver"})
    if unknown:
        raise ValidationError(unknown[0], "is not a field of a retry (use receiver)")
    receiver = body.get("receiver")
    if receiver is not None and (not isinstance(receiver, str) or not receiver
                                 or len(receiver) > 2048):
        raise ValidationError("receiver", "must be a receiver URL as listed by GET /v1/outbox")
    result = await ctx.propose(c.RetryOutbox(request_id(request), ctx.stamp_ms(), outbox_id,
                                             receiver))
    return JSONResponse({"id": outbox_id, "retried": result["retried"]})
