"""The set of tasks a leader runs for one epoch, started and cancelled together."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable

from raftcron.cluster.proposer import Proposer
from raftcron.leader.dispatch import Dispatcher
from raftcron.leader.sweeper import Sweeper
from raftcron.leader.ticker import Ticker

log = logging.getLogger("raftcron.leader")


class LeaderDuties:
    def __init__(self, epoch: int, proposer: Proposer,
                 open_reader: Callable[[], sqlite3.Connection],
                 on_exit: Callable[[LeaderDuties, BaseException | None], None]) -> None:
        self.epoch = epoch
        self.ticker = Ticker(epoch, proposer, open_reader)
        self.sweeper = Sweeper(epoch, proposer, open_reader)
        self.dispatcher = Dispatcher(epoch, proposer, open_reader)
        self._on_exit = on_exit
        self._tasks: list[asyncio.Task[None]] = []
        self.stopped = False

    def start(self) -> None:
        for name, coro in (("ticker", self.ticker.run()), ("sweeper", self.sweeper.run())):
            task = asyncio.create_task(coro, name=f"{name}-epoch-{self.epoch}")
            task.add_done_callback(self._task_done)
            self._tasks.append(task)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if self.stopped or task.cancelled():
            return
        exc = task.exception()
        log.warning("leader duty %s ended: %r", task.get_name(), exc)
        self.stop()
        self._on_exit(self, exc)

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        for task in self._tasks:
            task.cancel()
        self.dispatcher.close()
        self.dispatcher.notify()
