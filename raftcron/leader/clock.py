"""Clock agreement: a leader whose wall clock is far off the others' must not tick.

Every node asks its peers for their wall clock (`GET /healthz` carries `now_ms`) once a
second and keeps, per peer, the offset measured with the smallest round trip. A node's
clock is *trusted* when, counting itself, a majority of the cluster agrees with it within
`max_skew_ms`. The leader's ticker, dispatcher and sweeper only act while their clock is
trusted; a leader that stays untrusted hands leadership over (see node.py).

A step of this node's own wall clock (checked against its monotonic clock) makes it
untrusted at once, until the next measurement. Before any measurement the clock counts
as trusted (there is nothing to compare with,
and a leader needs a majority anyway); afterwards, while no measurement is fresh, the
last verdict stands.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

import httpx

MAX_SKEW_MS = 500
FRESH_S = 10.0
PERIOD_S = 1.0


@dataclass
class Sample:
    offset_ms: float
    rtt_ms: float
    at: float  # monotonic
    wall_minus_mono_ms: float  # this node's wall clock minus monotonic when measured


class ClockGuard:
    def __init__(self, peer_urls: list[str], cluster_size: int,
                 max_skew_ms: int = MAX_SKEW_MS, period_s: float = PERIOD_S) -> None:
        self.peer_urls = peer_urls
        self.cluster_size = cluster_size
        self.max_skew_ms = max_skew_ms
        self.period_s = period_s
        self.samples: dict[str, Sample] = {}
        self._last_verdict = True

    def record(self, url: str, sent_ms: float, peer_ms: float, received_ms: float) -> None:
        rtt = received_ms - sent_ms
        offset = peer_ms - (sent_ms + received_ms) / 2
        now = time.monotonic()
        wmm = time.time() * 1000 - now * 1000
        old = self.samples.get(url)
        changed = old is not None and (
            abs(wmm - old.wall_minus_mono_ms) > self.max_skew_ms / 2  # our clock stepped
            or abs(offset - old.offset_ms) > self.max_skew_ms / 2 + rtt  # or theirs
        )
        # Otherwise keep the tighter measurement unless it is getting stale; either way
        # the peer was just seen alive.
        if old is None or changed or rtt <= old.rtt_ms or now - old.at > FRESH_S / 2:
            self.samples[url] = Sample(offset, rtt, now, wmm)
        else:
            old.at = max(old.at, now - FRESH_S / 2)

    def fresh_offsets(self) -> list[float]:
        now = time.monotonic()
        return [s.offset_ms for s in self.samples.values() if now - s.at <= FRESH_S]

    def stepped(self) -> bool:
        """Whether this node's wall clock jumped (against its monotonic clock) since a
        fresh measurement was taken: that measurement no longer describes this clock."""
        now = time.monotonic()
        wmm = time.time() * 1000 - now * 1000
        return any(abs(wmm - s.wall_minus_mono_ms) > self.max_skew_ms / 2
                   for s in self.samples.values() if now - s.at <= FRESH_S)

    def trusted(self) -> bool:
        if self.stepped():
            return False  # until the peers are measured again with the new clock
        offsets = self.fresh_offsets()
        if not offsets:
            # Nothing fresh to compare with: keep the last verdict (a node found far off
            # stays distrusted while its peers are unreachable).
            return self._last_verdict
        agreeing = sum(1 for o in offsets if abs(o) <= self.max_skew_ms)
        self._last_verdict = 1 + agreeing >= self.cluster_size // 2 + 1
        return self._last_verdict

    def skew_ms(self) -> int | None:
        """This node's clock minus the median of its peers' (None: not measured)."""
        offsets = self.fresh_offsets()
        return None if not offsets else int(-statistics.median(offsets))

    def recently_seen(self, within_s: float = 2.0) -> list[str]:
        """Peers that answered a clock probe within `within_s`, most recent first."""
        now = time.monotonic()
        seen = [(s.at, u) for u, s in self.samples.items() if now - s.at <= within_s]
        return [u for _, u in sorted(seen, reverse=True)]

    def describe(self) -> dict[str, object]:
        return {"trusted": self.trusted(), "skew_ms": self.skew_ms(),
                "max_skew_ms": self.max_skew_ms,
                "peers": {u: round(s.offset_ms) for u, s in self.samples.items()}}

    async def run(self, headers: dict[str, str] | None = None) -> None:
        async with httpx.AsyncClient(timeout=2.0, headers=headers) as client:
            while True:
                await asyncio.gather(*(self._probe(client, u) for u in self.peer_urls))
                await asyncio.sleep(self.period_s)

    async def _probe(self, client: httpx.AsyncClient, url: str) -> None:
        sent = time.time() * 1000
        try:
            resp = await client.get(f"{url}/healthz")
            peer = resp.json().get("now_ms")
        except (httpx.HTTPError, ValueError, AttributeError):
            return
        received = time.time() * 1000
        if isinstance(peer, int | float):
            self.record(url, sent, float(peer), received)
