"""The ticker: claims due occurrences, one batched command per ≤1,000 instants.

Runs only on the leader, only after its `begin_epoch` applied, and is cancelled the
moment leadership or the term changes. It reads the clock only to stamp `now` into the
Claim command; what was claimed is decided at apply time by the database.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable

from raftcron.cluster.proposer import Proposer
from raftcron.core.ahead import HERD_SIZE
from raftcron.core.commands import Claim
from raftcron.core.schedule_set import FleetSchedules
from raftcron.leader.planner import HERD_LOOKAHEAD_MS, MAX_ITEMS_PER_CLAIM, JobRecord, TickPlanner
from raftcron.state.calendars import CompiledCalendars

log = logging.getLogger("raftcron.ticker")

# Only what planning reads of the spec. The schedules stay JSON text: jobs with equal text
# share their compiled schedules (core.schedule_set.FleetSchedules), most never decoded.
JOB_ROW_SQL = (
    "SELECT id, version, paused, watermark_ms, json_extract(spec, '$.schedule'), "
    "json_extract(spec, '$.misfire_policy'), json_extract(spec, '$.misfire_grace_s'), "
    "json_extract(spec, '$.catch_up_max'), json_extract(spec, '$.schedules'), "
    "json_extract(spec, '$.calendars') FROM jobs"
)
MAX_SLEEP_S = 1.0
CLAIMS_IN_FLIGHT = 4
GATED_RETRY_S = 0.25
LOAD_CHECK_EVERY = 200
LOAD_YIELD_AFTER_S = 0.003
UPSERT_YIELD_EVERY = 20_000


def keep_out_of_full_collections(collect_first: bool = False) -> None:
    """Move every object alive now out of the cyclic collector's reach (gc.freeze).

    A full collection walks every tracked object while holding the GIL. With a million
    jobs the planner's records make that 0.5 s and more: the Raft thread could not send
    heartbeats for longer than an election timeout, the followers elected another leader,
    which loaded the jobs again, and so on (bench/scale.py --jobs 1000000). Frozen
    objects are still freed when their last reference goes; only cycles among them wait
    for `gc.unfreeze()`, which the ticker calls when its epoch ends. The whole load runs
    with the collector off (gc.disable), for the same reason: the heap grows by a quarter
    many times over, and each time a full collection would walk all of it.

    `collect_first` (every reload after the whole load): a full collection first, so the
    garbage cycles of the moment are freed rather than frozen until the epoch ends; it
    walks only what was allocated since the last freeze."""
    if collect_first:
        gc.collect()
    gc.freeze()


class LostEpoch(Exception):
    """A leader command came back `stale_epoch`: a newer leader exists."""


def now_ms() -> int:
    return int(time.time() * 1000)


class Ticker:
    def __init__(
        self,
        epoch: int,
        proposer: Proposer,
        open_reader: Callable[[], sqlite3.Connection],
        clock: Callable[[], int] = now_ms,
        herd_size: int = HERD_SIZE,
        herd_max_ms: int = HERD_LOOKAHEAD_MS,
    ) -> None:
        self.epoch = epoch
        self.proposer = proposer
        self.open_reader = open_reader
        self.clock = clock
        self.planner = TickPlanner(herd_size=herd_size, herd_max_ms=herd_max_ms)
        self.changed_jobs: set[str] = set()
        self.calendars_changed = True
        # Compiled calendars, recompiled only when one changed (shared with the
        # deadline check, see leader.duties).
        self.calendar_cache = CompiledCalendars()
        self.wakeup = asyncio.Event()
        self.last_tick_ms: int | None = None
        self.claims = 0
        # Whether this node's clock may be trusted (see leader.clock); set by the node.
        self.gate: Callable[[], bool] = lambda: True
        self.clock_blocked = False

    def notify_jobs_changed(self, job_ids: set[str]) -> None:
        """Called on the event loop when applied commands touched these jobs."""
        self.changed_jobs |= job_ids
        self.wakeup.set()

    def notify_calendars_changed(self) -> None:
        """Called on the event loop when an applied command changed a calendar."""
        self.calendars_changed = True
        self.wakeup.set()

    def _load_calendars(self) -> None:
        conn = self.open_reader()
        try:
            self.planner.calendars = self.calendar_cache.load(conn)
        finally:
            conn.close()

    def _load(self, job_ids: set[str] | None, abandoned: threading.Event) -> list[JobRecord]:
        """Read and compile job records (on a worker thread). Stops early once `abandoned`
        is set: a load outliving its epoch would keep compiling 100,000 schedules for
        nobody, and a node that won and lost a few elections would run several at once."""
        conn = self.open_reader()
        try:
            if job_ids is None:
                rows = conn.execute(JOB_ROW_SQL).fetchall()
            else:
                ids = sorted(job_ids)
                rows = []
                for i in range(0, len(ids), 500):
                    chunk = ids[i : i + 500]
                    rows += conn.execute(
                        f"{JOB_ROW_SQL} WHERE id IN ({','.join('?' * len(chunk))})", chunk
                    ).fetchall()
            records = []
            schedules = FleetSchedules()
            last_yield = time.monotonic()
            # Each row is freed as it is compiled: a million rows freed at once, when the
            # list went, held the GIL for 170 ms (bench/ticker_load.py's sleeper).
            rows.reverse()
            for i in range(len(rows)):
                records.append(JobRecord.from_row(rows.pop(), schedules))
                if i % LOAD_CHECK_EVERY == LOAD_CHECK_EVERY - 1:
                    if abandoned.is_set():
                        return []
                    # Compiling 100,000 schedules is seconds of pure Python: let the Raft
                    # thread have the GIL now and then, or its heartbeats stall. By time
                    # (every 3 ms of work), not by count: bench/ticker_load.py's Raft-like
                    # thread ticks as it did with a sleep every 200 records (p99 6-7 ms),
                    # and at 50 ms its p99 was 20 ms.
                    if time.monotonic() - last_yield >= LOAD_YIELD_AFTER_S:
                        time.sleep(0.001)
                        last_yield = time.monotonic()
            return records
        finally:
            conn.close()

    async def _reload(self, job_ids: set[str] | None) -> None:
        abandoned = threading.Event()
        whole = job_ids is None
        if whole:
            # The collector stays off until what the load allocated (the records, and the
            # planner's heap entries) is frozen: see keep_out_of_full_collections.
            gc.disable()
        try:
            records = await asyncio.to_thread(self._load, job_ids, abandoned)
            if job_ids is not None:
                for job_id in job_ids:
                    self.planner.remove(job_id)
            for i, rec in enumerate(records):
                self.planner.upsert(rec)
                if i % UPSERT_YIELD_EVERY == UPSERT_YIELD_EVERY - 1:
                    # A million upserts are two seconds: the node's API (this loop's other
                    # tasks) answers between chunks. Only this task reads the planner.
                    await asyncio.sleep(0)
        except asyncio.CancelledError:
            abandoned.set()  # the thread cannot be cancelled; it stops at its next check
            raise
        finally:
            if whole:
                # Frozen first: enabled over an unfrozen heap, the collector's next full
                # pass would walk all that the load allocated, at once.
                keep_out_of_full_collections()
                gc.enable()
        if not whole:
            keep_out_of_full_collections(collect_first=True)

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            gc.unfreeze()  # what this epoch's planner held goes back to the collector

    async def _run(self) -> None:
        await self._reload(None)
        log.info("ticker started for epoch %d with %d jobs", self.epoch, len(self.planner.jobs))
        while True:
            if self.calendars_changed:
                self.calendars_changed = False
                await asyncio.to_thread(self._load_calendars)
            if self.changed_jobs:
                changed, self.changed_jobs = self.changed_jobs, set()
                await self._reload(changed)
            await self.tick_once()
            if self.planner.held:
                self.calendars_changed = True  # read them again before the next round
            wake = self.planner.next_wakeup_ms()
            delay = MAX_SLEEP_S if wake is None else (wake - self.clock()) / 1000
            if self.clock_blocked or self.planner.held:
                # Nothing was claimed (untrusted clock, or a job held for a calendar not
                # loaded yet): wait instead of spinning on the overdue instants, which
                # would starve the event loop.
                delay = GATED_RETRY_S
            self.wakeup.clear()
            if delay > 0 and not self.changed_jobs:
                try:
                    await asyncio.wait_for(self.wakeup.wait(), min(delay, MAX_SLEEP_S))
                except TimeoutError:
                    pass

    def _claimed(self, result: dict) -> None:
        if not result.get("ok"):
            if result.get("rejected") == "stale_epoch":
                raise LostEpoch(result.get("message", ""))
            raise RuntimeError(f"claim refused: {result}")
        self.claims += 1
        stale = {job_id for job_id, _, reason in result["rejected_items"]
                 if reason != "already_claimed"}
        self.changed_jobs |= stale

    async def tick_once(self) -> None:
        if not self.gate():
            self.clock_blocked = True  # a clock far off the others' must not claim
            return
        self.clock_blocked = False
        now = self.clock()
        items = self.planner.due(now)
        # Chunks are submitted in order (the log keeps that order) with a few awaiting
        # commit at once, so a herd's claims share replication rounds.
        in_flight: deque[asyncio.Task[dict]] = deque()
        try:
            for i in range(0, len(items), MAX_ITEMS_PER_CLAIM):
                chunk = items[i : i + MAX_ITEMS_PER_CLAIM]
                in_flight.append(asyncio.ensure_future(
                    self.proposer.propose_leader(Claim(self.epoch, now, chunk))))
                if len(in_flight) >= CLAIMS_IN_FLIGHT:
                    self._claimed(await in_flight.popleft())
            while in_flight:
                self._claimed(await in_flight.popleft())
        finally:
            for task in in_flight:
                task.cancel()
        self.last_tick_ms = now
