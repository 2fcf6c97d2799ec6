"""The sweeper: expires leases whose heartbeat stopped or whose max runtime passed, and
releases leases that were never acknowledged: past their acknowledgement deadline, or,
from RELEASE_PREVIOUS_EPOCH_LEVEL on, granted by an earlier epoch (state.attempts.sweep
says why that is safe)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable

from raftcron.cluster.proposer import Proposer
from raftcron.core.commands import Sweep
from raftcron.core.identity import fencing_token
from raftcron.core.protocol import BASE_LEVEL, RELEASE_PREVIOUS_EPOCH_LEVEL
from raftcron.leader.ticker import LostEpoch, now_ms

SWEEP_PERIOD_S = 0.5
# INDEXED BY: the running attempts only (a few hundred at most). Left to itself, SQLite
# walks the primary key for ORDER BY id over every attempt kept: 180 ms on the event loop
# every half second at 90,000 attempts.
# An unacknowledged lease is a candidate as soon as its acknowledgement deadline passed,
# whichever epoch granted it; and, before its deadline, when an earlier epoch granted it
# (its token is below `:early_before`, this epoch's first token): a new leader releases
# what its dead predecessor leased but never delivered from its first sweep on. `due`
# tells the two apart: whether a deadline passed.
_DUE = "(lease_expires_ms < :now OR runtime_deadline_ms <= :now OR ack_deadline_ms < :now)"
CANDIDATES_SQL = (
    f"SELECT id, coalesce({_DUE}, 0) AS due FROM attempts INDEXED BY att_running "
    f"WHERE status = 'running' AND ({_DUE} "
    "OR (ack_deadline_ms IS NOT NULL AND fencing_token < :early_before)) "
    "ORDER BY id LIMIT 1000"
)


def candidate_params(now: int, early_before: int = 0) -> dict[str, int]:
    """CANDIDATES_SQL's parameters; `early_before` 0: no lease is released early."""
    return {"now": now, "early_before": early_before}


class Sweeper:
    def __init__(self, epoch: int, proposer: Proposer,
                 open_reader: Callable[[], sqlite3.Connection],
                 clock: Callable[[], int] = now_ms) -> None:
        self.epoch = epoch
        self.proposer = proposer
        self.open_reader = open_reader
        self.clock = clock
        self.gate: Callable[[], bool] = lambda: True
        # The protocol level the cluster may be written at (cluster.levels); set by the
        # node. Below RELEASE_PREVIOUS_EPOCH_LEVEL apply would not release early.
        self.level: Callable[[], int] = lambda: BASE_LEVEL
        # Leases proposed for early release that the apply kept (a state whose committed
        # level is lower than this node's memory of it): not proposed again early in this
        # epoch, so that the same ids are not proposed every half second for nothing.
        self._kept: set[str] = set()

    def _early_before(self) -> int:
        """The first token of this epoch (a lease with a lower one came from an earlier
        epoch), or 0 (none) below RELEASE_PREVIOUS_EPOCH_LEVEL."""
        if self.level() < RELEASE_PREVIOUS_EPOCH_LEVEL:
            return 0
        return fencing_token(self.epoch, 1)

    def _candidates(self, conn: sqlite3.Connection, now: int) -> tuple[list[str], set[str]]:
        """The attempts to sweep, and which of them are proposed only for their epoch (no
        deadline of theirs passed)."""
        rows = conn.execute(CANDIDATES_SQL, candidate_params(now, self._early_before()))
        ids: list[str] = []
        early: set[str] = set()
        for attempt_id, due in rows:
            if due:
                ids.append(attempt_id)
            else:
                early.add(attempt_id)
                if attempt_id not in self._kept:
                    ids.append(attempt_id)
        self._kept &= early  # a lease acknowledged, released or expired since is forgotten
        return ids, early

    def _note_result(self, ids: list[str], early: set[str], result: dict) -> None:
        """Remember the early candidates the apply did not release."""
        released = set(result.get("unacknowledged") or ())
        self._kept |= {i for i in ids if i in early and i not in released}

    async def sweep_once(self, conn: sqlite3.Connection) -> list[str]:
        """Propose one sweep of the candidates as of now (the ids proposed)."""
        now = self.clock()
        ids, early = self._candidates(conn, now)
        if ids:
            result = await self.proposer.propose_leader(Sweep(self.epoch, now, ids))
            if not result.get("ok"):
                raise LostEpoch(result.get("message", "sweep refused"))
            self._note_result(ids, early, result)
        return ids

    async def run(self) -> None:
        conn = self.open_reader()
        try:
            while True:
                if not self.gate():  # a fast clock would expire healthy leases early
                    await asyncio.sleep(SWEEP_PERIOD_S)
                    continue
                await self.sweep_once(conn)
                await asyncio.sleep(SWEEP_PERIOD_S)
        finally:
            conn.close()
