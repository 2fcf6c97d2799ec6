"""The sweeper: expires leases whose heartbeat stopped or whose max runtime passed, and
releases leases that were never acknowledged."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable

from raftcron.cluster.proposer import Proposer
from raftcron.core.commands import Sweep
from raftcron.leader.ticker import LostEpoch, now_ms

SWEEP_PERIOD_S = 0.5
# INDEXED BY: the running attempts only (a few hundred at most). Left to itself, SQLite
# walks the primary key for ORDER BY id over every attempt kept: 180 ms on the event loop
# every half second at 90,000 attempts.
# An unacknowledged lease is a candidate as soon as its acknowledgement deadline passed,
# whichever epoch granted it: a new leader releases what its dead predecessor leased but
# never delivered from its first sweep on.
CANDIDATES_SQL = (
    "SELECT id FROM attempts INDEXED BY att_running WHERE status = 'running' AND "
    "(lease_expires_ms < ? OR runtime_deadline_ms <= ? OR ack_deadline_ms < ?) "
    "ORDER BY id LIMIT 1000"
)


class Sweeper:
    def __init__(self, epoch: int, proposer: Proposer,
                 open_reader: Callable[[], sqlite3.Connection],
                 clock: Callable[[], int] = now_ms) -> None:
        self.epoch = epoch
        self.proposer = proposer
        self.open_reader = open_reader
        self.clock = clock
        self.gate: Callable[[], bool] = lambda: True

    def _candidates(self, conn: sqlite3.Connection, now: int) -> list[str]:
        return [r[0] for r in conn.execute(CANDIDATES_SQL, (now, now, now))]

    async def run(self) -> None:
        conn = self.open_reader()
        try:
            while True:
                if not self.gate():  # a fast clock would expire healthy leases early
                    await asyncio.sleep(SWEEP_PERIOD_S)
                    continue
                now = self.clock()
                ids = self._candidates(conn, now)
                if ids:
                    result = await self.proposer.propose_leader(Sweep(self.epoch, now, ids))
                    if not result.get("ok"):
                        raise LostEpoch(result.get("message", "sweep refused"))
                await asyncio.sleep(SWEEP_PERIOD_S)
        finally:
            conn.close()
