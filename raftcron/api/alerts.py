"""GET /v1/alerts: open and resolved alerts with their history; POST /v1/alerts/{id}/ack
and /resolve: a person acknowledges or resolves one, with a note."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from raftcron.api.auth import can_see, principal_of, tenant_clause
from raftcron.api.context import ApiContext, request_hash, request_id
from raftcron.api.errors import HTTPError, json_body
from raftcron.api.jobs import MAX_PAGE, ctx_of
from raftcron.api.status import int_param
from raftcron.core import commands as c
from raftcron.core.errors import ValidationError
from raftcron.core.model import JOB_ID_RE
from raftcron.core.timefmt import ms_to_iso

STATUSES = ("open", "resolved", "all")
ALERT_SELECT = (
    "SELECT id, kind, job_id, occurrence_id, reason, status, raised_ms, resolved_ms, "
    "acked_ms, acked_by, ack_note, cause FROM alerts"
)
MAX_NOTE = 1000
MAX_ALERT_ID = 600


def _cursor(raw: str) -> tuple[int, str]:
    ms, sep, aid = raw.partition("|")
    if not sep or not (ms.isascii() and ms.isdigit()) or len(ms) > 15 or len(raw) > 600:
        raise ValidationError("cursor", "is not a cursor returned by this endpoint")
    return int(ms), aid


async def list_alerts(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    status = request.query_params.get("status", "open")
    if status not in STATUSES:
        raise ValidationError("status", f"must be one of {', '.join(STATUSES)}")
    limit = int_param(request, "limit", 100, 1, MAX_PAGE)
    where: list[str] = []
    params: list[Any] = []
    if status != "all":
        where.append("status = ?")
        params.append(status)
    job_id = request.query_params.get("job_id")
    if job_id is not None:
        if not JOB_ID_RE.fullmatch(job_id):
            raise ValidationError("job_id", "must be 1-128 characters of A-Z a-z 0-9 . _ -")
        where.append("job_id = ?")
        params.append(job_id)
    clause, extra = tenant_clause(request)
    if clause:
        where.append(f"job_id IN (SELECT id FROM jobs WHERE {clause})")
        params += extra
    cursor = request.query_params.get("cursor")
    if cursor:
        ms, aid = _cursor(cursor)
        where.append("(raised_ms < ? OR (raised_ms = ? AND id < ?))")
        params += [ms, ms, aid]
    sql = ALERT_SELECT + (f" WHERE {' AND '.join(where)}" if where else "")
    rows = await ctx.fetchall(f"{sql} ORDER BY raised_ms DESC, id DESC LIMIT ?",
                              (*params, limit + 1))
    more = len(rows) > limit
    rows = rows[:limit]
    alerts = await alerts_to_api(ctx, rows)
    next_cursor = f"{rows[-1][6]}|{rows[-1][0]}" if more else None
    return JSONResponse({"alerts": alerts, "next_cursor": next_cursor})


async def alerts_to_api(ctx: ApiContext, rows: list[tuple]) -> list[dict[str, Any]]:
    """Alert rows (ALERT_SELECT) as the API shows them, each with its history: raises and
    automatic resolves (alert_events) and what people did (alert_actions), by time."""
    events: dict[str, list[tuple[int, dict[str, Any]]]] = {r[0]: [] for r in rows}
    actions: dict[str, list[tuple[int, dict[str, Any]]]] = {r[0]: [] for r in rows}
    ids = list(events)
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        marks = ",".join("?" * len(chunk))
        for aid, event, reason, sched, message, at in await ctx.fetchall(
            "SELECT alert_id, event, reason, scheduled_for_ms, message, at_ms FROM alert_events "
            f"WHERE alert_id IN ({marks}) ORDER BY id", chunk,
        ):
            events[aid].append((at, {"event": event, "at": ms_to_iso(at), "reason": reason,
                                     "scheduled_for": ms_to_iso(sched), "message": message}))
        for aid, action, who, note, at in await ctx.fetchall(
            "SELECT alert_id, action, who, note, at_ms FROM alert_actions "
            f"WHERE alert_id IN ({marks}) ORDER BY id", chunk,
        ):
            actions[aid].append((at, {"event": action, "at": ms_to_iso(at), "by": who,
                                      "note": note}))
    alerts = []
    for aid, kind, job, occ, reason, st, raised, resolved, acked, acked_by, note, cause in rows:
        history = _merge(events[aid], actions[aid])
        raised_events = [h for h in history if h["event"] == "raised"]
        last = raised_events[-1] if raised_events else {}
        alerts.append({
            "id": aid, "kind": kind, "job_id": job, "occurrence_id": occ, "reason": reason,
            # "cluster_unavailable": the cluster's own trouble explains it (no leader, or
            # its clock refused, see state.availability); None: nothing says it is not the job.
            "cause": cause, "status": st, "raised_at": ms_to_iso(raised),
            "resolved_at": ms_to_iso(resolved),
            "acknowledged": None if acked is None else {
                "by": acked_by, "at": ms_to_iso(acked), "note": note},
            "scheduled_for": last.get("scheduled_for"), "message": last.get("message"),
            "history": history,
        })
    return alerts


def _merge(events: list[tuple[int, dict[str, Any]]], actions: list[tuple[int, dict[str, Any]]]
           ) -> list[dict[str, Any]]:
    """Both lists in their log order, interleaved by time; a person's action comes after
    the automatic events of the same millisecond (it reacts to them)."""
    out: list[dict[str, Any]] = []
    i = j = 0
    while i < len(events) or j < len(actions):
        if j == len(actions) or (i < len(events) and events[i][0] <= actions[j][0]):
            out.append(events[i][1])
            i += 1
        else:
            out.append(actions[j][1])
            j += 1
    return out


def _alert_id(request: Request) -> str:
    alert_id = request.path_params["alert_id"]
    if not alert_id or len(alert_id) > MAX_ALERT_ID:
        raise ValidationError("id", f"must be 1-{MAX_ALERT_ID} characters")
    return alert_id


async def read_note(request: Request) -> str:
    """The body `{"note": ...}` of an action a person takes (an alert's ack or resolve, a
    run's cancel): a non-empty reason, at most MAX_NOTE characters."""
    body = await json_body(request)  # its schema (schemas.NOTE) is checked there
    return body["note"]


async def _visible_alert(request: Request, ctx: ApiContext, alert_id: str) -> tuple:
    """The alert's row and its job's tenant; 404 when it does not exist or the caller may
    not see it (a barrier first when this node has not seen it yet)."""
    sql = (f"SELECT a.*, j.tenant FROM ({ALERT_SELECT} WHERE id = ?) a "
           "LEFT JOIN jobs j ON j.id = a.job_id")
    row = await ctx.fetchone(sql, (alert_id,))
    if row is None:
        await ctx.barrier()
        row = await ctx.fetchone(sql, (alert_id,))
    principal = principal_of(request)
    if row is None or not (principal.admin or (row[-1] is not None and can_see(request, row[-1]))):
        raise HTTPError(404, "not_found", f"alert {alert_id!r} does not exist", "id")
    if not (principal.admin or principal.can_write_tenant(row[-1])):
        raise HTTPError(403, "forbidden", f"token {principal.name!r} may not act on alerts "
                        f"of tenant {row[-1]!r}", "Authorization")
    return row


async def _act(request: Request, action: str) -> JSONResponse:
    ctx = ctx_of(request)
    alert_id = _alert_id(request)
    note = await read_note(request)
    await _visible_alert(request, ctx, alert_id)
    principal = principal_of(request)
    tenants = None if principal.admin else sorted(principal.tenants)
    await ctx.propose(c.AlertAction(
        request_id(request), ctx.stamp_ms(), alert_id, action, principal.name, note, tenants,
        request_hash(request, {"note": note})))
    row = await ctx.fetchone(f"{ALERT_SELECT} WHERE id = ?", (alert_id,))
    assert row is not None  # alerts are deleted only by pruning long-resolved ones
    return JSONResponse((await alerts_to_api(ctx, [row]))[0])


async def ack_alert(request: Request) -> JSONResponse:
    return await _act(request, "ack")


async def resolve_alert(request: Request) -> JSONResponse:
    return await _act(request, "resolve")
