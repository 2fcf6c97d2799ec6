"""Read models for the job page and the fire-lag chart of the status page.

`GET /v1/status/jobs/{job_id}`: one job as the page shows it (the job as `GET /v1/jobs`
shows it, its schedule in words, and the next fire times marked where the job's zone
changes its UTC offset between two of them).

`GET /v1/status/jobs/{job_id}/backfill-preview?start=&end=`: the instants a backfill of
that range would create, listed by the same function the backfill uses (count and the
first `PREVIEW_INSTANTS`); nothing is written.

`GET /v1/status/fire-lag`: per minute of the last hour(s), p50/p99 of how late scheduled
occurrences were leased (first attempt's lease time, stamped by the leader in the lease
command, minus the occurrence's dispatch instant; a lease released unacknowledged and
granted again counts at its latest grant). It is read from the replicated state,
so every node answers the same and a failover loses nothing; its work is bounded by
`LAG_MAX_ROWS` (newest instants first; the answer says when older ones were left out).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from starlette.requests import Request
from starlette.responses import JSONResponse

from raftcron.api.auth import tenant_clause
from raftcron.api.calendars import compiled_calendars_of
from raftcron.api.errors import HTTPError
from raftcron.api.jobs import MAX_BACKFILL, ctx_of, job_detail, path_job_id, visible_job_row
from raftcron.api.status import int_param
from raftcron.core.backfill import backfill_instants, check_backfill_span
from raftcron.core.calendar import CompiledCalendar, excluding_calendar, without_excluded
from raftcron.core.errors import ValidationError
from raftcron.core.model import Job, parse_job
from raftcron.core.schedule import ScheduleError
from raftcron.core.timefmt import ms_to_iso, ms_to_local_iso, parse_iso_ms

MAX_FIRES = 50
LAG_MAX_MINUTES = 180
LAG_MAX_ROWS = 20_000
PREVIEW_INSTANTS = 50
# A year before the last instant the API shows (9999-12-31): the fires after it, their
# zone offsets and local times all stay inside what datetime can hold.
MAX_AFTER_MS = 253_370_764_799_000  # 9998-12-31T23:59:59Z
MAX_SHOWN_MS = 253_402_214_399_000  # 9999-12-30T23:59:59Z: local time in any zone is in 9999


def _offset(ms: int, tz: ZoneInfo) -> timedelta:
    return datetime.fromtimestamp(ms / 1000, tz=tz).utcoffset() or timedelta(0)


def _fmt_offset(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def upcoming_fires(job: Job, after_ms: int, count: int,
                   calendars: list[CompiledCalendar] | None = None) -> list[dict[str, Any]]:
    """The next `count` fire instants of `job` after `after_ms`: the union of its
    schedules, within their start/end bounds. Each carries its UTC offset in the zone of
    the first schedule naming it, and `dst_change` ("+01:00 → +02:00") when that offset
    differs from the one before it (the first is compared with the offset at `after_ms`):
    the fire falls after a DST transition. A job with several schedules gets the names of
    those naming each instant (`schedules`); an instant one of `calendars` excludes is
    listed with `excluded_by` (it will be recorded skipped, not run)."""
    fires = job.fire_times()
    zone = fires.timezone
    previous = _offset(after_ms, ZoneInfo(zone))
    out: list[dict[str, Any]] = []
    after = (after_ms // 1000) * 1000 + 999  # the next whole second after `after_ms`
    for t in itertools.islice(fires.iter_after(after, MAX_SHOWN_MS), count):
        members = fires.matching(t)
        zone = members[0].schedule.timezone if members else zone
        offset = _offset(t, ZoneInfo(zone))
        entry: dict[str, Any] = {
            "utc": ms_to_iso(t),
            "local": ms_to_local_iso(t, zone),
            "utc_offset": _fmt_offset(offset),
            "dst_change": None if offset == previous
            else f"{_fmt_offset(previous)} → {_fmt_offset(offset)}",
        }
        if not fires.is_single:
            entry["schedules"] = fires.matched_names(t)
        if calendars:
            entry["excluded_by"] = excluding_calendar(calendars, t)
        out.append(entry)
        previous = offset
    return out


async def job_page(request: Request) -> JSONResponse:
    """One job for its page (404 for a job the caller may not see, as GET /v1/jobs)."""
    ctx = ctx_of(request)
    job_id = path_job_id(request)
    count = int_param(request, "fires", 10, 1, MAX_FIRES)
    after_ms = int(time.time() * 1000)
    if "after" in request.query_params:
        after_ms = parse_iso_ms(request.query_params["after"], "after")
        if not 0 <= after_ms <= MAX_AFTER_MS:
            raise ValidationError("after", "must be from 1970-01-01T00:00:00Z to "
                                  "9998-12-31T23:59:59Z")
    detail = await job_detail(ctx, job_id, request)
    row = await ctx.fetchone("SELECT spec FROM jobs WHERE id = ?", (job_id,))
    job = Job.from_spec(json.loads(row[0]))
    calendars = await compiled_calendars_of(ctx, job)
    detail["chain"] = {"after": job.after.to_spec() if job.after else None,
                       "followed_by": await followers_of(ctx, job)}
    try:
        detail["describe"] = job.fire_times().describe()
        detail["upcoming"] = upcoming_fires(job, after_ms, count, calendars)
    except ScheduleError as e:
        detail["describe"] = f"the schedule does not compile: {e}"
        detail["upcoming"] = []
    if job.after is not None:
        detail["describe"] = job.after.describe()
    if any(name in request.query_params for name in PROPOSAL_PARAMS):
        if job.after is not None:  # the job's state, not the query, is what refuses
            raise HTTPError(409, "conflict", "a chained job has no schedule to propose a "
                            "change of: its runs follow its upstream", "cron")
        # A job with several schedules: the proposal edits its first, as a single one.
        current = detail.get("schedule") or {
            k: v for k, v in detail["schedules"][0].items() if k != "name"}
        proposed = proposed_job(job, current, request)
        detail["proposed"] = {"schedule": proposed.to_api()["schedule"],
                              "describe": proposed.compiled().describe(),
                              "upcoming": upcoming_fires(proposed, after_ms, count)}
    return JSONResponse(detail)


PROPOSAL_PARAMS = ("cron", "timezone", "dst_gap", "dst_fold")


async def followers_of(ctx: Any, job: Job) -> list[dict[str, str]]:
    """The chained jobs of the job's tenant that run after it (core.chains)."""
    rows = await ctx.fetchall(
        "SELECT id, json_extract(spec, '$.after.on') FROM jobs "
        "WHERE json_extract(spec, '$.after') IS NOT NULL "
        "AND json_extract(spec, '$.after.job') = ? AND tenant = ? ORDER BY id",
        (job.id, job.tenant))
    return [{"job": r[0], "on": r[1]} for r in rows]


