"""The history of a job's changes: one `job_history` row per committed change.

`record` is called by the job handlers (state.jobs, and the bulk pause in
state.calendars) inside the transaction of the change, with only what the command
carries (its stamp, its `who`), so every node writes the same rows.

Bounds:
- at most `MAX_VERSIONS_PER_JOB` rows per job id: recording one more deletes the oldest
  beyond it;
- the rows of a deleted job go with retention (`prune_deleted`, called by `Prune`) once
  the delete is older than the retention, like the job's finished runs. A job id that
  lives again keeps its earlier life's rows (they are pruned by the cap as it changes).

What is a change: a create, an edit (every PUT moves the version, even one that changes
nothing), a delete, and a pause or resume that changes the paused state (pausing a
paused job records nothing; a bulk pause records a row for each job it paused, with its
note).
"""

from __future__ import annotations

import sqlite3

from raftcron.core.protocol import JOB_HISTORY_LEVEL
from raftcron.state.cluster_level import committed_level
from raftcron.state.context import ApplyContext

MAX_VERSIONS_PER_JOB = 100
KINDS = ("create", "edit", "pause", "resume", "bulk_pause", "bulk_resume", "delete")
# Deleted jobs whose rows one Prune removes (up to MAX_VERSIONS_PER_JOB rows each): a
# bounded apply, as for occurrences; the rest go in the next round.
PRUNE_JOBS_PER_COMMAND = 50

HISTORY_COLUMNS = "job_id, seq, version, kind, tenant, who, note, at_ms, spec"

_DELETED_BEFORE = (
    "SELECT h.job_id FROM job_history h "
    "WHERE h.kind = 'delete' AND h.at_ms < :before "
    "AND NOT EXISTS (SELECT 1 FROM jobs WHERE id = h.job_id) "
    "AND NOT EXISTS (SELECT 1 FROM job_history n WHERE n.job_id = h.job_id "
    "AND n.at_ms >= :before)"
)


def record(ctx: ApplyContext, *, job_id: str, tenant: str, version: int, kind: str,
           who: str | None, at_ms: int, spec: str, note: str | None = None) -> int | None:
    """Append a change of `job_id` (`spec`: the canonical spec text after it); its seq.
    None, and nothing recorded, before the cluster's committed level has history
    (core.protocol.JOB_HISTORY_LEVEL): during a rolling upgrade the older builds record
    none, and every node's state must stay the same. History begins at the upgrade."""
    conn = ctx.conn
    if committed_level(conn) < JOB_HISTORY_LEVEL:
        return None
    (last,) = conn.execute("SELECT coalesce(max(seq), 0) FROM job_history WHERE job_id = ?",
                           (job_id,)).fetchone()
    seq = last + 1
    conn.execute(
        f"INSERT INTO job_history ({HISTORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (job_id, seq, version, kind, tenant, who, note, at_ms, spec))
    conn.execute("DELETE FROM job_history WHERE job_id = ? AND seq <= ?",
                 (job_id, seq - MAX_VERSIONS_PER_JOB))
    return seq


def prune_deleted(ctx: ApplyContext, before_ms: int,
                  limit: int = PRUNE_JOBS_PER_COMMAND) -> int:
    """Delete the rows of up to `limit` jobs deleted before `before_ms` (and not changed
    since: a job id created again, or deleted again later, keeps them). The jobs pruned."""
    # In index order, never the planner's: every node must pick the same jobs.
    ids = sorted({row[0] for row in ctx.conn.execute(
        f"{_DELETED_BEFORE} ORDER BY h.at_ms, h.job_id LIMIT :limit",
        {"before": before_ms, "limit": limit})})
    ctx.conn.executemany("DELETE FROM job_history WHERE job_id = ?", [(i,) for i in ids])
    return len(ids)


def any_deleted_before(conn: sqlite3.Connection, before_ms: int) -> bool:
    """Whether `prune_deleted` has anything to do (retention asks before it proposes)."""
    return conn.execute(f"{_DELETED_BEFORE} LIMIT 1", {"before": before_ms}).fetchone() \
        is not None
