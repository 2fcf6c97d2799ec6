"""On the leader: raise the cluster's protocol level once every member speaks it.

Once a second, while this node's epoch has begun, the leader compares the level every
current member announced (cluster.levels; an unknown one counts as the oldest) with the
committed level, and commits `SetClusterLevel` when all of them speak a higher one. From
that entry on, the API and the leader write the features of that level (core.protocol).
The level never goes down: a node of an older build cannot rejoin a cluster whose level
is above its own (it stops, exit 70, on the first entry it cannot read).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from raftcron.cluster.levels import ClusterLevels
from raftcron.cluster.proposer import ProposalError, Proposer
from raftcron.core.commands import SetClusterLevel
from raftcron.leader.ticker import now_ms

log = logging.getLogger("raftcron.cluster_level")

PERIOD_S = 1.0


class ClusterLevelRaiser:
    def __init__(self, levels: ClusterLevels, peer_urls: Callable[[], list[str] | None],
                 proposer: Proposer, clock: Callable[[], int] = now_ms,
                 period_s: float = PERIOD_S) -> None:
        self.levels = levels
        self.peer_urls = peer_urls
        self.proposer = proposer
        self.clock = clock
        self.period_s = period_s
        self._waiting_logged: tuple[int, tuple[tuple[str, int | None], ...]] | None = None

    async def run(self, current_epoch: Callable[[], int | None]) -> None:
        """`current_epoch`: the epoch whose duties run on this node (None: not leading)."""
        while True:
            await asyncio.sleep(self.period_s)
            epoch = current_epoch()
            if epoch is None:
                continue
            try:
                await self.pass_once(epoch)
            except ProposalError as e:
                log.warning("cluster level not raised yet: %s", e.message)

    async def pass_once(self, epoch: int) -> bool:
        """Commit a higher level when every member speaks it. True: one was committed.
        Members that cannot be listed (None) raise nothing: the next round asks again."""
        members = self.peer_urls()
        if members is None:
            return False
        urls = list(members)
        target = self.levels.target(urls)
        committed = self.levels.committed
        if target <= committed:
            if self.levels.speaks > committed:
                self._log_waiting(committed, urls)
            return False
        log.info("every member speaks protocol level %d or newer: committing cluster level "
                 "%d (was %d)", target, target, committed)
        result = await self.proposer.propose_leader(
            SetClusterLevel(epoch, self.clock(), target))
        if result.get("ok"):
            # The level the apply recorded, never the one proposed: the node must not
            # write at a level its state does not hold.
            if "level" in result:
                self.levels.note_committed(int(result["level"]))
            return bool(result.get("raised"))
        log.warning("cluster level %d refused: %s", target, result.get("message"))
        return False

    def _log_waiting(self, committed: int, urls: list[str]) -> None:
        members = tuple((u, self.levels.announced(u)) for u in sorted(urls))
        state = (committed, members)
        if state == self._waiting_logged:
            return
        self._waiting_logged = state
        behind = [f"{u} ({'unknown' if lv is None else f'level {lv}'})" for u, lv in members
                  if lv is None or lv <= committed]
        log.info("cluster level stays %d (this node speaks %d): waiting for %s",
                    committed, self.levels.speaks, ", ".join(behind) or "the next check")
