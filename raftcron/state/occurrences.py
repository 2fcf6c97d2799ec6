"""Occurrence aggregate: scheduled claims, manual triggers, backfills."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from raftcron.core import errors, identity, policy
from raftcron.core.calendar import SKIP_PREFIX
from raftcron.core.commands import Backfill, Claim, TriggerManual
from raftcron.core.protocol import BACKFILL_BY_INSTANT_LEVEL
from raftcron.state import backfills
from raftcron.state.bulk_claim import (
    STATEMENTS,
    BulkClaimed,
    ClaimStatements,
    bulk_claim,
    well_formed,
)
from raftcron.state.cluster_level import committed_level
from raftcron.state.context import ApplyContext, ok, parse_spec, rejected
from raftcron.state.db import META_EPOCH
from raftcron.state.tenants import FireCounter, refuse_pending

OCC_INSERT = (
    "INSERT OR IGNORE INTO occurrences (id, job_id, tenant, queue, kind, scheduled_for_ms, "
    "dispatch_at_ms, job_version, status, reason, idempotency_key, request_key, attempts, "
    "epoch, created_ms, finished_ms, schedules) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
ATT_INSERT = (
    "INSERT INTO attempts (id, occurrence_id, job_id, tenant, queue, number, status, "
    "not_before_ms, created_ms) VALUES (?,?,?,?,?,?,'pending',?,?)"
)


@dataclass
class JobView:
    """What apply needs of a job row, parsed once per command."""

    id: str
    tenant: str
    version: int
    paused: bool
    queue: str
    watermark_ms: int
    spec: dict[str, Any]
    running: int | None = None
    queued: int | None = None
    new_watermark: int = field(default=0)
    # Rows of this claim batch still queued for this job (indexes into the batch lists).
    batch_queued: list[int] = field(default_factory=list)

    @property
    def overlap_policy(self) -> str:
        return self.spec["overlap_policy"]


def load_views(conn: sqlite3.Connection, job_ids: set[str]) -> dict[str, JobView]:
    views: dict[str, JobView] = {}
    ids = sorted(job_ids)
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        marks = ",".join("?" * len(chunk))
        for row in conn.execute(
            "SELECT id, tenant, version, paused, queue, watermark_ms, spec FROM jobs "
            f"WHERE id IN ({marks})",
            chunk,
        ):
            views[row[0]] = JobView(
                row[0], row[1], row[2], bool(row[3]), row[4], row[5], parse_spec(row[6]),
                new_watermark=row[5],
            )
    return views


def _load_counts(conn: sqlite3.Connection, view: JobView) -> None:
    if view.running is None:
        running, queued = conn.execute(
            "SELECT (SELECT count(*) FROM attempts WHERE job_id = ?1 AND status = 'running'), "
            "(SELECT count(*) FROM attempts WHERE job_id = ?1 AND status = 'pending')",
            (view.id,),
        ).fetchone()
        view.running, view.queued = int(running), int(queued)


def overlap_for(conn: sqlite3.Connection, view: JobView) -> policy.OverlapDecision:
    """Decide overlap for one new run and account for it in the view's counters."""
    if view.overlap_policy == "allow":
        return policy.OverlapDecision(run=True)
    _load_counts(conn, view)
    assert view.running is not None and view.queued is not None
    decision = policy.decide_overlap(view.overlap_policy, view.running, view.queued)
    if decision.cancel_running:
        view.queued = 0  # the queued runs are cancelled with this decision
    if decision.run:
        view.queued += 1
    return decision


def cancel_running(ctx: ApplyContext, job_id: str, now_ms: int) -> None:
    """`replace`: the newest run supersedes the others. Queued runs are cancelled now;
    running attempts learn of the cancel through their heartbeat response."""
    conn = ctx.conn
    conn.execute(
        "UPDATE attempts SET cancel_requested = 1 WHERE job_id = ? AND status = 'running'",
        (job_id,),
    )
    conn.execute(
        "UPDATE occurrences SET status = 'cancelled', reason = 'replaced', finished_ms = ? "
        "WHERE id IN (SELECT occurrence_id FROM attempts WHERE job_id = ? "
        "AND status = 'pending')",
        (now_ms, job_id),
    )
    conn.execute(
        "UPDATE attempts SET status = 'cancelled', error = 'replaced', finished_ms = ? "
        "WHERE job_id = ? AND status = 'pending'",
        (now_ms, job_id),
    )


