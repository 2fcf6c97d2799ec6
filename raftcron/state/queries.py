"""Read-side SQL and row → JSON shapes, shared by the API and the CLI."""

from __future__ import annotations

import json
from typing import Any

from raftcron.core import identity
from raftcron.core.model import Job
from raftcron.core.timefmt import ms_to_iso

JOB_SELECT = (
    "SELECT id, tenant, version, spec, paused, queue, watermark_ms, created_ms, updated_ms "
    "FROM jobs"
)
OCC_SELECT = (
    "SELECT id, job_id, tenant, queue, kind, scheduled_for_ms, dispatch_at_ms, job_version, "
    "status, reason, idempotency_key, attempts, epoch, created_ms, finished_ms FROM occurrences"
)


def recent_occurrences(job_id: str, limit: int) -> tuple[str, tuple[Any, ...]]:
    """SQL and parameters for a job's newest `limit` occurrences, newest first.

    Scheduled ones come from the end of their id range, already in the order of their
    instants (core.identity), so the query reads `limit` rows of a long history instead of
    sorting all of it; manual and backfill ones (the rest of the job's range) are merged in.
    """
    lo, hi = identity.job_scheduled_occurrences(job_id)
    _, end = identity.job_occurrences(job_id)  # [hi, end): the job's other kinds
    sql = (
        f"SELECT * FROM (SELECT * FROM ({OCC_SELECT} WHERE id >= ? AND id < ? "
        f"ORDER BY id DESC LIMIT ?) UNION ALL {OCC_SELECT} WHERE id >= ? AND id < ?) "
        "ORDER BY scheduled_for_ms DESC, id DESC LIMIT ?"
    )
    return sql, (lo, hi, limit, hi, end, limit)


ATT_SELECT = (
    "SELECT id, occurrence_id, number, status, not_before_ms, worker_id, fencing_token, "
    "leased_ms, heartbeat_ms, lease_expires_ms, cancel_requested, finished_ms, exit_code, "
    "output, error FROM attempts"
)


def job_to_api(row: tuple) -> dict[str, Any]:
    job = Job.from_spec(json.loads(row[3]))
    out = job.to_api()
    out.update(version=row[2], paused=bool(row[4]), watermark=ms_to_iso(row[6]),
               created_at=ms_to_iso(row[7]), updated_at=ms_to_iso(row[8]))
    return out


def occurrence_to_api(row: tuple) -> dict[str, Any]:
    return {
        "id": row[0], "job_id": row[1], "tenant": row[2], "queue": row[3], "kind": row[4],
        "scheduled_for": ms_to_iso(row[5]), "dispatch_at": ms_to_iso(row[6]),
        "job_version": row[7], "status": row[8], "reason": row[9],
        "idempotency_key": row[10], "attempts": row[11], "epoch": row[12],
        "created_at": ms_to_iso(row[13]), "finished_at": ms_to_iso(row[14]),
    }


def attempt_to_api(row: tuple) -> dict[str, Any]:
    return {
        "id": row[0], "occurrence_id": row[1], "number": row[2], "status": row[3],
        "not_before": ms_to_iso(row[4]), "worker_id": row[5], "fencing_token": row[6],
        "leased_at": ms_to_iso(row[7]), "heartbeat_at": ms_to_iso(row[8]),
        "lease_expires_at": ms_to_iso(row[9]), "cancel_requested": bool(row[10]),
        "finished_at": ms_to_iso(row[11]), "exit_code": row[12], "output": row[13],
        "error": row[14],
    }
