"""Read models for the status page: job overview with timelines, running attempts,
workers (derived from attempts) and the herd chart (occurrences due per bucket ahead)."""

from __future__ import annotations

import json
import time
from bisect import bisect_left
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from raftcron.api.auth import tenant_clause, visible_tenants
from raftcron.api.context import ApiContext
from raftcron.api.heavy import heavy_reads
from raftcron.api.jobs import MAX_PAGE, ctx_of, next_fire_times
from raftcron.core.calendar import Calendar, CompiledCalendar, excluding_calendar
from raftcron.core.errors import ValidationError
from raftcron.core.model import Job
from raftcron.core.schedule import CronSchedule, ScheduleError
from raftcron.core.timefmt import ms_to_iso
from raftcron.state.backlog import backlog_queries, combine
from raftcron.state.queries import JOB_SELECT, job_to_api, occurrence_to_api, recent_occurrences

MAX_JOBS = 200
TIMELINE_MAX = 60
MAX_QUERY_CHARS = 200
SQL_WORDS = 8
SEARCH_PAGE = 2000
HERD_MAX_INSTANTS = 100_000
HERD_CACHE_S = 30.0
HERD_MAX_HOURS = 168
HERD_BUCKET_S = (60, 86400)


def int_param(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query_params.get(name, str(default))
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9 or not lo <= int(raw) <= hi:
        raise ValidationError(name, f"must be an integer from {lo} to {hi}")
    return int(raw)


def search_words(request: Request) -> list[str]:
    """`q`: words a job must all contain (case-insensitive) in its id, tenant, queue,
    schedules (cron, zone, names), labels or state (`paused`/`active`); see
    state.job_search. Returned longest first, without a word another one contains (it
    adds nothing), so the most selective is matched first."""
    text = request.query_params.get("q", "")
    if len(text) > MAX_QUERY_CHARS:
        raise ValidationError("q", f"must be at most {MAX_QUERY_CHARS} characters")
    words = sorted(set(text.lower().split()), key=lambda w: (-len(w), w))
    return [w for i, w in enumerate(words) if not any(w in longer for longer in words[:i])]


async def matching_job_ids(ctx: ApiContext, clause: str, params: list[Any],
                           words: list[str], limit: int) -> list[str]:
    """The first `limit` job ids (by id) whose words contain every one of `words`.

    Each word is a substring search of every job's words, about 0.03-0.08 s a word at a
    million jobs, on the node's one reader connection. Up to SQL_WORDS words are one
    statement. A longer query (a 200-character `q` holds up to 100 one-letter words)
    matches its SQL_WORDS longest in SQL one page of ids at a time and the rest here, so
    other reads run between its pages instead of waiting seconds behind it."""
    tenant = f"{clause} AND " if clause else ""
    in_sql, in_python = words[:SQL_WORDS], words[SQL_WORDS:]
    matched = " AND ".join(["instr(words, ?) > 0"] * len(in_sql))
    if not in_python:
        rows = await ctx.fetchall(f"SELECT id FROM job_search WHERE {tenant}{matched} "
                                  "ORDER BY id LIMIT ?", (*params, *in_sql, limit))
        return [job_id for (job_id,) in rows]
    found: list[str] = []
    after = ""  # every id is longer
    while len(found) < limit:
        page = await ctx.fetchall(
            f"SELECT id, words FROM job_search WHERE {tenant}id > ? AND {matched} "
            "ORDER BY id LIMIT ?", (*params, after, *in_sql, SEARCH_PAGE))
        found += [job_id for job_id, text in page if all(w in text for w in in_python)]
        if len(page) < SEARCH_PAGE:
            break
        after = page[-1][0]
    return found[:limit]


async def jobs_overview(request: Request) -> JSONResponse:
    """Every job (up to 200) with its schedule in words, next five fire times, last run
    and a timeline of its most recent occurrences; with `q`, the first 200 that match it,
    so a job beyond the first 200 of a large fleet can be found."""
    ctx = ctx_of(request)
    per_job = int_param(request, "timeline", 30, 1, TIMELINE_MAX)
    clause, params = tenant_clause(request)
    where = f" WHERE {clause}" if clause else ""
    words = search_words(request)
    if words:
        ids = await matching_job_ids(ctx, clause, params, words, MAX_JOBS + 1)
        rows = await ctx.fetchall(
            f"{JOB_SELECT} WHERE id IN ({','.join('?' * len(ids))}) ORDER BY id",
            ids) if ids else []
    else:
        rows = await ctx.fetchall(f"{JOB_SELECT}{where} ORDER BY id LIMIT ?",
                                  (*params, MAX_JOBS + 1))
    out = []
    for row in rows[:MAX_JOBS]:
        job = job_to_api(row)
        # A job with several schedules shows its first as `schedule`, all as `schedules`.
        # A chained job has none: `schedule` is null, and `after` says what it follows.
        first = job.get("schedule") or (job.get("schedules") or [None])[0]
        try:
            spec_job = Job.from_spec(json.loads(row[3]))
            described = spec_job.after.describe() if spec_job.after \
                else spec_job.fire_times().describe()
        except ScheduleError:
            described = (first or {}).get("cron") or "(does not compile)"
        occs = await ctx.fetchall(*recent_occurrences(row[0], per_job))
        timeline = [occurrence_to_api(o) for o in occs]
        out.append({
            "id": job["id"], "tenant": job["tenant"], "queue": job["queue"],
            "paused": job["paused"],
            "version": job["version"], "schedule": first, "describe": described,
            "schedules": job.get("schedules"), "after": job.get("after"),
            "calendars": job["calendars"],
            "labels": job["labels"],
            "deadline_s": job["deadline_s"], "overlap_policy": job["overlap_policy"],
            "next_fire_times": next_fire_times(job, row),
            "last_run": timeline[0] if timeline else None,
            "timeline": timeline,
        })
    return JSONResponse({"jobs": out, "truncated": len(rows) > MAX_JOBS})


async def list_attempts(request: Request) -> Response:
    ctx = ctx_of(request)
    status = request.query_params.get("status", "running")
    if status not in ("running", "pending"):
        raise ValidationError("status", "must be running or pending")
    limit = int_param(request, "limit", 100, 1, MAX_PAGE)
    clause, params = tenant_clause(request)
    rows = await ctx.fetchall(
        "SELECT id, occurrence_id, job_id, number, worker_id, fencing_token, leased_ms, "
        "heartbeat_ms, lease_expires_ms, not_before_ms FROM attempts WHERE status = ? "
        f"{f'AND {clause} ' if clause else ''}"
        "ORDER BY coalesce(leased_ms, not_before_ms), id LIMIT ?", (status, *params, limit))
    now = int(time.time() * 1000)
    return await ctx.page_response(lambda: {"attempts": [{
        "id": r[0], "occurrence_id": r[1], "job_id": r[2], "number": r[3], "status": status,
        "worker_id": r[4], "fencing_token": r[5], "leased_at": ms_to_iso(r[6]),
        "heartbeat_at": ms_to_iso(r[7]), "lease_expires_at": ms_to_iso(r[8]),
        "not_before": ms_to_iso(r[9]),
        "heartbeat_age_s": round((now - r[7]) / 1000, 1) if r[7] is not None else None,
    } for r in rows]})


async def list_workers(request: Request) -> JSONResponse:
    """Workers as the attempts they held show them (there is no worker registry)."""
    ctx = ctx_of(request)
    clause, params = tenant_clause(request)
    rows = await ctx.fetchall(
        "SELECT worker_id, max(max(coalesce(heartbeat_ms, 0), coalesce(leased_ms, 0), "
        "coalesce(finished_ms, 0))), count(*), sum(status = 'running'), "
        "sum(status = 'succeeded'), sum(status IN ('failed', 'lost', 'timed_out')) "
        "FROM attempts WHERE worker_id IS NOT NULL "
        f"{f'AND {clause} ' if clause else ''}GROUP BY worker_id "
        "ORDER BY 2 DESC LIMIT 500", params)
    now = int(time.time() * 1000)
    return JSONResponse({"workers": [{
        "worker_id": r[0], "last_seen": ms_to_iso(r[1] or None),
        "last_seen_age_s": round((now - r[1]) / 1000, 1) if r[1] else None,
        "runs": r[2], "running": r[3], "succeeded": r[4], "failed": r[5],
    } for r in rows]})


def _steady_around(tz: ZoneInfo, minute_s: int) -> bool:
    """Whether `tz` keeps one UTC offset for 3 h either side of `minute_s`: no DST gap or
    fold can then split, move or repeat any second of that minute."""
    offsets = {datetime.fromtimestamp(minute_s + d, tz=tz).utcoffset()
               for d in (-10_800, 0, 60, 10_800)}
    return len(offsets) == 1 and all(o is not None and o.seconds % 60 == 0 for o in offsets)


def _fires_rest_of_minute(sched: CronSchedule, tz: ZoneInfo, job: Job, first: int) -> int:
    """How many fire instants the minute of `first` holds from `first` on, counted from
    the seconds field without stepping through them; 0 when that is not certain (a DST
    transition near, a start/end bound inside the minute, no seconds field): the caller
    then steps through the minute's instants one by one."""
    minute = first - first % 60
    if not sched.has_seconds or not _steady_around(tz, minute):
        return 0
    s = job.schedule
    if (s.start_at_ms is not None and s.start_at_ms > minute * 1000) or (
            s.end_at_ms is not None and s.end_at_ms < (minute + 59) * 1000):
        return 0
    seconds = sched.seconds_field()
    return len(seconds) - bisect_left(seconds, first - minute)


def compute_herd(specs: list[str], start_ms: int, hours: int, bucket_s: int,
                 cap: int = HERD_MAX_INSTANTS,
                 calendars: dict[str, CompiledCalendar] | None = None) -> dict[str, Any]:
    """Count fire instants per bucket over [start, start + hours). Work is capped at `cap`
    schedule steps in total (counted or not: an instant before a job's `start_at` costs
    as much as one in the window); the answer says when it was truncated. A job firing
    several times a minute costs one step per minute, not per instant (whole-minute
    buckets, away from DST transitions and bounds; see _fires_rest_of_minute). A bucket
    size that does not divide the window leaves the last bucket shorter. Instants one of
    a job's `calendars` excludes are not due: they are counted in `excluded`, not in the
    buckets (such a job costs one step per instant)."""
    buckets = -(-hours * 3600 // bucket_s)
    counts = [0] * buckets
    end_s = start_ms // 1000 + hours * 3600
    start_s = start_ms // 1000
    seen = 0
    excluded = 0
    truncated = False
    counted_jobs = 0
    whole_minutes = bucket_s % 60 == 0 and start_s % 60 == 0
    for spec_text in specs:
        job = Job.from_spec(json.loads(spec_text))
        if job.after is not None:
            continue  # a chained job has no instants of its own to count
        cals = [(calendars or {})[n] for n in job.calendars if n in (calendars or {})]
        # Several schedules, calendars, or a one-time or interval schedule: one step per
        # instant (a cron one counts a minute of seconds at once).
        if job.schedules or cals or job.schedule.kind != "cron":
            counted_jobs += 1
            for nxt_ms in job.fire_times().iter_after(start_s * 1000 - 1, end_s * 1000 - 1):
                if seen >= cap:
                    truncated = True
                    break
                seen += 1
                if cals and excluding_calendar(cals, nxt_ms) is not None:
                    excluded += 1
                    continue
                counts[(nxt_ms // 1000 - start_s) // bucket_s] += 1
            if truncated:
                break
            continue
        try:
            sched = job.compiled()
        except ScheduleError:
            continue
        tz = ZoneInfo(job.schedule.timezone)
        counted_jobs += 1
        t = start_s - 1
        while True:
            if seen >= cap:
                truncated = True
                break
            nxt = sched.next_after(t)
            seen += 1
            if nxt is None or nxt >= end_s:
                break
            t = nxt
            ms = nxt * 1000
            if job.schedule.end_at_ms is not None and ms > job.schedule.end_at_ms:
                break
            if job.schedule.start_at_ms is not None and ms < job.schedule.start_at_ms:
                continue
            rest = _fires_rest_of_minute(sched, tz, job, nxt) if whole_minutes else 0
            counts[(nxt - start_s) // bucket_s] += rest or 1
            if rest:
                t = nxt - nxt % 60 + 59
        if truncated:
            break
    peak = max(range(buckets), key=counts.__getitem__) if any(counts) else None
    return {
        "start": ms_to_iso(start_s * 1000), "hours": hours, "bucket_s": bucket_s,
        "counts": counts, "total": sum(counts), "excluded": excluded, "jobs": counted_jobs,
        "truncated": truncated,
        "peak": None if peak is None else {
            "at": ms_to_iso((start_s + peak * bucket_s) * 1000), "count": counts[peak]},
    }


async def herd(request: Request) -> JSONResponse:
    """Occurrences due per bucket (default one minute) over the next hours (default 24)
    across active jobs, from the schedules; cached for 30 s per parameter set."""
    ctx = ctx_of(request)
    hours = int_param(request, "hours", 24, 1, HERD_MAX_HOURS)
    bucket_s = int_param(request, "bucket_s", 60, *HERD_BUCKET_S)
    if (hours * 3600) // bucket_s > 10_080:
        raise ValidationError("bucket_s", "too many buckets: use a larger bucket")
    tenants = visible_tenants(request)
    key = ("herd", hours, bucket_s, None if tenants is None else tuple(sorted(tenants)))
    gate = heavy_reads(request.app)
    kept = gate.kept(key)
    if kept is not None:
        return JSONResponse(kept)
    clause, params = tenant_clause(request)
    specs = [r[0] for r in await ctx.fetchall(
        f"SELECT spec FROM jobs WHERE paused = 0 {f'AND {clause} ' if clause else ''}"
        "ORDER BY id", params)]
    calendars = {name: Calendar.from_spec(json.loads(spec)).compiled()
                 for name, spec in await ctx.fetchall("SELECT name, spec FROM calendars")}
    start = (int(time.time()) // 60 + 1) * 60 * 1000
    # Kept 30 s per parameter set, and one heavy computation per node at a time however
    # the parameters vary (api/heavy.py); its work is capped (HERD_MAX_INSTANTS steps).
    result = await gate.run(key, compute_herd, specs, start, hours, bucket_s,
                            HERD_MAX_INSTANTS, calendars, keep_s=HERD_CACHE_S)
    return JSONResponse(result)


async def queues_overview(request: Request) -> JSONResponse:
    """Per queue: runs due and not yet leased, and how long the oldest has waited (the
    caller's tenants' runs only, for a token scoped to tenants)."""
    ctx = ctx_of(request)
    clause, params = tenant_clause(request)
    now = int(time.time() * 1000)
    due_sql, queues_sql = backlog_queries(clause)
    backlog = combine(await ctx.fetchall(due_sql, (now, *params)),
                      await ctx.fetchall(queues_sql, params))
    return JSONResponse({"queues": [
        {"queue": q.queue, "depth": q.depth, "oldest_due_age_s": round(q.oldest_age_s(now), 3),
         "oldest_due": ms_to_iso(q.oldest_due_ms) if q.oldest_due_ms is not None else None}
        for q in backlog
    ]})
