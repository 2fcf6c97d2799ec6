"""When the cluster could schedule: stretches of time vouched for by a leader.

A leader whose clock a majority confirms commits `ConfirmClock` about once a second
(leader.availability). Each one vouches that the cluster had a working leader from its
`now_ms` for `valid_ms`; overlapping vouchers of one epoch merge into one stretch of
`cluster_availability`. Time covered by no stretch is time the cluster had no leader, or
had one whose clock was refused (the fail-closed clock guard stops its confirmations with
its ticking): nothing could be claimed, leased or judged then.

Deadline alerts read these stretches at apply time to name the cluster's own trouble
(`cause = "cluster_unavailable"`): the decision is made from replicated rows, so every
node records the same cause. Before the first confirmation was ever committed (a cluster
upgraded from a version without them) nothing is known, and no cause is given.
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
    """Extend this epoch's current stretch, or begin a new one after a gap."""
    conn = ctx.conn
    if ctx.meta(META_SINCE) == 0:
        ctx.set_meta(META_SINCE, cmd.now_ms)
    until = cmd.now_ms + cmd.valid_ms
    row = conn.execute(
        "SELECT id, to_ms FROM cluster_availability WHERE epoch = ? ORDER BY id DESC LIMIT 1",
        (cmd.epoch,)).fetchone()
    if row is not None and cmd.now_ms <= row[1]:
        conn.execute("UPDATE cluster_availability SET to_ms = max(to_ms, ?) WHERE id = ?",
                     (until, row[0]))
        return ok(extended=True)
    next_id = conn.execute(
        "SELECT coalesce(max(id), 0) + 1 FROM cluster_availability").fetchone()[0]
    conn.execute("INSERT INTO cluster_availability (id, epoch, from_ms, to_ms) "
                 "VALUES (?, ?, ?, ?)", (next_id, cmd.epoch, cmd.now_ms, until))
    return ok(extended=False)


def unavailable_ms(ctx: ApplyContext, start_ms: int, end_ms: int) -> tuple[bool, int]:
    """Whether `start_ms` itself fell outside every stretch, and how long of
    [start_ms, end_ms] did."""
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
    deadline; None otherwise, and when availability was not recorded yet at the instant."""
    since = ctx.meta(META_SINCE)
    if since == 0 or instant_ms < since:
        return None
    window = deadline_ms - instant_ms
    at_instant, gap = unavailable_ms(ctx, instant_ms, max(instant_ms, deadline_ms))
    if at_instant or (window > 0 and 2 * gap >= window):
        return CLUSTER_UNAVAILABLE
    return None


def prune(ctx: ApplyContext, before_ms: int) -> None:
    """Stretches that ended before `before_ms` (retention's horizon). The newest is kept:
    it carries the next id."""
    ctx.conn.execute(
        "DELETE FROM cluster_availability WHERE to_ms < ? AND id < "
        "(SELECT max(id) FROM cluster_availability)", (before_ms,))
