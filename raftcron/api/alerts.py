"""GET /v1/alerts: open and resolved alerts with their raise/resolve history."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from raftcron.api.auth import tenant_clause
from raftcron.api.jobs import MAX_PAGE, ctx_of
from raftcron.api.status import int_param
from raftcron.core.errors import ValidationError
from raftcron.core.model import JOB_ID_RE
from raftcron.core.timefmt import ms_to_iso

STATUSES = ("open", "resolved", "all")
ALERT_SELECT = (
    "SELECT id, kind, job_id, occurrence_id, reason, status, raised_ms, resolved_ms FROM alerts"
)


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
    history: dict[str, list[dict[str, Any]]] = {r[0]: [] for r in rows}
    ids = list(history)
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        for aid, event, reason, sched, message, at in await ctx.fetchall(
            "SELECT alert_id, event, reason, scheduled_for_ms, message, at_ms FROM alert_events "
            f"WHERE alert_id IN ({','.join('?' * len(chunk))}) ORDER BY id", chunk,
        ):
            history[aid].append({"event": event, "at": ms_to_iso(at), "reason": reason,
                                 "scheduled_for": ms_to_iso(sched), "message": message})
    alerts = []
    for aid, kind, job, occ, reason, st, raised, resolved in rows:
        raised_events = [h for h in history[aid] if h["event"] == "raised"]
        last = raised_events[-1] if raised_events else {}
        alerts.append({
            "id": aid, "kind": kind, "job_id": job, "occurrence_id": occ, "reason": reason,
            "status": st, "raised_at": ms_to_iso(raised), "resolved_at": ms_to_iso(resolved),
            "scheduled_for": last.get("scheduled_for"), "message": last.get("message"),
            "history": history[aid],
        })
    next_cursor = f"{rows[-1][6]}|{rows[-1][0]}" if more else None
    return JSONResponse({"alerts": alerts, "next_cursor": next_cursor})
