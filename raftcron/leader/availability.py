"""The leader vouches, about once a second, that the cluster is scheduling.

Each pass commits `ConfirmClock(epoch, now, max_gap_ms)` while this node's clock is
confirmed by a majority (the same gate the ticker obeys), and only once the previous one
committed: consecutive confirmations close together prove the time between them available
(state.availability); deadline alerts for instants outside such stretches name the cluster
as their cause.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from raftcron.cluster.proposer import Proposer
from raftcron.core.commands import ConfirmClock
from raftcron.core.protocol import BASE_LEVEL, COMMAND_LEVELS
from raftcron.leader.ticker import LostEpoch, now_ms

PERIOD_S = 1.0
# The spacing of two confirmations that still counts as continuous: a period plus a commit
# held up by a burst (1.5 s) leaves no gap; a leader that stopped (paused, cut off, its
# clock refused) or a commit that waited for a majority leaves one.
MAX_GAP_MS = 2500
CONFIRM_LEVEL = COMMAND_LEVELS[ConfirmClock].level


class ClockConfirmations:
    def __init__(self, epoch: int, proposer: Proposer,
                 clock: Callable[[], int] = now_ms, period_s: float = PERIOD_S) -> None:
        self.epoch = epoch
        self.proposer = proposer
        self.clock = clock
        self.period_s = period_s
        self.gate: Callable[[], bool] = lambda: True
        # The protocol level the cluster may be written at (cluster.levels); set by the
        # node. Below CONFIRM_LEVEL a member could not read a confirmation: none is made.
        self.level: Callable[[], int] = lambda: BASE_LEVEL
        self.confirmed = 0

    async def run(self) -> None:
        while True:
            await self.pass_once()
            await asyncio.sleep(self.period_s)

    async def pass_once(self) -> None:
        """Confirm, unless this node's clock is not confirmed (fail closed: no vouching) or
        the cluster's level is below confirmations."""
        if not self.gate() or self.level() < CONFIRM_LEVEL:
            return
        result = await self.proposer.propose_leader(
            ConfirmClock(self.epoch, self.clock(), MAX_GAP_MS))
        if not result.get("ok"):
            raise LostEpoch(result.get("message", "clock confirmation refused"))
        self.confirmed += 1
