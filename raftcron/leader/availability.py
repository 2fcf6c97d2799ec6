"""The leader vouches, about once a second, that the cluster is scheduling.

Each pass commits `ConfirmClock(epoch, now, valid_ms)` while this node's clock is confirmed
by a majority (the same gate the ticker obeys). Time no committed confirmation covers is
time the cluster could not schedule (state.availability); deadline alerts for instants in
it name the cluster as their cause.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from raftcron.cluster.proposer import Proposer
from raftcron.core.commands import ConfirmClock
from raftcron.leader.ticker import LostEpoch, now_ms

PERIOD_S = 1.0
# How long one confirmation vouches for: a little over two periods, so that a slow pass or
# a commit held up by a burst leaves no gap, while a leader that stopped (paused, cut off,
# its clock refused) leaves one within seconds.
VALID_MS = 2500


class ClockConfirmations:
    def __init__(self, epoch: int, proposer: Proposer,
                 clock: Callable[[], int] = now_ms, period_s: float = PERIOD_S) -> None:
        self.epoch = epoch
        self.proposer = proposer
        self.clock = clock
        self.period_s = period_s
        self.gate: Callable[[], bool] = lambda: True
        self.confirmed = 0

    async def run(self) -> None:
        while True:
            if self.gate():
                await self.confirm_once()
            await asyncio.sleep(self.period_s)

    async def confirm_once(self) -> None:
        result = await self.proposer.propose_leader(
            ConfirmClock(self.epoch, self.clock(), VALID_MS))
        if not result.get("ok"):
            raise LostEpoch(result.get("message", "clock confirmation refused"))
        self.confirmed += 1
