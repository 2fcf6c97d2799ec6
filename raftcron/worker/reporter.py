"""Delivering the outcomes of runs (`POST /v1/completions`) in the background.

A completion whose answer is unknown (connection error, timeout, 5xx) is resent with
identical content, with capped exponential backoff across server failover, until a server
answers for it: the server treats an identical repeat as a duplicate, so the attempt gets
exactly one outcome.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from raftcron.worker.backoff import Backoff
from raftcron.worker.client import ApiError, ServerUnavailable, WorkerClient
from raftcron.worker.options import WorkerOptions

log = logging.getLogger("raftcron.worker")


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