def occurrence_row(
    occ_id: str, view: JobView, kind: str, scheduled_for: int, dispatch_at: int,
    status: str, reason: str | None, epoch: int, now_ms: int,
    idempotency_key: str | None = None, request_key: str | None = None,
    schedules: list[str] | None = None,
) -> tuple:
    finished = now_ms if status == "skipped" else None
    return (
        occ_id, view.id, view.tenant, view.queue, kind, scheduled_for, dispatch_at,
        view.version, status, reason, idempotency_key, request_key,
        1 if status == "pending" else 0, epoch, now_ms, finished,
        None if schedules is None else json.dumps(schedules, separators=(",", ":")),
    )


def attempt_row(occ_id: str, view: JobView, not_before: int, now_ms: int) -> tuple:
    return (
        identity.attempt_id(occ_id, 1), occ_id, view.id, view.tenant, view.queue, 1,
        not_before, now_ms,
    )


def _as_replaced(row: tuple, now_ms: int) -> tuple:
    """An occurrence row of this batch superseded by a newer instant (`replace`)."""
    return (*row[:8], "cancelled", "replaced", *row[10:12], 0, row[13], row[14], now_ms,
            *row[16:])


def _valid_decision(decision: str, view: JobView, matched: list[str] | None) -> bool:
    """A decision apply records: fire, misfire, paused, or `calendar:<name>` for a
    calendar the job lists; matched schedule names, when sent, must be the job's own."""
    if matched is not None:
        names = {s.get("name") for s in view.spec.get("schedules") or ()}
        if not set(matched) <= names:
            return False
    if decision in (policy.FIRE, policy.SKIP_MISFIRE, policy.SKIP_PAUSED):
        return True
    return (decision.startswith(SKIP_PREFIX)
            and decision[len(SKIP_PREFIX):] in (view.spec.get("calendars") or ()))


def _malformed(item: Any) -> list[Any]:
    fields = item if isinstance(item, list) and item else [item]
    return [fields[0], fields[2] if len(fields) > 2 else None, "invalid_item"]


def claim(ctx: ApplyContext, cmd: Claim, bulk: bool = True,
          statements: ClaimStatements = STATEMENTS) -> dict[str, Any]:
    """Record the leader's decision for each nominal instant, once per (job, instant).

    The items SQL can decide alone go through the set statements of `bulk_claim`; the
    rest, item by item, through `claim_items`. `bulk=False` decides every item one by one
    (the reference the set path is tested against); `statements` are the set statements
    (benchmarks measure other storage models with them)."""
    taken = BulkClaimed()
    if bulk:
        ctx.conn.execute("SAVEPOINT bulk_claim")
        recorded = bulk_claim(ctx.conn, cmd.items, cmd.epoch, cmd.now_ms, statements)
        if recorded is None:  # the database refused a row: decide each item on its own
            ctx.conn.execute("ROLLBACK TO bulk_claim")
        else:
            taken = recorded
        ctx.conn.execute("RELEASE bulk_claim")
    rest = cmd.items if not taken.positions else [
        item for pos, item in enumerate(cmd.items) if pos not in taken.positions]
    if not rest:
        return ok(fired=taken.fired, skipped=taken.skipped, rejected_items=[])
    result = claim_items(ctx, cmd, rest)
    result["fired"] += taken.fired
    result["skipped"] += taken.skipped
    return result


