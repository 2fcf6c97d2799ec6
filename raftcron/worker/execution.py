"""Running held leases in the worker's slots and handing their outcomes to the reporter.

A slot takes the oldest acknowledged lease waiting for one (`_fill`) the moment it frees;
a lease the server took back is dropped unrun and one it cancelled is reported without
running. A run whose lease was lost while it ran is not reported.
"""

from __future__ import annotations

import asyncio
import logging

from raftcron.worker.base import HeldRun, WorkerBase
from raftcron.worker.client import Lease
from raftcron.worker.executors import RunResult

log = logging.getLogger("raftcron.worker")


class RunExecutor(WorkerBase):
    """Starts runs in free slots, runs them, reports them, and drains them on shutdown."""

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

    def _cancelled_before_start(self, lease: Lease) -> None:
        log.info("%s was cancelled before it started", lease.ids())
        self.reporter.submit({
            "attempt_id": lease.attempt_id, "fencing_token": lease.fencing_token,
            "outcome": "failed", "exit_code": None,
            "output": "[raftcron] cancelled before it started\n",
        })

    def _start(self, run: HeldRun) -> None:
        lease = run.lease
        self._runs[lease.attempt_id] = run
        run.task = asyncio.create_task(self._run(run), name=f"raftcron-run-{lease.attempt_id}")
        self._changed.set()
        log.info("starting %s try=%d token=%d scheduled_for=%s", lease.ids(), lease.attempt,
                 lease.fencing_token, lease.scheduled_for)

    async def _run(self, run: HeldRun) -> None:
        lease = run.lease
        began = asyncio.get_running_loop().time()
        started_ms = run.started_ms = self.clock.cluster_now_ms()
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
