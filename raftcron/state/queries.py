"""Read-side SQL and row → JSON shapes, shared by the API and the CLI."""

from __future__ import annotations

import json
from typing import Any

from raftcron.core import identity
from raftcron.core.chains import upstream_of
from raftcron.core.model import Job
from raftcron.core.secrets import redact_target
from raftcron.core.timefmt import ms_to_iso

JOB_SELECT = (
    "SELECT id, tenant, version, spec, paused, queue, watermark_ms, created_ms, updated_ms "
    "FROM jobs"
)
OCC_SELECT = (
    "SELECT id, job_id, tenant, queue, kind, scheduled_for_ms, dispatch_at_ms, job_version, "
    "status, reason, idempotency_key, attempts, epoch, created_ms, finished_ms, schedules, "
    "upstream, upstream_outcome FROM occurrences"
)

LAST_ID_INSTANT_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z
# Per-job reads go by the primary key (the job's id range) even with a status filter: the
# planner would otherwise walk every row of that status, of every job.
OCC_BY_ID = f"{OCC_SELECT} INDEXED BY sqlite_autoindex_occurrences_1"


def job_occurrence_page(
    job_id: str, where: list[str], params: list[Any], limit: int, *,
    kind: str | None = None, since_ms: int | None = None, until_ms: int | None = None,
) -> tuple[str, tuple[Any, ...]]:
    """SQL and parameters for one page of a job's occurrences matching `where`, newest
    first (by instant, then id), at most `limit` rows.

    There is no index led by job over all occurrences (a claim would write such an index
    all over its history, see schema.sql); the job's scheduled rows are its range of ids
    instead. They come from the end of that range, already in the order of their instants
    (core.identity), and within the instant bounds given, so a page reads about `limit`
    rows however long the history. Backfill rows come the same way from the end of their
    job's part of `occ_backfill`, led by job and instant. Chained runs come from the end of
    their id range (in creation order). Manual ones (explicit triggers, usually few) are read
    whole and merged in. `where` must hold the filters in full: the bounds only narrow what
    is read.
    """
    cond = "".join(f" AND {w}" for w in where)
    parts: list[str] = []
    args: list[Any] = []
    if kind in (None, "scheduled"):
        # One lower and one upper bound on id (SQLite narrows a range by one of each).
        # Instants are whole seconds (core.identity); a bound outside the years ids can
        # spell is left out (the filters in `where` stay exact).
        lo, hi = identity.job_scheduled_occurrences(job_id)
        first, upper, last = lo, "id < ?", hi
        if since_ms is not None and 0 <= since_ms <= LAST_ID_INSTANT_MS:
            first = identity.scheduled_id_bound(job_id, since_ms)
        if until_ms is not None and 0 <= until_ms <= LAST_ID_INSTANT_MS:
            upper = "id <= ?"
            last = identity.scheduled_id_bound(job_id, until_ms)
        parts.append(f"SELECT * FROM ({OCC_BY_ID} WHERE id >= ? AND {upper}{cond} "
                     "ORDER BY id DESC LIMIT ?)")
        args += [first, last, *params, limit]
    if kind in (None, "backfill"):
        instant_bounds = [(op, ms) for op, ms in ((">=", since_ms), ("<=", until_ms))
                          if ms is not None]
        bounds = "".join(f" AND scheduled_for_ms {op} ?" for op, _ in instant_bounds)
        parts.append(f"SELECT * FROM ({OCC_SELECT} INDEXED BY occ_backfill WHERE job_id = ? "
                     f"AND kind = 'backfill'{bounds}{cond} "
                     "ORDER BY scheduled_for_ms DESC, id DESC LIMIT ?)")
        args += [job_id, *(ms for _, ms in instant_bounds), *params, limit]
    if kind in (None, "manual"):
        parts.append(f"{OCC_BY_ID} WHERE id >= ? AND id < ?{cond}")
        args += [*identity.job_manual_occurrences(job_id), *params]
    if kind in (None, "chained"):  # ids in creation order: the newest from the range's end
        parts.append(f"SELECT * FROM ({OCC_BY_ID} WHERE id >= ? AND id < ?{cond} "
                     "ORDER BY id DESC LIMIT ?)")
        args += [*identity.job_chained_occurrences(job_id), *params, limit]
    sql = (f"SELECT * FROM ({' UNION ALL '.join(parts)}) "
           "ORDER BY scheduled_for_ms DESC, id DESC LIMIT ?")
    return sql, (*args, limit)


