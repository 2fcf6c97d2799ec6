"""The lease loop: long-polls `POST /v1/leases`, acknowledges each batch in the
background, and hands leases back (`POST /v1/releases`) that will not run here.

A run starts only for a lease whose acknowledgement (a heartbeat sent at once) the cluster
accepted: a lease whose acknowledgement is refused was released (its acknowledgement
deadline passed) and is leased to another worker, so starting it would run the job twice.
How many leases the loop asks for follows `WorkerBase.lease_ahead` and the hard bound
`WorkerOptions.prefetch` (see raftcron.worker.runner).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from raftcron.core.ahead import OffsetSample
from raftcron.worker.backoff import Backoff, sleep_or
from raftcron.worker.base import HeldRun
from raftcron.worker.client import ApiError, Lease, ServerUnavailable
from raftcron.worker.execution import RunExecutor
from raftcron.worker.options import WorkerConfigError

log = logging.getLogger("raftcron.worker")


class LeaseLoop(RunExecutor):
    """Leases runs, acknowledges them and queues the accepted ones for a slot, or for
    their instant when taken ahead (`_start_at_instants`, which `runner.Worker` provides)."""

    # Waits for the instants of acknowledged runs taken ahead, then queues them for a
    # slot: provided by `runner.Worker`, which schedules them.
    _start_at_instants: Callable[[list[HeldRun]], None]

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
                await sleep_or(stop, delay)
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
                await sleep_or(stop, delay)
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
            ahead: list[HeldRun] = []
            for lease in accepted:
                if (lease.attempt_id in self._runs or lease.attempt_id in self._ready
                        or lease.attempt_id in self._waiting):
                    log.warning("lease for %s is already held here; ignoring the duplicate",
                                lease.ids())
                    continue
                run = HeldRun(lease)
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