def claim_items(ctx: ApplyContext, cmd: Claim, items: list[list[Any]]) -> dict[str, Any]:
    """Decide and record `items` of `cmd` one by one (overlap, quotas, refusals)."""
    conn = ctx.conn
    rejected_items: list[list[Any]] = []
    if not all(well_formed(item) for item in items):
        # Only a broken or foreign proposer sends these; refuse them, never raise.
        rejected_items = [_malformed(item) for item in items if not well_formed(item)]
        items = [item for item in items if well_formed(item)]
    views = load_views(conn, {item[0] for item in items})
    fires = FireCounter(conn)
    occ_rows: list[tuple] = []
    fired = skipped = 0
    for item in items:
        job_id, job_version, scheduled_for, dispatch_at, decision = item[:5]
        matched = item[5] if len(item) > 5 else None
        view = views.get(job_id)
        if view is None:
            rejected_items.append([job_id, scheduled_for, errors.NOT_FOUND])
            continue
        if view.version != job_version:
            rejected_items.append([job_id, scheduled_for, errors.VERSION_CONFLICT])
            continue
        if scheduled_for <= view.new_watermark:
            # Everything at or before the watermark is already accounted for.
            rejected_items.append([job_id, scheduled_for, "already_claimed"])
            continue
        if not _valid_decision(decision, view, matched):
            rejected_items.append([job_id, scheduled_for, "invalid_decision"])
            continue
        view.new_watermark = scheduled_for
        occ_id = identity.scheduled_occurrence_id(job_id, scheduled_for)
        reason: str | None = None
        if decision == policy.FIRE and view.paused:
            reason = policy.SKIP_PAUSED
        elif decision != policy.FIRE:
            reason = decision
        elif not fires.has_room(view.tenant, scheduled_for):
            reason = policy.SKIP_QUOTA
        else:
            verdict = overlap_for(conn, view)
            if verdict.run:
                fires.add(view.tenant, scheduled_for)
            if not verdict.run:
                reason = policy.SKIP_OVERLAP
            elif verdict.cancel_running:
                cancel_running(ctx, job_id, cmd.now_ms)
                for i in view.batch_queued:  # runs queued earlier in this same batch
                    occ_rows[i] = _as_replaced(occ_rows[i], cmd.now_ms)
                    fired -= 1
                    skipped += 1
                view.batch_queued.clear()
        status = "skipped" if reason else "pending"
        occ_rows.append(occurrence_row(
            occ_id, view, "scheduled", scheduled_for, dispatch_at, status, reason,
            cmd.epoch, cmd.now_ms, schedules=matched,
        ))
        if reason is None:
            view.batch_queued.append(len(occ_rows) - 1)
            fired += 1
        else:
            skipped += 1
    att_rows = [attempt_row(r[0], views[r[1]], r[6], cmd.now_ms) for r in occ_rows
                if r[8] == "pending"]
    conn.execute("SAVEPOINT claim_rows")
    before = conn.total_changes
    conn.executemany(OCC_INSERT, occ_rows)
    if conn.total_changes - before == len(occ_rows):
        conn.executemany(ATT_INSERT, att_rows)
    else:
        # The UNIQUE index refused an instant the watermark let through (e.g. a job id that
        # was deleted and re-created). The database has the final word: that instant is
        # "already claimed", deterministically on every node, and gets no attempt.
        conn.execute("ROLLBACK TO claim_rows")
        attempts_by_occ = {row[1]: row for row in att_rows}
        for row in occ_rows:
            if conn.execute(OCC_INSERT, row).rowcount:
                if row[0] in attempts_by_occ:
                    conn.execute(ATT_INSERT, attempts_by_occ[row[0]])
            else:
                rejected_items.append([row[1], row[5], "already_claimed"])
                if row[8] == "pending":
                    fired -= 1
                else:
                    skipped -= 1
    conn.execute("RELEASE claim_rows")
    conn.executemany(
        "UPDATE jobs SET watermark_ms = ? WHERE id = ? AND watermark_ms < ?",
        [(v.new_watermark, v.id, v.new_watermark) for v in views.values()
         if v.new_watermark > v.watermark_ms],
    )
    return ok(fired=fired, skipped=skipped, rejected_items=rejected_items)


def _occurrence_result(conn: sqlite3.Connection, occ_id: str, duplicate: bool) -> dict[str, Any]:
    row = conn.execute(
        "SELECT status, reason FROM occurrences WHERE id = ?", (occ_id,)
    ).fetchone()
    return ok(occurrence_id=occ_id, status=row[0], reason=row[1], duplicate=duplicate)