def recent_occurrences(job_id: str, limit: int) -> tuple[str, tuple[Any, ...]]:
    """A job's newest `limit` occurrences, newest first (see job_occurrence_page)."""
    return job_occurrence_page(job_id, [], [], limit)


ATT_SELECT = (
    "SELECT id, occurrence_id, number, status, not_before_ms, worker_id, fencing_token, "
    "leased_ms, heartbeat_ms, lease_expires_ms, cancel_requested, finished_ms, exit_code, "
    "output, error, ack_deadline_ms, acked_ms, unacked_releases, release_reason, started_ms "
    "FROM attempts"
)


def spec_to_api(spec: str, *, reveal_secrets: bool = False) -> dict[str, Any]:
    """A stored job spec (its JSON text) in the API's shape, secrets `***` unless
    `reveal_secrets`."""
    return _job_api(Job.from_spec(json.loads(spec)), reveal_secrets)


def _job_api(job: Job, reveal_secrets: bool) -> dict[str, Any]:
    out = job.to_api()
    if not reveal_secrets:
        out["target"] = redact_target(out["target"])
    return out


def job_to_api(row: tuple, *, reveal_secrets: bool = False) -> dict[str, Any]:
    """A job row as the API shows it. Its target's secrets (header values, URL
    credentials) are `***` unless `reveal_secrets` (admin readers only). `done`: its
    schedules name no instant after its watermark (a one-time job that fired, a schedule
    past its `end_at`): nothing more will be claimed; its history stays."""
    job = Job.from_spec(json.loads(row[3]))
    out = _job_api(job, reveal_secrets)
    out.update(version=row[2], paused=bool(row[4]), watermark=ms_to_iso(row[6]),
               created_at=ms_to_iso(row[7]), updated_at=ms_to_iso(row[8]),
               done=schedule_done(job, row[6]))
    return out


def schedule_done(job: Job, watermark_ms: int | None) -> bool:
    if job.after is not None:
        return False  # a chained job is never done: its upstream may end again
    try:
        return job.fire_times().next_after(watermark_ms or 0) is None
    except ValueError:  # a stored schedule this build cannot compile: not known done
        return False


def occurrence_to_api(row: tuple) -> dict[str, Any]:
    return {
        "id": row[0], "job_id": row[1], "tenant": row[2], "queue": row[3],
        # A chained job's run is stored as a manual one with its upstream beside it.
        "kind": "chained" if len(row) > 16 and row[16] else row[4],
        "scheduled_for": ms_to_iso(row[5]), "dispatch_at": ms_to_iso(row[6]),
        "job_version": row[7], "status": row[8], "reason": row[9],
        "idempotency_key": row[10], "attempts": row[11], "epoch": row[12],
        "created_at": ms_to_iso(row[13]), "finished_at": ms_to_iso(row[14]),
        # The schedules that named the instant (a job with several; null otherwise).
        "schedules": json.loads(row[15]) if len(row) > 15 and row[15] else None,
        # The upstream run that started a chained job's run (null for other runs).
        "upstream": upstream_of(row[16], row[17]) if len(row) > 17 else None,
    }


def attempt_to_api(row: tuple) -> dict[str, Any]:
    return {
        "id": row[0], "occurrence_id": row[1], "number": row[2], "status": row[3],
        "not_before": ms_to_iso(row[4]), "worker_id": row[5], "fencing_token": row[6],
        "leased_at": ms_to_iso(row[7]), "heartbeat_at": ms_to_iso(row[8]),
        "lease_expires_at": ms_to_iso(row[9]), "cancel_requested": bool(row[10]),
        "finished_at": ms_to_iso(row[11]), "exit_code": row[12], "output": row[13],
        "error": row[14], "ack_deadline": ms_to_iso(row[15]), "acknowledged_at": ms_to_iso(row[16]),
        # leases of this attempt released unacknowledged (not counted as attempts), and why
        "unacknowledged_releases": row[17], "release_reason": row[18],
        **run_times(row[19] if len(row) > 19 else None, row[11]),
    }


def run_times(started_ms: int | None, finished_ms: int | None) -> dict[str, Any]:
    """`started_at` (when the job's process started, as its worker reported it: the run's
    time) and `duration_s` (finish - start). An attempt whose worker reported no start (a
    worker of an older build, a run lost or cancelled before it ended) shows neither: its
    lease time is not its start (a run leased ahead waits for its instant)."""
    duration = None
    if started_ms is not None and finished_ms is not None:
        duration = round((finished_ms - started_ms) / 1000, 3)
    return {"started_at": ms_to_iso(started_ms), "duration_s": duration}
