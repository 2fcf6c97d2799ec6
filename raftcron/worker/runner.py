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

The worker is made of parts, one module each, acting on the state in `worker.base`: the
lease loop and acknowledgements (`worker.leasing`), the heartbeat loop
(`worker.heartbeats`), the run executor (`worker.execution`) and the reporter
(`worker.reporter`); its options are in `worker.options`. This module holds `Worker`,
which puts them together and runs them, the start-at-instant scheduling of runs leased
ahead, and the entry points (`run_worker`, `main`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import httpx

from raftcron.worker import child_watch
from raftcron.worker.backoff import Backoff
from raftcron.worker.base import EWMA_WEIGHT, HeldRun
from raftcron.worker.child_watch import watch_children_with_pidfds
from raftcron.worker.client import ApiError, ServerUnavailable
from raftcron.worker.clock import PROBE_EVERY_S
from raftcron.worker.heartbeats import LEASE_REJECTIONS, Heartbeats
from raftcron.worker.isolation import RunAs
from raftcron.worker.leasing import LeaseLoop
from raftcron.worker.options import PREFETCH_PER_SLOT, WorkerConfigError, WorkerOptions
from raftcron.worker.reporter import Reporter
from raftcron.worker.secrets import SecretsError

# The worker's public names; some are defined in its part modules and still imported
# from here.
__all__ = [
    "BEFORE_START_CHECK_S",
    "EWMA_WEIGHT",
    "LEASE_REJECTIONS",
    "MAX_CHECK_EXTRA_S",
    "PREFETCH_PER_SLOT",
    "START_GROUP_S",
    "Backoff",
    "Reporter",
    "Worker",
    "WorkerConfigError",
    "WorkerOptions",
    "main",
    "run_worker",
]

log = logging.getLogger("raftcron.worker")

# A run leased ahead is checked with the server this long before its instant (a paused
# job, a cancel); runs whose instants lie within START_GROUP_S share one check.
BEFORE_START_CHECK_S = 0.3
START_GROUP_S = 0.05
# ... plus the lease round trip this worker measured, at most this much more: a cluster
# that answers slowly (a herd: tens of thousands of runs checked at one instant) is asked
# earlier, so that the answer comes before the instant and not after it.
MAX_CHECK_EXTRA_S = 1.5


# chaos/mutants plants its early-start bug in this function, by its text in this file:
# moving it (or the scheduling that uses it) elsewhere leaves that mutant stale.
def _start_of(run: HeldRun) -> float:
    start = run.lease.start_mono_s
    return 0.0 if start is None else start


class Worker(LeaseLoop, Heartbeats):
    """One worker process's state. Most callers want `run_worker`."""

    async def run(self, stop: asyncio.Event) -> None:
        log.info("worker %s starting: servers=%s queues=%s concurrency=%d, job exits seen "
                 "by %s", self.worker_id, ",".join(self.client.servers),
                 ",".join(self.queues) or "-", self.concurrency, child_watch.chosen)
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

    def _start_at_instants(self, runs: list[HeldRun]) -> None:
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

    async def _at_instants(self, runs: list[HeldRun]) -> None:
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

    async def _check_before_start(self, runs: list[HeldRun]) -> None:
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

    async def _clock_loop(self) -> None:
        """Measure the server's clock every PROBE_EVERY_S (worker.clock)."""
        if not self.options.lease_ahead:
            return
        while True:
            await self.clock.probe(self.client.server_now_ms)
            await asyncio.sleep(PROBE_EVERY_S)


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
        watch_children_with_pidfds(loop)
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

