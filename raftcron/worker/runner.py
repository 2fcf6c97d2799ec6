"""The worker: lease attempts, run them, heartbeat them, report their outcomes.

Three loops share one `WorkerClient`:

* the lease loop long-polls `POST /v1/leases` and hands each batch to a background
  acknowledgement (a heartbeat sent at once); a run starts only for a lease whose
  acknowledgement the cluster accepted. Nothing starts before that: a lease whose
  acknowledgement is refused was released (its acknowledgement deadline passed) and is
  leased to another worker, so starting it would run the job twice.

  The worker is pipelined so that no slot waits for Raft: it leases ahead for the slots
  about to free, and its next poll goes out while a batch is being acknowledged. It holds
  at most `concurrency + prefetch` leases at once (running, being acknowledged, or
  acknowledged and waiting for a slot); within that bound it leases ahead only as many as
  its slots are expected to free during one lease round trip (concurrency x round trip /
  mean run time, both measured), so a worker of slow jobs holds almost nothing beyond its
  slots and a waiting lease starts within about one round trip. An acknowledged lease
  waiting for a slot starts the moment a run ends, is heartbeated like a running one, and
  is released unrun on shutdown. `prefetch` defaults to 16 x the concurrency; 0 leases only
  for free slots (the behaviour before pipelining);
* the heartbeat loop sends one batched `POST /v1/heartbeats` for every running attempt
  each min(heartbeat_interval_s) seconds. `cancel: true` stops the run, which is then
  reported as failed (the server records it as cancelled). A rejection (stale_token,
  lease_expired, foreign_lease, not_found) means the lease is gone: the run is stopped and
  no completion is sent for it;
* the reporter sends completions in the background (the slot takes its next run at once).
  A completion whose answer is unknown (connection error,
  timeout, 5xx) is resent with identical content, with capped exponential backoff across
  server failover, until a server answers for it: the server treats an identical repeat
  as a duplicate, so the attempt gets exactly one outcome.

Graceful shutdown (the stop event, SIGTERM or SIGINT): stop leasing, release leases that
arrive after the stop, and acknowledged leases still waiting for a slot, without running
them, let running attempts finish for up to
`drain_timeout_s` (then kill them and report them as failed), flush the reporter for up to
`report_timeout_s`, and return. Outcomes that could not be delivered by then are logged at
ERROR level with their full content; the server will eventually mark those attempts lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import random
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from raftcron.core.ahead import OffsetSample
from raftcron.worker.client import ApiError, Lease, ServerUnavailable, WorkerClient
from raftcron.worker.clock import PROBE_EVERY_S, WorkerClock
from raftcron.worker.executors import DEFAULT_KILL_GRACE_S, Cancel, RunResult, execute
from raftcron.worker.isolation import RunAs
from raftcron.worker.secrets import SecretsError, SecretsFile

log = logging.getLogger("raftcron.worker")

PREFETCH_PER_SLOT = 16
EWMA_WEIGHT = 0.2  # of the newest sample in the run-time and round-trip averages

# A run leased ahead is checked with the server this long before its instant (a paused
# job, a cancel); runs whose instants lie within START_GROUP_S share one check.
BEFORE_START_CHECK_S = 0.3
START_GROUP_S = 0.05
# ... plus the lease round trip this worker measured, at most this much more: a cluster
# that answers slowly (a herd: tens of thousands of runs checked at one instant) is asked
# earlier, so that the answer comes before the instant and not after it.
MAX_CHECK_EXTRA_S = 1.5


def _start_of(run: _Run) -> float:
    start = run.lease.start_mono_s
    return 0.0 if start is None else start


LEASE_REJECTIONS = frozenset({"stale_token", "lease_expired", "foreign_lease", "not_found"})


class WorkerConfigError(Exception):
    """The servers refuse this worker as configured (token, scope, queues): exit, do not
    retry."""


class Backoff:
    """Capped exponential backoff with jitter; a server's Retry-After raises the floor."""

    def __init__(self, initial_s: float = 0.5, cap_s: float = 30.0) -> None:
        self.initial_s = initial_s
        self.cap_s = cap_s
        self._next = initial_s

    def reset(self) -> None:
        self._next = self.initial_s

    def next(self, retry_after: float | None = None) -> float:
        delay = self._next * random.uniform(0.8, 1.2)
        self._next = min(self._next * 2, self.cap_s)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.cap_s)


