"""The `backlog` alert: a queue whose workers do not keep up.

Each pass the leader reads every queue's oldest due run (state.backlog) and, when it has
waited longer than `bound_s` (the node's `backlog_alert_s`, default 60 s), commits
`RaiseAlert` with the deterministic id `backlog:<queue>`: a failover in the middle of a
pass, or two leaders' passes, raise it once. The alert is resolved when the queue drains:
no due run has waited longer than half the bound (the margin keeps a queue hovering at
the bound from paging again and again).

Fail closed: a pass that cannot measure — this node's clock is not confirmed by a
majority (leader.clock; a fast clock would age every run), or the read failed — changes
nothing. It neither raises (an alert on a guess pages someone for nothing) nor resolves
(a resolution says "drained", which nobody measured): an open alert stays open until a
trusted pass sees the queue drained. The gauges in /metrics show the backlog meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable

from raftcron.cluster.proposer import Proposer
from raftcron.core.commands import Command, RaiseAlert, ResolveAlert
from raftcron.leader.alert_commands import propose_alert_change
from raftcron.leader.ticker import now_ms
from raftcron.state.backlog import QueueBacklog, queue_backlog
from raftcron.state.db import ThreadReader

log = logging.getLogger("raftcron.backlog")

KIND = "backlog"
PERIOD_S = 1.0
DEFAULT_BOUND_S = 60.0
OPEN_SQL = "SELECT id FROM alerts WHERE kind = 'backlog' AND status = 'open'"


def alert_id(queue: str) -> str:
    return f"{KIND}:{queue}"


def plan(epoch: int, now: int, bound_s: float, backlog: list[QueueBacklog],
         open_ids: set[str]) -> list[Command]:
    """Pure decision for one pass: raise for queues over the bound, resolve drained ones
    (and those no longer listed: no job names them and nothing of theirs is due)."""
    commands: list[Command] = []
    seen: set[str] = set()
    for q in backlog:
        aid = alert_id(q.queue)
        seen.add(aid)
        age = q.oldest_age_s(now)
        if age > bound_s and aid not in open_ids:
            commands.append(RaiseAlert(
                epoch, now, aid, KIND, reason="backlog",
                message=f"queue {q.queue!r}: the oldest due run has waited {age:.0f} s "
                        f"(bound {bound_s:g} s); {q.depth} run(s) due"))
        elif age <= bound_s / 2 and aid in open_ids:
            commands.append(ResolveAlert(
                epoch, now, aid, message=f"queue {q.queue!r} drained: {q.depth} run(s) due, "
                                         f"oldest waited {age:.0f} s"))
    for aid in sorted(open_ids - seen):
        commands.append(ResolveAlert(epoch, now, aid, message="the queue has nothing due"))
    return commands


class BacklogAlerts:
    def __init__(self, epoch: int, proposer: Proposer,
                 open_reader: Callable[[], sqlite3.Connection],
                 bound_s: float = DEFAULT_BOUND_S,
                 clock: Callable[[], int] = now_ms) -> None:
        self.epoch = epoch
        self.proposer = proposer
        self.open_reader = open_reader
        self.bound_s = bound_s
        self.clock = clock
        # Whether this node's clock may be trusted (see leader.clock); set by the node.
        self.gate: Callable[[], bool] = lambda: True
        self.raised = 0
        self.resolved = 0

    async def run(self) -> None:
        reader = ThreadReader(self.open_reader, "backlog")
        try:
            while True:
                await self.check_once(reader)
                await asyncio.sleep(PERIOD_S)
        finally:
            reader.close()

    async def check_once(self, reader: ThreadReader) -> None:
        if not self.gate():
            return
        now = self.clock()
        try:
            backlog, open_ids = await reader.run(self._read, now)
        except sqlite3.Error as e:
            log.warning("backlog pass skipped, the state could not be read: %s", e)
            return
        for cmd in plan(self.epoch, now, self.bound_s, backlog, open_ids):
            await self._propose(cmd)

    @staticmethod
    def _read(conn: sqlite3.Connection, now: int) -> tuple[list[QueueBacklog], set[str]]:
        return queue_backlog(conn, now), {r[0] for r in conn.execute(OPEN_SQL)}

    async def _propose(self, cmd: Command) -> None:
        change = await propose_alert_change(self.proposer, cmd, "backlog")
        if change == "raised" and isinstance(cmd, RaiseAlert):
            self.raised += 1
            log.warning("backlog alert %s: %s", cmd.alert_id, cmd.message)
        elif change == "resolved" and isinstance(cmd, ResolveAlert):
            self.resolved += 1
            log.info("backlog alert %s resolved: %s", cmd.alert_id, cmd.message)
