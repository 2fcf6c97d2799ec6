"""Keeping held leases alive: one batched `POST /v1/heartbeats` for every held lease
(running, or acknowledged and waiting for its instant or a slot) each
min(heartbeat_interval_s) seconds.

`cancel: true` stops the run, which is then reported as failed (the server records it as
cancelled). A rejection (`LEASE_REJECTIONS`) means the lease is gone: the run is stopped
and no completion is sent for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from raftcron.worker.backoff import Backoff
from raftcron.worker.base import HeldRun
from raftcron.worker.client import ApiError, ServerUnavailable
from raftcron.worker.execution import RunExecutor

log = logging.getLogger("raftcron.worker")

LEASE_REJECTIONS = frozenset({"stale_token", "lease_expired", "foreign_lease", "not_found"})


class Heartbeats(RunExecutor):
    """The heartbeat loop, and what an answer to a heartbeat does to a held run."""

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
                    self.worker_id, [r.lease for r in runs], timeout_s=timeout,
                    started={r.lease.attempt_id: r.started_ms for r in runs
                             if r.started_ms is not None})
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

    def _apply_heartbeat(self, run: HeldRun, r: dict[str, Any]) -> None:
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
