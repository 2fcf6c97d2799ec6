"""Retention: the leader deletes finished history older than the retention period.

Every `period_s` the leader proposes `Prune(before_ms = now - retention)` in bounded batches
(`batch` occurrences per command, a short pause between batches so a large backlog does not
delay Raft heartbeats). The state machine deletes finished occurrences (succeeded, failed,
skipped, cancelled) with their attempts, idempotency records, resolved alerts and delivered
outbox rows older than that; pending and running work, jobs and their watermarks stay.
Every node applies the same command, so digests stay equal.

The Raft journal is bounded separately: pysyncobj compacts it into a snapshot (a SQLite
backup of the state) every 5,000 entries or 5 minutes, so disk use follows the state,
which retention bounds.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import uuid
from collections.abc import Callable

from raftcron.cluster.proposer import ProposalError, Proposer
from raftcron.core.commands import Prune
from raftcron.core.timefmt import parse_duration  # noqa: F401 (its home before core)
from raftcron.leader.ticker import now_ms
from raftcron.state import job_history

log = logging.getLogger("raftcron.retention")

DEFAULT_RETENTION_S = 7 * 86400.0
# One Prune deletes this many occurrences with their attempts: about 60 ms of apply on
# the development machine (1,000 took 115-155 ms, several times that on a loaded node).
# pysyncobj applies an entry inside the leader's tick, so a long one holds back its
# heartbeats: 1,000 per batch once a minute cost an election every minute of a soak.
DEFAULT_BATCH = 250
BATCH_PAUSE_S = 0.2
def default_period(retention_s: float) -> float:
    """How often to look: a quarter of the retention, between 0.5 s and 10 s (short rounds:
    a busy cluster finishes runs at hundreds per second, and the pruning should trickle
    along with them rather than arrive as a burst)."""
    return min(10.0, max(0.5, retention_s / 4))


class Retention:
    def __init__(self, epoch: int, proposer: Proposer,
                 open_reader: Callable[[], sqlite3.Connection], retention_s: float,
                 period_s: float | None = None, batch: int = DEFAULT_BATCH,
                 clock: Callable[[], int] = now_ms) -> None:
        self.epoch = epoch
        self.proposer = proposer
        self.open_reader = open_reader
        self.retention_ms = int(retention_s * 1000)
        self.period_s = period_s if period_s is not None else default_period(retention_s)
        self.batch = batch
        self.clock = clock
        self.gate: Callable[[], bool] = lambda: True
        self.pruned = 0

    @staticmethod
    def _anything_to_prune(conn: sqlite3.Connection, before_ms: int) -> bool:
        checks = (
            "SELECT 1 FROM occurrences WHERE finished_ms IS NOT NULL AND finished_ms < ? "
            "AND status IN ('succeeded', 'failed', 'skipped', 'cancelled') LIMIT 1",
            "SELECT 1 FROM requests WHERE applied_ms < ? LIMIT 1",
            "SELECT 1 FROM alerts WHERE status = 'resolved' AND resolved_ms < ? LIMIT 1",
            "SELECT 1 FROM outbox WHERE status = 'delivered' AND delivered_ms < ? LIMIT 1",
        )
        return (any(conn.execute(sql, (before_ms,)).fetchone() for sql in checks)
                or job_history.any_deleted_before(conn, before_ms))

    async def prune_once(self, conn: sqlite3.Connection) -> int:
        """Prune everything older than the retention, batch by batch; the count pruned."""
        now = self.clock()
        before = now - self.retention_ms
        total = 0
        while self._anything_to_prune(conn, before):
            result = await self.proposer.propose(
                Prune(f"retention-{self.epoch}-{uuid.uuid4().hex}", now, before, self.batch))
            pruned = int(result.get("pruned_occurrences") or 0)
            total += pruned
            if pruned < self.batch:
                break
            await asyncio.sleep(BATCH_PAUSE_S)
        self.pruned += total
        return total

    async def run(self) -> None:
        conn = self.open_reader()
        try:
            while True:
                await asyncio.sleep(self.period_s)
                if not self.gate():  # a fast clock would prune history too early
                    continue
                try:
                    pruned = await self.prune_once(conn)
                except ProposalError as e:
                    log.info("retention: prune not committed (%s); next round", e.message)
                    continue
                if pruned:
                    log.info("retention: pruned %d finished occurrences", pruned)
        finally:
            conn.close()
