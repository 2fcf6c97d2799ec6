"""The external watchdog ping: the leader proves to an outside monitor that it ticks.

After a tick, at most once per interval, the leader sends a best-effort request (GET or
POST, short timeout) to `watchdog_url`. When no leader ticks, the pings stop and the
monitor (healthchecks.io, Dead Man's Snitch, a Prometheus blackbox…) raises the alarm;
that covers the failures the cluster cannot report itself (no quorum, all nodes down).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import httpx

from raftcron.leader.ticker import Ticker, now_ms

log = logging.getLogger("raftcron.watchdog")

CHECK_S = 0.5
TIMEOUT_S = 3.0


class Watchdog:
    def __init__(self, ticker: Ticker, url: str, method: str = "GET", interval_s: float = 5.0,
                 stale_s: float = 10.0, clock: Callable[[], int] = now_ms,
                 on_result: Callable[[str], None] | None = None) -> None:
        self.ticker = ticker
        self.url = url
        self.method = method
        self.interval_s = interval_s
        self.stale_s = stale_s
        self.clock = clock
        self.on_result = on_result
        self.pings = 0

    async def run(self) -> None:
        last_ping = float("-inf")
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            while True:
                await asyncio.sleep(CHECK_S)
                tick = self.ticker.last_tick_ms
                if tick is None or self.clock() - tick > self.stale_s * 1000:
                    continue
                if time.monotonic() - last_ping < self.interval_s:
                    continue
                last_ping = time.monotonic()
                try:
                    resp = await client.request(self.method, self.url,
                                                params={"last_tick_ms": str(tick)})
                    result = "ok" if resp.status_code < 400 else "error"
                except httpx.HTTPError as e:
                    log.info("watchdog ping to %s failed: %r", self.url, e)
                    result = "error"
                self.pings += 1
                if self.on_result is not None:
                    self.on_result(result)