def proposed_job(job: Job, schedule: dict[str, Any], request: Request) -> Job:
    """`job` with the schedule fields given in the query replaced, validated as a PUT
    would validate them; a refusal names the query parameter."""
    changed = {**schedule, **{k: request.query_params[k] for k in PROPOSAL_PARAMS
                              if k in request.query_params}}
    try:
        return parse_job({"id": job.id, "tenant": job.tenant, "schedule": changed,
                          "target": {"shell": "true"}})
    except (ValidationError, ScheduleError) as e:
        field = e.field.removeprefix("schedule.") if e.field else "cron"
        raise ValidationError(field if field in PROPOSAL_PARAMS else "cron", e.message) from e


async def backfill_preview(request: Request) -> JSONResponse:
    """What `POST /v1/jobs/{id}/backfill` with this start and end would create."""
    ctx = ctx_of(request)
    job_id = path_job_id(request)
    q = request.query_params
    for name in ("start", "end"):
        if name not in q:
            raise ValidationError(name, "is required: an ISO 8601 instant")
    start = parse_iso_ms(q["start"], "start")
    end = parse_iso_ms(q["end"], "end")
    check_backfill_span(start, end)
    row = await visible_job_row(request, ctx, job_id)
    job = Job.from_spec(json.loads(row[3]))
    instants = await asyncio.to_thread(backfill_instants, job.fire_times(), start, end,
                                       MAX_BACKFILL)
    instants, excluded = without_excluded(instants, await compiled_calendars_of(ctx, job))
    return JSONResponse({
        "job_id": job_id, "count": len(instants),
        "instants": [ms_to_iso(ms) for ms in instants[:PREVIEW_INSTANTS]],
        "shown": min(len(instants), PREVIEW_INSTANTS), "excluded": excluded,
    })


