"""Chains in the state: checking a chained job's upstream, and starting its runs.

A chained job's run is created inside the apply of the entry that ended its upstream's
occurrence (a completion, a final failure), so both are one transaction on every node:
no failover can run the upstream's end without the downstream's start, or the other way
round. The run is named by (downstream job, upstream occurrence) (core.identity), and the
UNIQUE index `occ_chained` makes the final call on duplicates.

The downstream run follows its own job's rules at that moment: a paused job, an overlap
policy that refuses, or a tenant quota that is full records it `skipped` with the reason,
so every upstream end that should start a run is accounted for by exactly one row.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from raftcron.core import errors, identity, policy
from raftcron.core.chains import ENDS_FOLLOWED, MAX_CHAIN_DEPTH, MAX_FOLLOWERS
from raftcron.core.model import Job
from raftcron.state.context import ApplyContext, rejected
from raftcron.state.db import META_EPOCH
from raftcron.state.occurrences import (
    ATT_INSERT,
    attempt_row,
    cancel_running,
    load_views,
    overlap_for,
)
from raftcron.state.tenants import FireCounter, refuse_pending

# Uses the partial index jobs_after: with no chained job it reads nothing.
FOLLOWERS_SQL = (
    "SELECT id, json_extract(spec, '$.after.job'), json_extract(spec, '$.after.on') "
    "FROM jobs WHERE json_extract(spec, '$.after') IS NOT NULL "
    "AND json_extract(spec, '$.after.job') IN (SELECT value FROM json_each(?)) ORDER BY id"
)
FOLLOWER_COUNT_SQL = (
    "SELECT count(*) FROM jobs WHERE json_extract(spec, '$.after') IS NOT NULL "
    "AND json_extract(spec, '$.after.job') = ? AND id != ?"
)
CHAINED_INSERT = (
    "INSERT OR IGNORE INTO occurrences (id, job_id, tenant, queue, kind, scheduled_for_ms, "
    "dispatch_at_ms, job_version, status, reason, attempts, epoch, created_ms, finished_ms, "
    "upstream, upstream_outcome) VALUES (?,?,?,?,'manual',?,?,?,?,?,?,?,?,?,?,?)"
)


def check_after(conn: sqlite3.Connection, job: Job,
                previous: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """A rejection when a chained job's upstream does not exist in its tenant (one of
    another tenant reads as absent) or following it closes a cycle (400), or when it
    already has MAX_FOLLOWERS followers (409, as a quota); else None. `previous`: the
    spec an edit replaces; an edit that keeps the job's upstream is not judged again (its
    upstream may have been deleted since, and the job must stay editable)."""
    if job.after is None:
        return None
    if previous is not None and previous.get("after") == job.after.to_spec():
        return None
    upstream = job.after.job
    row = conn.execute("SELECT tenant FROM jobs WHERE id = ?", (upstream,)).fetchone()
    if row is None or row[0] != job.tenant:
        return rejected(errors.INVALID_REFERENCE, f"job {upstream!r} does not exist in "
                        f"tenant {job.tenant!r}", "after.job")
    followers = conn.execute(FOLLOWER_COUNT_SQL, (upstream, job.id)).fetchone()[0]
    if followers >= MAX_FOLLOWERS:  # a limit of the upstream's state, as a quota is: 409
        return rejected(errors.QUOTA_EXCEEDED, f"job {upstream!r} already has "
                        f"{MAX_FOLLOWERS} chained jobs, the most one job may have",
                        "after.job")
    path = [job.id, upstream]
    current = upstream
    for _ in range(MAX_CHAIN_DEPTH):
        spec = conn.execute("SELECT tenant, spec FROM jobs WHERE id = ?",
                            (current,)).fetchone()
        if spec is None or spec[0] != job.tenant:
            return None  # the chain above leaves the tenant (a dangling name): no cycle
        after = json.loads(spec[1]).get("after")
        if after is None:
            return None
        current = after["job"]
        path.append(current)
        if current == job.id:
            return rejected(errors.INVALID_REFERENCE, "a cycle: " + " after ".join(path),
                            "after.job")
    return rejected(errors.INVALID_REFERENCE, f"the chain above {job.id!r} is longer than "
                    f"{MAX_CHAIN_DEPTH} jobs", "after.job")


def start_followers(ctx: ApplyContext, ended: Iterable[tuple[str, str, str]],
                    now_ms: int) -> None:
    """For each upstream occurrence this entry ended, as (job, occurrence, status), create
    one run of every job that follows that job on that end."""
    ended = list(ended)
    if not ended:
        return
    upstream_jobs = sorted({job_id for job_id, _, _ in ended})
    followers: dict[str, list[tuple[str, str]]] = {}
    for follower, upstream, on in ctx.conn.execute(FOLLOWERS_SQL,
                                                   (json.dumps(upstream_jobs),)):
        followers.setdefault(upstream, []).append((follower, on))
    if not followers:
        return
    for job_id, occ_id, status in ended:
        for follower, on in followers.get(job_id, ()):
            if status in ENDS_FOLLOWED.get(on, ()):
                _start_one(ctx, follower, occ_id, status, now_ms)


def _start_one(ctx: ApplyContext, job_id: str, upstream_occ: str, outcome: str,
               now_ms: int) -> None:
    conn = ctx.conn
    if conn.execute("SELECT 1 FROM occurrences WHERE job_id = ? AND upstream = ?",
                    (job_id, upstream_occ)).fetchone():
        return  # (job, upstream) is one run, ever
    occ_id = identity.chained_occurrence_id(job_id, upstream_occ, now_ms)
    view = load_views(conn, {job_id}).get(job_id)
    upstream_tenant = conn.execute("SELECT tenant FROM occurrences WHERE id = ?",
                                   (upstream_occ,)).fetchone()
    if view is None or upstream_tenant is None or upstream_tenant[0] != view.tenant:
        return  # an upstream id re-created in another tenant starts nothing here
    reason = None
    fires = FireCounter(conn)
    verdict = overlap_for(conn, view)
    if view.paused:
        reason = policy.SKIP_PAUSED
    elif not verdict.run:
        reason = policy.SKIP_OVERLAP
    elif not fires.has_room(view.tenant, now_ms) or refuse_pending(conn, view.tenant, 1):
        reason = policy.SKIP_QUOTA
    if reason is None:
        if verdict.cancel_running:
            cancel_running(ctx, job_id, now_ms)
        fires.add(view.tenant, now_ms)
    conn.execute(CHAINED_INSERT, (
        occ_id, view.id, view.tenant, view.queue, now_ms, now_ms, view.version,
        "skipped" if reason else "pending", reason, 0 if reason else 1,
        ctx.meta(META_EPOCH), now_ms, now_ms if reason else None, upstream_occ, outcome,
    ))
    if reason is None:
        conn.execute(ATT_INSERT, attempt_row(occ_id, view, now_ms, now_ms))