async def _sleep_or(event: asyncio.Event, seconds: float) -> None:
    """Sleep up to `seconds`, returning early when `event` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


@dataclass(slots=True)
class WorkerOptions:
    wait_s: float = 10.0
    busy_wait_s: float = 2.0
    """Long-poll wait while runs are in flight, so freed slots are refilled sooner."""
    drain_timeout_s: float = 30.0
    report_timeout_s: float = 30.0
    kill_grace_s: float = DEFAULT_KILL_GRACE_S
    request_timeout_s: float = 10.0
    backoff_initial_s: float = 0.5
    backoff_cap_s: float = 2.0
    """The longest wait between two tries of a call no server answered (leasing,
    acknowledging, heartbeats, completions). A failover takes about a second: a worker
    that had backed off to 30 s left its runs unleased, and its heartbeats unsent, for
    up to 30 s after a new leader was there (a chaos run measured 28 s). A try costs
    one small request per server, so 2 s stays cheap for hundreds of workers."""
    completion_batch: int = 50
    ack_give_up_s: float = 30.0
    """How long a lease's acknowledgement is retried while no server answers for it. The
    lease is never started without an answer; past the job's ack_timeout_s the server
    has either accepted the acknowledgement or released the lease, so a late answer is
    still definite."""
    refused_grace_s: float = 60.0
    """How long a worker that has not leased yet keeps asking when its token or queues
    are refused (401/403) before it stops (counted from the first refusal): a tokens
    file being rolled out reaches the nodes one by one, and a worker started with a new
    token may ask a node that lacks it."""
    secrets_file: str | None = None
    """JSON file of the secrets that job targets may name (raftcron.worker.secrets)."""
    lease_ahead: bool = True
    """Take runs due within the server's `lease_ahead_s` before their instant, and start
    each at its instant (core.ahead), while this worker's clock agrees with the server's
    within the tolerance (worker.clock). False: only runs already due."""
    prefetch: int | None = None
    """At most this many leases held beyond the concurrency, acknowledged and waiting for a
    slot (None: PREFETCH_PER_SLOT x the concurrency; 0: lease only for free slots). How
    many are actually leased ahead follows the measured run time and round trip (see the
    module docstring); this is the hard bound, so that a stopping worker has few leases
    to hand back."""


@dataclass(slots=True, eq=False)
class _Run:
    lease: Lease
    cancel: Cancel = field(default_factory=Cancel)
    task: asyncio.Task[None] | None = None
    lost: str | None = None
    """Set when the server said the lease is gone; such a run is never reported."""


class Reporter:
    """Delivers completions, retrying each one with identical content until answered."""

    def __init__(self, client: WorkerClient, worker_id: str, options: WorkerOptions) -> None:
        self._client = client
        self._worker_id = worker_id
        self._options = options
        self._pending: dict[str, dict[str, Any]] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._backoff = Backoff(options.backoff_initial_s, options.backoff_cap_s)
        self._one_at_a_time = False

    @property
    def pending(self) -> list[dict[str, Any]]:
        return list(self._pending.values())

    def submit(self, completion: dict[str, Any]) -> None:
        aid = completion["attempt_id"]
        if aid in self._pending:
            log.error("attempt=%s already has an outcome waiting to be reported; keeping it "
                      "and dropping %r", aid, completion)
            return
        self._pending[aid] = completion
        self._idle.clear()
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                size = 1 if self._one_at_a_time else self._options.completion_batch
                batch = list(self._pending.values())[:size]
                delay = await self._send(batch)
                if delay is not None:
                    await asyncio.sleep(delay)
            self._one_at_a_time = False
            self._idle.set()

    async def flush(self, timeout_s: float) -> bool:
        """Wait until everything submitted has been answered; False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def _send(self, batch: list[dict[str, Any]]) -> float | None:
        """Send one batch; returns a backoff delay when the outcome is unknown."""
        try:
            results = await self._client.complete(self._worker_id, batch)
        except ServerUnavailable as e:
            delay = self._backoff.next(e.retry_after)
            log.warning("reporting %d completion(s) failed (%s); retrying in %.1fs",
                        len(batch), e, delay)
            return delay
        except ApiError as e:
            if len(batch) > 1:
                log.warning("server refused a batch of %d completions (%s); sending them "
                            "one at a time", len(batch), e)
                self._one_at_a_time = True
                return None
            for c in batch:
                self._pending.pop(c["attempt_id"], None)
                log.error("server refused completion for attempt=%s (%s); outcome was %r",
                          c["attempt_id"], e, c)
            return None
        answered = 0
        for c in batch:
            r = results.get(c["attempt_id"])
            if r is None:
                continue
            answered += 1
            self._pending.pop(c["attempt_id"], None)
            if r.get("ok"):
                log.info("attempt=%s reported %s (status=%s%s)", c["attempt_id"],
                         c["outcome"], r.get("status"), ", duplicate" if r.get("duplicate") else "")
            else:
                log.warning("completion for attempt=%s rejected: %s: %s",
                            c["attempt_id"], r.get("rejected"), r.get("message"))
        if answered < len(batch):
            delay = self._backoff.next()
            log.warning("%d completion(s) missing from the answer; retrying in %.1fs",
                        len(batch) - answered, delay)
            return delay
        self._backoff.reset()
        return None


