"""How far behind the workers of each queue are, read from the state (never written).

A run is *due* when its attempt is pending and its `not_before_ms` (its instant, its
retry's backoff end, or the moment it was handed back) has passed. A queue's depth is its
number of due runs; its oldest due age is how long the longest-waiting of them has been
due. Both are 0 for a queue that keeps up. Queues named by a job are listed even when
empty, so a drained queue reports 0 instead of vanishing.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

# att_pending (queue, not_before_ms) WHERE status = 'pending' answers this without a scan.
DUE_SQL = (
    "SELECT queue, count(*), min(not_before_ms) FROM attempts "
    "WHERE status = 'pending' AND not_before_ms <= ?{where} GROUP BY queue"
)
QUEUES_SQL = "SELECT DISTINCT queue FROM jobs{where}"


@dataclass(frozen=True, slots=True)
class QueueBacklog:
    queue: str
    depth: int
    """Runs due and not yet leased."""
    oldest_due_ms: int | None
    """When the longest-waiting due run became due (None: nothing due)."""

    def oldest_age_s(self, now_ms: int) -> float:
        """Seconds the longest-waiting due run has waited (0 when nothing is due)."""
        if self.oldest_due_ms is None:
            return 0.0
        return max(0.0, (now_ms - self.oldest_due_ms) / 1000)


def backlog_queries(tenant_clause: str = "") -> tuple[str, str]:
    """(due runs by queue, queues named by jobs); `tenant_clause` (on a `tenant` column)
    restricts both to some tenants. The first takes (now_ms, *params), the second params."""
    due = DUE_SQL.format(where=f" AND {tenant_clause}" if tenant_clause else "")
    return due, QUEUES_SQL.format(where=f" WHERE {tenant_clause}" if tenant_clause else "")


def combine(due_rows: list[tuple], queue_rows: list[tuple]) -> list[QueueBacklog]:
    due = {q: (n, oldest) for q, n, oldest in due_rows}
    queues = set(due) | {q for (q,) in queue_rows}
    return [QueueBacklog(q, *due.get(q, (0, None))) for q in sorted(queues)]


def queue_backlog(conn: sqlite3.Connection, now_ms: int) -> list[QueueBacklog]:
    """Every queue's backlog at `now_ms`, by queue name."""
    due_sql, queues_sql = backlog_queries()
    return combine(conn.execute(due_sql, (now_ms,)).fetchall(),
                   conn.execute(queues_sql).fetchall())
