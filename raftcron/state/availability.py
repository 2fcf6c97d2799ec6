"""When the cluster could schedule: stretches of time vouched for by a leader.

A leader whose clock a majority confirms commits `ConfirmClock` about once a second
(leader.availability), each one proposed only after the previous one committed. Two
consecutive confirmations of one epoch at most `max_gap_ms` apart prove that the cluster
had a working leader, committing, between them: they merge into one stretch of
`cluster_availability`. A confirmation that took long to commit (a majority paused or cut
off) is stamped long before the next one, so its wait is a gap, not a stretch. Time
covered by no stretch is time the cluster had no leader, or had one whose clock was
refused (the fail-closed clock guard stops its confirmations with its ticking): nothing
could be claimed, leased or judged then.

Deadline alerts read these stretches at apply time to name the cluster's own trouble
(`cause = "cluster_unavailable"`): the decision is made from replicated rows, so every
node records the same cause. Nothing is claimed where nothing is known: before the first
confirmation ever committed (a cluster upgraded from a version without them) and after
the newest one.
"""

from __future__ import annotations

from typing import Any

from raftcron.core.commands import ConfirmClock
from raftcron.state.context import ApplyContext, ok

CLUSTER_UNAVAILABLE = "cluster_unavailable"
# The reasons an unavailable cluster explains: nothing was claimed or leased in time.
# A failure, or a run still running at its deadline, is the job's own.
CAUSE_REASONS = frozenset({"missed", "late", "not_started"})
META_SINCE = "availability_since_ms"


def confirm_clock(ctx: ApplyContext, cmd: ConfirmClock) -> dict[str, Any]:
    """Extend this epoch's current stretch to `now_ms`, or begin a new one after a gap."""
    conn = ctx.conn
    if ctx.meta(META_SINCE) == 0:
        ctx.set_meta(META_SINCE, cmd.now_ms)
    row = conn.execute(
        "SELECT id, to_ms FROM cluster_availability WHERE epoch = ? ORDER BY id DESC LIMIT 1",
        (cmd.epoch,)).fetchone()
    if row is not None and cmd.now_ms <= row[1]:
        return ok(extended=False)  # not after the stretch's end: it proves nothing new
    if row is not None and cmd.now_ms - row[1] <= cmd.max_gap_ms:
        conn.execute("UPDATE cluster_availability SET to_ms = ? WHERE id = ?",
                     (cmd.now_ms, row[0]))
        return ok(extended=True)
    next_id = conn.execute(
        "SELECT coalesce(max(id), 0) + 1 FROM cluster_availability").fetchone()[0]
    conn.execute("INSERT INTO cluster_availability (id, epoch, from_ms, to_ms) "
                 "VALUES (?, ?, ?, ?)", (next_id, cmd.epoch, cmd.now_ms, cmd.now_ms))
    return ok(extended=False)


def unavailable_ms(ctx: ApplyContext, start_ms: int, end_ms: int) -> tuple[bool, int]:
    """Whether `start_ms` itself fell outside every stretch, and how long of
    [start_ms, end_ms] did (the caller keeps both within what is known)."""
    stretches = ctx.conn.execute(
        "SELECT from_ms, to_ms FROM cluster_availability WHERE to_ms >= ? AND from_ms <= ? "
        "ORDER BY from_ms", (start_ms, end_ms)).fetchall()
    covered_at_start = any(lo <= start_ms <= hi for lo, hi in stretches)
    gap = 0
    at = start_ms
    for lo, hi in stretches:
        if lo > at:
            gap += lo - at
        at = max(at, hi)
        if at >= end_ms:
            break
    gap += max(0, end_ms - at)
    return not covered_at_start, gap


def cause(ctx: ApplyContext, instant_ms: int, deadline_ms: int) -> str | None:
    """`cluster_unavailable` when the instant fell in a time without a working leader, or
    when the cluster was without one for at least half of the time from the instant to its
    deadline; None otherwise, and when nothing is recorded about the instant (before the
    first confirmation, or after the newest: the time since is not counted either)."""
    since = ctx.meta(META_SINCE)
    known_until = ctx.conn.execute("SELECT max(to_ms) FROM cluster_availability").fetchone()[0]
    if since == 0 or known_until is None or not since <= instant_ms <= known_until:
        return None
    window = deadline_ms - instant_ms
    at_instant, gap = unavailable_ms(ctx, instant_ms, min(max(instant_ms, deadline_ms),
                                                          known_until))
    if at_instant or (window > 0 and 2 * gap >= window):
        return CLUSTER_UNAVAILABLE
    return None


def prune(ctx: ApplyContext, before_ms: int) -> None:
    """Stretches that ended before `before_ms` (retention's horizon). The newest is kept:
    it carries the next id."""
    ctx.conn.execute(
        "DELETE FROM cluster_availability WHERE to_ms < ? AND id < "
        "(SELECT max(id) FROM cluster_availability)", (before_ms,))