class Worker:
    """One worker process's state. Most callers want `run_worker`."""

    def __init__(
        self,
        servers: list[str],
        queues: list[str],
        concurrency: int,
        worker_id: str,
        *,
        token: str | None = None,
        options: WorkerOptions | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        http_transport: httpx.AsyncBaseTransport | None = None,
        executor: Callable[..., Any] | None = None,
        run_as: RunAs | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        prefetch = (options.prefetch if options is not None else None)
        if prefetch is not None and prefetch < 0:
            raise ValueError("prefetch must not be negative")
        self.queues = list(queues)
        self.concurrency = concurrency
        self.worker_id = worker_id
        self.options = options or WorkerOptions()
        self.client = WorkerClient(
            servers, token=token, timeout_s=self.options.request_timeout_s, transport=transport
        )
        self.reporter = Reporter(self.client, worker_id, self.options)
        self._http_transport = http_transport
        self._execute = executor or execute
        self._secrets = (SecretsFile(self.options.secrets_file)
                         if self.options.secrets_file else None)
        self._run_as = run_as
        self.prefetch = PREFETCH_PER_SLOT * concurrency if prefetch is None else prefetch
        """The hard bound on leases held beyond the concurrency."""
        self._run_s: float | None = None
        """Mean run time (EWMA; None until a run ended): how fast slots free."""
        self._round_trip_s: float | None = None
        """Mean lease round trip (EWMA): twice an acknowledgement's, one Raft commit each
        for the Lease and the acknowledging heartbeat."""
        self._runs: dict[str, _Run] = {}
        """Runs in progress, at most `concurrency`."""
        self._ready: dict[str, _Run] = {}
        """Acknowledged leases waiting for a slot, oldest first (no task yet)."""
        self._acking = 0
        """Leases whose acknowledgement is in flight."""
        self._ack_tasks: set[asyncio.Task[None]] = set()
        self._waiting: dict[str, _Run] = {}
        """Acknowledged leases taken ahead, waiting for their instant (core.ahead)."""
        self._instant_tasks: set[asyncio.Task[None]] = set()
        self.clock = WorkerClock()
        self._stopping = False
        self._leased_once = False  # a lease request was answered (the config works)
        self._changed = asyncio.Event()

    @property
    def running(self) -> list[Lease]:
        return [r.lease for r in self._runs.values()]

    @property
    def lease_ahead(self) -> int:
        """Leases to hold beyond the busy slots now: as many as the slots are expected to
        free during one lease round trip, within [min(1, prefetch), prefetch]. Before
        anything was measured: as many as the concurrency (within the bound)."""
        if self.prefetch == 0:
            return 0
        if self._run_s is None or self._round_trip_s is None:
            return min(self.prefetch, self.concurrency)
        expected = self.concurrency * self._round_trip_s / max(self._run_s, 0.001)
        return max(1, min(self.prefetch, math.ceil(expected)))

    def _observe(self, attr: str, sample: float) -> None:
        old = getattr(self, attr)
        setattr(self, attr, sample if old is None else
                (1 - EWMA_WEIGHT) * old + EWMA_WEIGHT * sample)

    @property
    def held(self) -> int:
        """Leases this worker holds: running, being acknowledged, waiting for their instant
        or for a slot."""
        return len(self._runs) + self._acking + len(self._waiting) + len(self._ready)

    async def run(self, stop: asyncio.Event) -> None:
        log.info("worker %s starting: servers=%s queues=%s concurrency=%d", self.worker_id,
                 ",".join(self.client.servers), ",".join(self.queues) or "-", self.concurrency)
        reporter = asyncio.create_task(self.reporter.run(), name="raftcron-reporter")
        heartbeats = asyncio.create_task(self._heartbeat_loop(), name="raftcron-heartbeats")
        clock = asyncio.create_task(self._clock_loop(), name="raftcron-clock")
        try:
            await self._lease_loop(stop)
            self._stopping = True
            log.info("worker %s stopping: %d run(s) in flight", self.worker_id, len(self._runs))
            if self._ack_tasks:
                await asyncio.wait(set(self._ack_tasks))
            unstarted = [*self._waiting.values(), *self._ready.values()]
            self._waiting.clear()
            self._ready.clear()
            await self._release([r.lease for r in unstarted if r.lost is None])
            await self._drain()
            if not await self.reporter.flush(self.options.report_timeout_s):
                for c in self.reporter.pending:
                    log.error("could not report attempt=%s before exiting; outcome was %r",
                              c["attempt_id"], c)
        finally:
            for task in (heartbeats, reporter, clock, *self._ack_tasks, *self._instant_tasks):
                task.cancel()
            for run in list(self._runs.values()):
                if run.task is not None:
                    run.task.cancel()
            await asyncio.gather(
                heartbeats, reporter, clock, *self._ack_tasks, *self._instant_tasks,
                *(r.task for r in self._runs.values() if r.task is not None),
                return_exceptions=True,
            )
            await self.client.aclose()
        log.info("worker %s stopped", self.worker_id)

    async def _lease_loop(self, stop: asyncio.Event) -> None:
        backoff = Backoff(self.options.backoff_initial_s, self.options.backoff_cap_s)
        refused_since: float | None = None
        while not stop.is_set():
            free = self.concurrency + self.lease_ahead - self.held
            if free <= 0:
                self._changed.clear()
                stop_wait = asyncio.create_task(stop.wait())
                change_wait = asyncio.create_task(self._changed.wait())
                await asyncio.wait({stop_wait, change_wait}, return_when=asyncio.FIRST_COMPLETED)
                stop_wait.cancel()
                change_wait.cancel()
                continue
            wait_s = self.options.busy_wait_s if self.held else self.options.wait_s
            wait_s = min(wait_s, self.options.wait_s)
            # An in-flight poll is not abandoned on stop: its leases are released below
            # instead of being left to expire on the server.
            refused = self.clock.refusal() if self.options.lease_ahead else None
            # The sample the poll asked ahead with: the answer may make the worker drop it
            # (a server time far off), and its runs are still timed by it.
            sample = self.clock.sample
            try:
                leases = await self.client.lease(
                    self.worker_id, self.queues, free, wait_s,
                    ahead=self.options.lease_ahead and refused is None, ahead_refused=refused,
                    on_server_time=self.clock.check_lease_time)
            except ServerUnavailable as e:
                delay = backoff.next(e.retry_after)
                log.warning("leasing failed (%s); retrying in %.1fs", e, delay)
                await _sleep_or(stop, delay)
                continue
            except ApiError as e:
                delay = backoff.next()
                if e.status in (401, 403) and not self._leased_once:
                    # A missing or wrong token, or a queue it may not lease from: the
                    # worker's own configuration, unless the tokens file is still being
                    # rolled out. Past the grace period it says so and stops.
                    now = asyncio.get_running_loop().time()
                    refused_since = now if refused_since is None else refused_since
                    left = self.options.refused_grace_s - (now - refused_since)
                    if left <= 0:
                        raise WorkerConfigError(f"cannot lease: {e.message}") from None
                    delay = min(delay, left)
                    log.error("server refused the lease request: %s; retrying in %.1fs, "
                              "stopping if still refused %.0fs from now", e, delay, left)
                else:
                    log.error("server refused the lease request: %s; retrying in %.1fs",
                              e, delay)
                await _sleep_or(stop, delay)
                continue
            self._leased_once = True
            backoff.reset()
            timed = [self._not_before_own_clock(lease, sample) for lease in leases]
            untimed = [lease for lease, t in zip(leases, timed, strict=True) if t is None]
            if untimed:
                log.warning("releasing %d lease(s) taken ahead: this worker's clock cannot say "
                            "when their instant comes (it stepped during the poll)",
                            len(untimed))
                await self._release(untimed)
            leases = [t for t in timed if t is not None]
            if stop.is_set():
                await self._release(leases)
                break
            extra = leases[free:]
            if extra:
                log.warning("server granted %d lease(s) beyond the %d requested; releasing them",
                            len(extra), free)
                await self._release(extra)
            self._acknowledge_in_background(leases[:free])

    def _not_before_own_clock(self, lease: Lease, sample: OffsetSample | None
                              ) -> Lease | None:
        """A lease taken ahead starts at the later of two readings of its instant: the
        server's time that came with it (counted on the monotonic clock), and this worker's
        own clock corrected by `sample`, the offset it polled with. Either clock may have
        jumped just before the answer (the leader's before its guard noticed, this
        worker's during the poll); the later reading is never early by the other one's
        jump. None (fail closed: not started, released) when this worker's clock has no
        reading of the instant."""
        if lease.start_at_ms is None or lease.start_mono_s is None:
            return lease
        own = self.clock.not_before_mono(lease.start_at_ms, sample)
        if own is None:
            return None
        if own <= lease.start_mono_s:
            return lease
        return dataclasses.replace(lease, start_mono_s=own)

    def _acknowledge_in_background(self, leases: list[Lease]) -> None:
        """Acknowledge a batch while the next poll goes out; accepted leases join the
        slot queue. They count as held from now on, so the bound holds throughout."""
        if not leases:
            return
        self._acking += len(leases)

        async def acknowledge() -> None:
            began = asyncio.get_running_loop().time()
            try:
                accepted = await self._acknowledge(leases)
            finally:
                self._acking -= len(leases)
            if accepted:
                self._observe("_round_trip_s", 2 * (asyncio.get_running_loop().time() - began))
            now = asyncio.get_running_loop().time()
            ahead: list[_Run] = []
            for lease in accepted:
                if (lease.attempt_id in self._runs or lease.attempt_id in self._ready
                        or lease.attempt_id in self._waiting):
                    log.warning("lease for %s is already held here; ignoring the duplicate",
                                lease.ids())
                    continue
                run = _Run(lease)
                if lease.start_mono_s is not None and lease.start_mono_s > now:
                    self._waiting[lease.attempt_id] = run
                    ahead.append(run)
                else:
                    self._ready[lease.attempt_id] = run
            if ahead:
                self._start_at_instants(ahead)
            self._fill()

        task = asyncio.create_task(acknowledge(), name="raftcron-acknowledge")
        self._ack_tasks.add(task)
        task.add_done_callback(self._ack_done)

    def _ack_done(self, task: asyncio.Task[None]) -> None:
        self._ack_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("acknowledging leases failed", exc_info=task.exception())
        self._changed.set()

    def _start_at_instants(self, runs: list[_Run]) -> None:
        task = asyncio.create_task(self._at_instants(runs), name="raftcron-instants")
        self._instant_tasks.add(task)
        task.add_done_callback(self._instant_done)

    def _instant_done(self, task: asyncio.Task[None]) -> None:
        self._instant_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("waiting for the instants of leases taken ahead failed",
                      exc_info=task.exception())

    def check_lead_s(self) -> float:
        """How long before a group's instant its check is sent: `BEFORE_START_CHECK_S`,
        plus the mean lease round trip measured (up to `MAX_CHECK_EXTRA_S` more). A pause or
        cancel committed after the check does not stop the run, so the lead stays short
        where the cluster answers fast, and grows only where it does not."""
        return BEFORE_START_CHECK_S + min(MAX_CHECK_EXTRA_S, self._round_trip_s or 0.0)

    async def _at_instants(self, runs: list[_Run]) -> None:
        """Runs leased ahead: check them with the server `check_lead_s()` before their
        instant (cancelled, lease gone, job paused since: not started), then move them to
        the slot queue at their instant, never before (`Lease.start_mono_s`)."""
        loop = asyncio.get_running_loop()
        runs = sorted(runs, key=_start_of)
        while runs and not self._stopping:
            first = _start_of(runs[0])
            group = [r for r in runs if _start_of(r) <= first + START_GROUP_S]
            runs = runs[len(group):]
            await asyncio.sleep(max(0.0, first - self.check_lead_s() - loop.time()))
            if self._stopping:
                return
            await self._check_before_start([r for r in group if r.lost is None])
            await asyncio.sleep(max(0.0, max(_start_of(r) for r in group) - loop.time()))
            if self._stopping:
                return
            for run in group:
                if self._waiting.pop(run.lease.attempt_id, None) is not None:
                    self._ready[run.lease.attempt_id] = run
            self._fill()

    async def _check_before_start(self, runs: list[_Run]) -> None:
        """One `before_start` heartbeat for runs about to start; fail closed: a run with no
        answer within `ack_give_up_s` is not started (its lease expires on the server)."""
        if not runs:
            return
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.options.ack_give_up_s
        backoff = Backoff(self.options.backoff_initial_s, self.options.backoff_cap_s)
        waiting = runs
        while waiting and not self._stopping:
            try:
                results = await self.client.heartbeat(
                    self.worker_id, [r.lease for r in waiting], before_start=True)
            except ServerUnavailable as e:
                if loop.time() >= give_up:
                    for run in waiting:
                        run.lost = run.lost or "no answer to the check before its start"
                    return
                await asyncio.sleep(backoff.next(e.retry_after))
                continue
            except ApiError as e:
                for run in waiting:
                    run.lost = run.lost or f"check before its start refused ({e.code})"
                return
            unanswered = []
            for run in waiting:
                r = results.get(run.lease.attempt_id)
                if r is None:
                    unanswered.append(run)
                else:
                    self._apply_heartbeat(run, r)
            waiting = unanswered

    def _fill(self) -> None:
        """Start waiting acknowledged leases in the free slots (none once stopping: those
        are released instead). A waiting lease whose heartbeat was rejected is dropped; one
        the server cancelled is reported without running."""
        while not self._stopping and self._ready and len(self._runs) < self.concurrency:
            run = self._ready.pop(next(iter(self._ready)))
            if run.lost is not None:
                log.warning("not starting %s: the lease is gone (%s)", run.lease.ids(),
                            run.lost)
            elif run.cancel.is_set():
                self._cancelled_before_start(run.lease)
            else:
                self._start(run)
        self._changed.set()

    async def _acknowledge(self, leases: list[Lease]) -> list[Lease]:
        """Acknowledge fresh leases; returns those the cluster accepted, which alone may
        start. Fail closed: a lease refused, or with no answer within `ack_give_up_s`, is
        not started (the server releases it, or its heartbeat times out)."""
        if not leases:
            return []
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.options.ack_give_up_s
        backoff = Backoff(self.options.backoff_initial_s, self.options.backoff_cap_s)
        waiting = list(leases)
        accepted: list[Lease] = []
        while waiting:
            try:
                results = await self.client.heartbeat(self.worker_id, waiting)
            except ServerUnavailable as e:
                if loop.time() >= give_up:
                    for lease in waiting:
                        log.error("no answer to the acknowledgement of %s within %.0fs; not "
                                  "starting it", lease.ids(), self.options.ack_give_up_s)
                    break
                await asyncio.sleep(backoff.next(e.retry_after))
                continue
            except ApiError as e:
                for lease in waiting:
                    log.error("server refused the acknowledgement of %s (%s); not starting "
                              "it", lease.ids(), e)
                break
            unanswered = []
            for lease in waiting:
                r = results.get(lease.attempt_id)
                if r is None:
                    unanswered.append(lease)
                elif not r.get("ok"):
                    log.warning("acknowledgement of %s refused: %s: %s; not starting it",
                                lease.ids(), r.get("rejected"), r.get("message", ""))
                elif r.get("cancel"):
                    self._cancelled_before_start(lease)
                else:
                    accepted.append(lease)
            waiting = unanswered
        return accepted

    def _cancelled_before_start(self, lease: Lease) -> None:
        log.info("%s was cancelled before it started", lease.ids())
        self.reporter.submit({
            "attempt_id": lease.attempt_id, "fencing_token": lease.fencing_token,
            "outcome": "failed", "exit_code": None,
            "output": "[raftcron] cancelled before it started\n",
        })

    def _start(self, run: _Run) -> None:
        lease = run.lease
        self._runs[lease.attempt_id] = run
        run.task = asyncio.create_task(self._run(run), name=f"raftcron-run-{lease.attempt_id}")
        self._changed.set()
        log.info("starting %s try=%d token=%d scheduled_for=%s", lease.ids(), lease.attempt,
                 lease.fencing_token, lease.scheduled_for)

    async def _run(self, run: _Run) -> None:
        lease = run.lease
        began = asyncio.get_running_loop().time()
        started_ms = self.clock.cluster_now_ms()
        try:
            try:
                account = {"run_as": self._run_as} if self._run_as is not None else {}
                result: RunResult = await self._execute(
                    lease, cancel=run.cancel, kill_grace_s=self.options.kill_grace_s,
                    http_transport=self._http_transport, secrets=self._secrets, **account,
                )
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.exception("running %s raised", lease.ids())
                result = RunResult("failed", None, f"[raftcron] worker error: {e!r}\n")
            took_s = asyncio.get_running_loop().time() - began
            self._observe("_run_s", took_s)
            if run.lost:
                log.warning("not reporting %s: the lease is gone (%s); run ended %s",
                            lease.ids(), run.lost, result.outcome)
                return
            log.info("finished %s: %s exit_code=%s%s", lease.ids(), result.outcome,
                     result.exit_code, f" ({result.killed})" if result.killed else "")
            self.reporter.submit({
                "attempt_id": lease.attempt_id,
                "fencing_token": lease.fencing_token,
                "outcome": result.outcome,
                "exit_code": result.exit_code,
                "output": result.output,
                # The run's own times: what the cluster records as its start and finish.
                "started_ms": started_ms,
                "duration_ms": round(took_s * 1000),
            })
        finally:
            self._runs.pop(lease.attempt_id, None)
            self._fill()

    async def _heartbeat_loop(self) -> None:
        backoff = Backoff(self.options.backoff_initial_s, self.options.backoff_cap_s)
        retry_in: float | None = None
        while True:
            if not self._runs and not self._ready and not self._waiting:
                retry_in = None
                self._changed.clear()
                await self._changed.wait()
                continue
            held = [*self._runs.values(), *self._waiting.values(), *self._ready.values()]
            interval = float(min(r.lease.heartbeat_interval_s for r in held))
            await asyncio.sleep(interval if retry_in is None else retry_in)
            # Acknowledged leases waiting for their instant or a slot are kept alive like
            # running ones.
            runs = [r for r in (*self._runs.values(), *self._waiting.values(),
                                *self._ready.values()) if r.lost is None]
            if not runs:
                continue
            timeout = max(1.0, min(self.options.request_timeout_s, interval))
            try:
                results = await self.client.heartbeat(
                    self.worker_id, [r.lease for r in runs], timeout_s=timeout
                )
            except ServerUnavailable as e:
                retry_in = min(backoff.next(e.retry_after), interval)
                log.warning("heartbeat for %d run(s) failed (%s); retrying in %.1fs",
                            len(runs), e, retry_in)
                continue
            except ApiError as e:
                retry_in = None
                log.error("server refused the heartbeat for %d run(s): %s", len(runs), e)
                continue
            retry_in = None
            backoff.reset()
            for run in runs:
                r = results.get(run.lease.attempt_id)
                if r is not None:
                    self._apply_heartbeat(run, r)
            self._settle_waiting()

    def _settle_waiting(self) -> None:
        """Give up waiting leases the server took back or cancelled, so they stop counting
        against the lease bound (a cancelled one is reported without running)."""
        for aid, run in list(self._ready.items()):
            if run.lost is not None:
                del self._ready[aid]
                log.warning("not starting %s: the lease is gone (%s)", run.lease.ids(), run.lost)
            elif run.cancel.is_set():
                del self._ready[aid]
                self._cancelled_before_start(run.lease)
        self._changed.set()

    def _apply_heartbeat(self, run: _Run, r: dict[str, Any]) -> None:
        if r.get("ok"):
            if r.get("cancel") and not run.cancel.is_set():
                log.info("server asked to cancel %s", run.lease.ids())
                run.cancel.set("cancel requested by the server")
            return
        code = str(r.get("rejected") or "rejected")
        if run.lost is None:
            run.lost = code
            log.warning("heartbeat for %s rejected: %s: %s; stopping the run and not "
                        "reporting it", run.lease.ids(), code, r.get("message", ""))
            run.cancel.set(f"lease lost ({code})")

    async def _clock_loop(self) -> None:
        """Measure the server's clock every PROBE_EVERY_S (worker.clock)."""
        if not self.options.lease_ahead:
            return
        while True:
            await self.clock.probe(self.client.server_now_ms)
            await asyncio.sleep(PROBE_EVERY_S)

    async def _release(self, leases: list[Lease]) -> None:
        if not leases:
            return
        backoff = Backoff(self.options.backoff_initial_s, self.options.backoff_cap_s)
        for attempt in range(3):
            try:
                results = await self.client.release(self.worker_id, leases)
            except ServerUnavailable as e:
                if attempt == 2:
                    log.warning("could not release %d lease(s) (%s); they will expire",
                                len(leases), e)
                    return
                await asyncio.sleep(backoff.next(e.retry_after))
                continue
            except ApiError as e:
                log.warning("server refused to release %d lease(s): %s; they will expire",
                            len(leases), e)
                return
            for lease in leases:
                r = results.get(lease.attempt_id, {})
                if r.get("ok"):
                    log.info("released unstarted %s", lease.ids())
                else:
                    log.warning("release of %s not accepted: %s", lease.ids(),
                                r.get("rejected", "no answer"))
            return

    async def _drain(self) -> None:
        tasks = [r.task for r in self._runs.values() if r.task is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self.options.drain_timeout_s)
        if not pending:
            return
        reason = f"worker shutting down (drain timeout {self.options.drain_timeout_s:g}s)"
        for run in list(self._runs.values()):
            log.warning("stopping %s: %s", run.lease.ids(), reason)
            run.cancel.set(reason)
        await asyncio.wait(pending)


async def run_worker(
    servers: list[str],
    queues: list[str],
    concurrency: int,
    worker_id: str,
    *,
    token: str | None = None,
    stop: asyncio.Event | None = None,
    options: WorkerOptions | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    http_transport: httpx.AsyncBaseTransport | None = None,
    run_as: RunAs | None = None,
) -> None:
    """Run a worker until `stop` is set, then shut down gracefully and return."""
    worker = Worker(
        servers, queues, concurrency, worker_id, token=token, options=options,
        transport=transport, http_transport=http_transport, run_as=run_as,
    )
    await worker.run(stop if stop is not None else asyncio.Event())


def main(
    servers: list[str],
    queues: list[str],
    concurrency: int,
    worker_id: str,
    *,
    token: str | None = None,
    options: WorkerOptions | None = None,
    run_as: RunAs | None = None,
) -> int:
    """Run a worker in the foreground. The first SIGTERM/SIGINT shuts down gracefully;
    a second one stops immediately (runs are killed and not reported)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def amain() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        current = asyncio.current_task()

        def on_signal(signame: str) -> None:
            if stop.is_set():
                log.warning("second %s: stopping now", signame)
                if current is not None:
                    current.cancel()
                return
            log.info("%s received: shutting down gracefully", signame)
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig.name)
        try:
            await run_worker(servers, queues, concurrency, worker_id, token=token, stop=stop,
                             options=options, run_as=run_as)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    try:
        asyncio.run(amain())
    except (WorkerConfigError, SecretsError) as e:
        print(f"raftcron: {e}", file=sys.stderr)
        return 2
    except asyncio.CancelledError:
        return 1
    except Exception:
        log.exception("worker failed")
        return 1
    return 0