def trigger_manual(ctx: ApplyContext, cmd: TriggerManual) -> dict[str, Any]:
    conn = ctx.conn
    occ_id = identity.manual_occurrence_id(cmd.job_id, cmd.idempotency_key)
    if conn.execute("SELECT 1 FROM occurrences WHERE id = ?", (occ_id,)).fetchone():
        return _occurrence_result(conn, occ_id, duplicate=True)
    view = load_views(conn, {cmd.job_id}).get(cmd.job_id)
    if view is None:
        return rejected(errors.NOT_FOUND, f"job {cmd.job_id!r} does not exist", "id")
    fires = FireCounter(conn)
    if not fires.has_room(view.tenant, cmd.now_ms):
        return rejected(errors.RATE_LIMITED,
                        f"tenant {view.tenant!r} is at its max_fires_per_minute quota "
                        f"({fires.limit(view.tenant)})", "tenant", quota="max_fires_per_minute")
    reason: str | None = None
    verdict = policy.OverlapDecision(run=True)
    if not cmd.override_overlap:
        verdict = overlap_for(conn, view)
        if not verdict.run:
            reason = policy.SKIP_OVERLAP
    if reason is None:
        # One more run waiting to be leased (nothing is written before this check).
        full = refuse_pending(conn, view.tenant, 1)
        if full is not None:
            return full
    if verdict.cancel_running:
        cancel_running(ctx, cmd.job_id, cmd.now_ms)
    status = "skipped" if reason else "pending"
    if reason is None:
        fires.add(view.tenant, cmd.now_ms)
    epoch = ctx.meta(META_EPOCH)
    conn.execute(OCC_INSERT, occurrence_row(
        occ_id, view, "manual", cmd.now_ms, cmd.now_ms, status, reason, epoch, cmd.now_ms,
        idempotency_key=cmd.idempotency_key,
    ))
    if reason is None:
        conn.execute(ATT_INSERT, attempt_row(occ_id, view, cmd.now_ms, cmd.now_ms))
    return _occurrence_result(conn, occ_id, duplicate=False)


def backfill(ctx: ApplyContext, cmd: Backfill) -> dict[str, Any]:
    """Backfill occurrences are explicit requests: overlap never skips them, but exclusive
    policies still lease them one at a time. From BACKFILL_BY_INSTANT_LEVEL on, an instant
    the job already has a live or successful run of creates nothing (state.backfills), and
    the new runs must fit the tenant's max_pending_runs quota, all of the command's or
    none."""
    conn = ctx.conn
    view = load_views(conn, {cmd.job_id}).get(cmd.job_id)
    if view is None:
        return rejected(errors.NOT_FOUND, f"job {cmd.job_id!r} does not exist", "id")
    epoch = ctx.meta(META_EPOCH)
    if committed_level(conn) >= BACKFILL_BY_INSTANT_LEVEL:
        return _backfill_by_instant(ctx, cmd, view, epoch)
    ids: list[str] = []
    created = 0
    for instant in cmd.instants_ms:
        occ_id = identity.backfill_occurrence_id(cmd.job_id, instant, cmd.request_key)
        ids.append(occ_id)
        cur = conn.execute(OCC_INSERT, occurrence_row(
            occ_id, view, "backfill", instant, cmd.now_ms, "pending", None, epoch, cmd.now_ms,
            request_key=cmd.request_key,
        ))
        if cur.rowcount:
            conn.execute(ATT_INSERT, attempt_row(occ_id, view, cmd.now_ms, cmd.now_ms))
            created += 1
    return ok(occurrence_ids=ids, created=created)


def _backfill_by_instant(ctx: ApplyContext, cmd: Backfill, view: JobView, epoch: int
                         ) -> dict[str, Any]:
    conn = ctx.conn
    own, covered, existing = backfills.plan(
        lambda sql, params: conn.execute(sql, params).fetchall(),
        cmd.job_id, cmd.instants_ms, cmd.request_key)
    new = backfills.to_create(cmd.instants_ms, own, covered, existing)
    full = refuse_pending(conn, view.tenant, len(new))
    if full is not None:
        return full
    created = 0
    for instant in new:
        occ_id = own[instant]
        cur = conn.execute(OCC_INSERT, occurrence_row(
            occ_id, view, "backfill", instant, cmd.now_ms, "pending", None, epoch, cmd.now_ms,
            request_key=cmd.request_key,
        ))
        if cur.rowcount:
            conn.execute(ATT_INSERT, attempt_row(occ_id, view, cmd.now_ms, cmd.now_ms))
            created += 1
    ids = [covered.get(at, own[at]) for at in cmd.instants_ms]
    return ok(occurrence_ids=ids, created=created,
              existing=len(dict.fromkeys(cmd.instants_ms)) - created)