def _quantile(ordered: list[int], q: float) -> int:
    """Nearest-rank quantile of a sorted, non-empty list."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def lag_per_minute(rows: list[tuple[int, int | None]], start_ms: int, minutes: int,
                   now_ms: int) -> list[dict[str, Any]]:
    """Per minute from `start_ms`: how many instants were due, how many were leased, and
    p50/p99/max of the lease lag in ms. `rows` are (dispatch_ms, first lease ms or None).
    An instant not leased yet and already due counts in `waiting`."""
    lags: list[list[int]] = [[] for _ in range(minutes)]
    due = [0] * minutes
    waiting = [0] * minutes
    for dispatch_ms, leased_ms in rows:
        i = (dispatch_ms - start_ms) // 60_000
        if not 0 <= i < minutes or dispatch_ms > now_ms:
            continue
        due[i] += 1
        if leased_ms is None:
            waiting[i] += 1
        else:
            lags[i].append(max(0, leased_ms - dispatch_ms))
    out = []
    for i in range(minutes):
        ordered = sorted(lags[i])
        out.append({
            "minute": ms_to_iso(start_ms + i * 60_000), "due": due[i], "leased": len(ordered),
            "waiting": waiting[i],
            "p50_ms": _quantile(ordered, 0.5) if ordered else None,
            "p99_ms": _quantile(ordered, 0.99) if ordered else None,
            "max_ms": ordered[-1] if ordered else None,
        })
    return out


async def fire_lag(request: Request) -> JSONResponse:
    """Fire lag per minute over the last `minutes` (default 60) for the caller's jobs."""
    ctx = ctx_of(request)
    minutes = int_param(request, "minutes", 60, 1, LAG_MAX_MINUTES)
    now_ms = int(time.time() * 1000)
    start_ms = (now_ms // 60_000 - minutes + 1) * 60_000
    clause, params = tenant_clause(request)
    # Time-led scan of occ_scheduled_time, newest first, then one primary-key lookup per
    # row for its first attempt (attempt ids are `<occurrence id>~<number>`). Minutes are
    # those of the dispatch instant, which jitter puts up to an hour after the nominal one:
    # the scan starts an hour early so those are counted too.
    rows = await ctx.fetchall(
        "SELECT o.dispatch_at_ms, a.leased_ms FROM (SELECT id, dispatch_at_ms FROM occurrences "
        "WHERE kind = 'scheduled' AND scheduled_for_ms >= ? AND scheduled_for_ms <= ? "
        f"{f'AND {clause} ' if clause else ''}ORDER BY scheduled_for_ms DESC LIMIT ?) o "
        "LEFT JOIN attempts a ON a.id = o.id || '~1'",
        (start_ms - 3_600_000, now_ms, *params, LAG_MAX_ROWS + 1))
    truncated = len(rows) > LAG_MAX_ROWS
    buckets = lag_per_minute(rows[:LAG_MAX_ROWS], start_ms, minutes, now_ms)
    leased = [b for b in buckets if b["leased"]]
    return JSONResponse({
        "start": ms_to_iso(start_ms), "minutes": minutes, "buckets": buckets,
        "truncated": truncated,
        "worst": max(leased, key=lambda b: b["p99_ms"]) if leased else None,
    })
