"""The set of tasks a leader runs for one epoch, started and cancelled together."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from raftcron.cluster.proposer import Proposer
from raftcron.core.ahead import DEFAULT_LEASE_AHEAD_HERD_S, DEFAULT_LEASE_AHEAD_S, HERD_SIZE
from raftcron.core.delivery import DEFAULT_GIVE_UP_S
from raftcron.leader.availability import ClockConfirmations
from raftcron.leader.backlog import DEFAULT_BOUND_S, BacklogAlerts
from raftcron.leader.deadlines import Deadlines
from raftcron.leader.dispatch import Dispatcher
from raftcron.leader.outbox import OutboxDelivery
from raftcron.leader.retention import DEFAULT_RETENTION_S, Retention
from raftcron.leader.run_bounds import RunBounds
from raftcron.leader.sweeper import Sweeper
from raftcron.leader.ticker import Ticker
from raftcron.leader.watchdog import Watchdog

log = logging.getLogger("raftcron.leader")


@dataclass(frozen=True)
class DutySettings:
    """Node configuration the operability duties need."""

    webhooks: tuple[str, ...] = ()
    # None: the cluster webhook key in the replicated state signs (leader.webhook_keys).
    webhook_secret: bytes | None = None
    outbox_give_up_s: float = DEFAULT_GIVE_UP_S
    outbox_give_up_attempts: int | None = None
    watchdog_url: str | None = None
    watchdog_method: str = "GET"
    watchdog_interval_s: float = 5.0
    tick_stale_s: float = 10.0
    # Finished history older than this is pruned (None: kept forever).
    retention_s: float | None = DEFAULT_RETENTION_S
    # A queue whose oldest due run waited longer than this raises its `backlog` alert.
    backlog_alert_s: float = DEFAULT_BOUND_S
    # Dispatch ahead: how far before its instant a run may be leased (0: never).
    lease_ahead_ms: int = int(DEFAULT_LEASE_AHEAD_S * 1000)
    lease_ahead_herd_ms: int = int(DEFAULT_LEASE_AHEAD_HERD_S * 1000)
    # How far ahead a herd too large to lease in lease_ahead_herd_ms may go (no further).
    lease_ahead_herd_max_ms: int = int(DEFAULT_LEASE_AHEAD_HERD_S * 1000)
    herd_size: int = HERD_SIZE


class LeaderDuties:
    def __init__(self, epoch: int, proposer: Proposer,
                 open_reader: Callable[[], sqlite3.Connection],
                 on_exit: Callable[[LeaderDuties, BaseException | None], None],
                 settings: DutySettings | None = None,
                 on_event: Callable[[str, str], None] | None = None) -> None:
        """`on_event(duty, result)` counts webhook deliveries and watchdog pings."""
        settings = settings or DutySettings()
        self.epoch = epoch
        self.ticker = Ticker(epoch, proposer, open_reader, herd_size=settings.herd_size,
                             herd_max_ms=settings.lease_ahead_herd_max_ms)
        self.sweeper = Sweeper(epoch, proposer, open_reader)
        self.dispatcher = Dispatcher(epoch, proposer, open_reader,
                                     ahead_ms=settings.lease_ahead_ms,
                                     herd_ahead_ms=settings.lease_ahead_herd_ms,
                                     herd_max_ms=settings.lease_ahead_herd_max_ms,
                                     herd_size=settings.herd_size)
        # One set of compiled calendars for both: each is compiled once per change.
        self.deadlines = Deadlines(epoch, proposer, open_reader,
                                   calendars=self.ticker.calendar_cache)
        self.run_bounds = RunBounds(epoch, proposer, open_reader)
        self.availability = ClockConfirmations(epoch, proposer)
        self.backlog = BacklogAlerts(epoch, proposer, open_reader, settings.backlog_alert_s)
        self.outbox = OutboxDelivery(
            epoch, proposer, open_reader, settings.webhooks, settings.webhook_secret,
            on_result=(lambda r: on_event("webhook", r)) if on_event else None,
            give_up_s=settings.outbox_give_up_s, max_attempts=settings.outbox_give_up_attempts)
        self.watchdog = Watchdog(
            self.ticker, settings.watchdog_url, settings.watchdog_method,
            settings.watchdog_interval_s, settings.tick_stale_s,
            on_result=(lambda r: on_event("watchdog", r)) if on_event else None,
        ) if settings.watchdog_url else None
        self.retention = Retention(epoch, proposer, open_reader, settings.retention_s) \
            if settings.retention_s else None
        self._on_exit = on_exit
        self._tasks: list[asyncio.Task[None]] = []
        self.stopped = False

    def start(self) -> None:
        coros: list[tuple[str, Coroutine[Any, Any, None]]] = [
            ("ticker", self.ticker.run()), ("sweeper", self.sweeper.run()),
            ("deadlines", self.deadlines.run()), ("outbox", self.outbox.run()),
            ("backlog", self.backlog.run()), ("run-bounds", self.run_bounds.run()),
            ("availability", self.availability.run()),
        ]
        if self.watchdog is not None:
            coros.append(("watchdog", self.watchdog.run()))
        if self.retention is not None:
            coros.append(("retention", self.retention.run()))
        for name, coro in coros:
            task = asyncio.create_task(coro, name=f"{name}-epoch-{self.epoch}")
            task.add_done_callback(self._task_done)
            self._tasks.append(task)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()  # always retrieved: no "exception was never retrieved" noise
        if self.stopped:
            # Leadership already lost: its last proposals failing is expected.
            log.info("leader duty %s stopped: %r", task.get_name(), exc)
            return
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
