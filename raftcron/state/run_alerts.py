"""Alerts decided when a run ends, at apply time: `too_fast` and `failures`.

- `min_duration_s`: a success quicker than that (from the attempt's start, the later of
  its lease and its instant, as the sweeper's max runtime counts, to the completion's
  `now_ms`) raises `too_fast` for
  its occurrence: a job that "succeeded" without doing its work. Such alerts of a job are
  resolved by its next success that took at least the bound.
- `alert_after_failures: N`: the job's occurrences that end `failed` (after their
  retries) are counted in `failure_streaks`; the N-th consecutive one raises the job's
  single `failures:<job>` alert, later failures of the same streak raise nothing (so a
  person who resolved it by hand is not paged again by the same streak). The job's next
  success resolves the alert and ends the streak: the alert is armed again, for the next
  N consecutive failures.

Everything here reads the command's `now_ms` and the replicated rows only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from raftcron.state import channels
from raftcron.state.alerts import close_alert, open_alert
from raftcron.state.context import ApplyContext

TOO_FAST = "too_fast"
FAILURES = "failures"

SpecOf = Callable[[str], dict[str, Any] | None]


def failures_alert_id(job_id: str) -> str:
    return f"{FAILURES}:{job_id}"


def too_fast_alert_id(occurrence_id: str) -> str:
    return f"{TOO_FAST}:{occurrence_id}"


def after_successes(ctx: ApplyContext, successes: list[tuple[str, str, str]], now_ms: int,
                    spec_of: SpecOf) -> None:
    """`successes`: (attempt id, occurrence id, job id) of the attempts this command
    recorded as succeeded. Jobs without either bound cost one cached spec lookup."""
    for attempt_id, occ_id, job_id in successes:
        spec = spec_of(job_id)
        if spec is None:
            continue
        channels.after_success(ctx, job_id, occ_id, spec, now_ms)
        if spec.get("alert_after_failures") is not None:
            _end_streak(ctx, job_id, now_ms)
        if spec.get("min_duration_s") is not None:
            _check_too_fast(ctx, attempt_id, occ_id, job_id, spec["min_duration_s"], now_ms)


def _end_streak(ctx: ApplyContext, job_id: str, now_ms: int) -> None:
    if ctx.conn.execute("DELETE FROM failure_streaks WHERE job_id = ?", (job_id,)).rowcount:
        close_alert(ctx, failures_alert_id(job_id), now_ms, "the job succeeded again")


def _check_too_fast(ctx: ApplyContext, attempt_id: str, occ_id: str, job_id: str,
                    min_s: int, now_ms: int) -> None:
    row = ctx.conn.execute(
        "SELECT a.leased_ms, o.scheduled_for_ms, a.not_before_ms, a.started_ms, "
        "a.finished_ms FROM attempts a "
        "JOIN occurrences o ON o.id = a.occurrence_id WHERE a.id = ?", (attempt_id,)
    ).fetchone()
    if row is None or row[0] is None:
        return
    if row[3] is not None:  # the worker reported its start: finish - start, as shown
        took_ms = row[4] - row[3]
    else:
        # From its start: the later of its lease and its instant (a run leased ahead waits
        # for its instant). Run bounds need protocol level 2, as leases ahead do, so no
        # state of a level-1 build has a bound to count by another rule.
        took_ms = max(0, now_ms - max(row[0], row[2]))
    if took_ms < min_s * 1000:
        open_alert(ctx, too_fast_alert_id(occ_id), TOO_FAST, TOO_FAST, now_ms,
                   job_id=job_id, occurrence_id=occ_id, scheduled_for_ms=row[1],
                   message=f"succeeded after {took_ms / 1000:.1f} s; min_duration_s is "
                           f"{min_s}")
        return
    for (aid,) in ctx.conn.execute(
            "SELECT id FROM alerts WHERE job_id = ? AND kind = ? AND status = 'open'",
            (job_id, TOO_FAST)).fetchall():
        close_alert(ctx, aid, now_ms, f"a later run took {took_ms / 1000:.1f} s")


def after_failure(ctx: ApplyContext, job_id: str, occ_id: str, spec: dict[str, Any] | None,
                  now_ms: int, why: str) -> None:
    """An occurrence of the job ended `failed` (no retry left)."""
    channels.note_trouble(ctx, job_id, occ_id, spec, "occurrence.failed", now_ms)
    threshold = None if spec is None else spec.get("alert_after_failures")
    if threshold is None:
        return
    row = ctx.conn.execute("SELECT failures FROM failure_streaks WHERE job_id = ?",
                           (job_id,)).fetchone()
    failures = (row[0] if row else 0) + 1
    ctx.conn.execute(
        "INSERT INTO failure_streaks (job_id, failures, updated_ms) VALUES (?, ?, ?) "
        "ON CONFLICT (job_id) DO UPDATE SET failures = excluded.failures, "
        "updated_ms = excluded.updated_ms", (job_id, failures, now_ms))
    if failures != threshold:
        return
    sched = ctx.conn.execute("SELECT scheduled_for_ms FROM occurrences WHERE id = ?",
                             (occ_id,)).fetchone()
    open_alert(ctx, failures_alert_id(job_id), FAILURES, "consecutive_failures", now_ms,
               job_id=job_id, occurrence_id=occ_id,
               scheduled_for_ms=sched[0] if sched else None,
               message=f"{failures} consecutive failures; the last: {why}")


def forget_job(ctx: ApplyContext, job_id: str) -> None:
    """A deleted job's streak goes with it (a job made again later starts afresh)."""
    ctx.conn.execute("DELETE FROM failure_streaks WHERE job_id = ?", (job_id,))
    channels.forget_job(ctx, job_id)
