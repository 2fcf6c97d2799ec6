"""Clock agreement: a leader leases and claims nothing until a majority confirms its clock.

Every node asks each peer for its wall clock (`GET /healthz` carries `now_ms`) once a
second and keeps, per peer, the offset measured with the smallest round trip. A node's
clock is *confirmed* when, counting itself, a majority of the cluster agrees with it
within `max_skew_ms`, on fresh measurements.

The guard fails closed (ARCHITECTURE invariant 7): no measurement yet, a stale one, a
probe that failed (timeout, refused, TLS error, bad answer) and a step of this node's
own wall clock (checked against its monotonic clock) all count as *not confirmed*. A
probe error also discards that peer's last sample: the peer is not counted until it
answers again. Errors are counted per peer and logged at most once per
`ERROR_LOG_EVERY_S` per peer, so a misconfigured probe (say, TLS) is seen, not silent.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

log = logging.getLogger("raftcron.clock")

MAX_SKEW_MS = 500
FRESH_S = 5.0
PERIOD_S = 1.0
PROBE_TIMEOUT_S = 2.0
ERROR_LOG_EVERY_S = 30.0


@dataclass
class Sample:
    offset_ms: float
    rtt_ms: float
    at: float  # monotonic
    wall_minus_mono_ms: float  # this node's wall clock minus monotonic when measured


@dataclass
class ProbeErrors:
    """Failed probes of one peer: how many, the latest, and when it was last logged."""

    count: int = 0
    last: str | None = None
    logged_at: float | None = None  # monotonic


class ClockGuard:
    def __init__(self, peer_urls: list[str], cluster_size: int,
                 max_skew_ms: int = MAX_SKEW_MS, period_s: float = PERIOD_S) -> None:
        self.peer_urls = peer_urls
        self.cluster_size = cluster_size
        self.max_skew_ms = max_skew_ms
        self.period_s = period_s
        self.samples: dict[str, Sample] = {}
        self.errors: dict[str, ProbeErrors] = {}
        self.last_confirmed_ms: int | None = None  # wall clock, when last confirmed
        # Told every probe's answer (None: the probe failed), e.g. the peer's announced
        # protocol level (cluster.levels).
        self.on_answer: Callable[[str, Any | None], None] | None = None

    # --- measurements --------------------------------------------------------------------

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

    def record_error(self, url: str, error: str) -> None:
        """A probe of `url` failed: it counts as a "no" until the peer answers again."""
        self.samples.pop(url, None)
        errs = self.errors.setdefault(url, ProbeErrors())
        errs.count += 1
        errs.last = error
        now = time.monotonic()
        if errs.logged_at is None or now - errs.logged_at >= ERROR_LOG_EVERY_S:
            errs.logged_at = now
            log.warning("clock probe of %s failed (%d failures so far): %s; this peer does "
                        "not count towards confirming this node's clock", url, errs.count,
                        error)

    def probe_errors_total(self) -> int:
        return sum(e.count for e in self.errors.values())

    # --- verdict -------------------------------------------------------------------------

    def fresh_offsets(self) -> list[float]:
        now = time.monotonic()
        return [s.offset_ms for u, s in self.samples.items()
                if now - s.at <= FRESH_S and u in self.peer_urls]

    def stepped(self) -> bool:
        """Whether this node's wall clock jumped (against its monotonic clock) since a
        fresh measurement was taken: that measurement no longer describes this clock."""
        now = time.monotonic()
        wmm = time.time() * 1000 - now * 1000
        return any(abs(wmm - s.wall_minus_mono_ms) > self.max_skew_ms / 2
                   for s in self.samples.values() if now - s.at <= FRESH_S)

    def agreeing(self) -> int:
        """Peers whose fresh measurement agrees with this clock within the tolerance."""
        return sum(1 for o in self.fresh_offsets() if abs(o) <= self.max_skew_ms)

    def confirmed(self) -> bool:
        """Whether a majority of the cluster, this node included, agrees with this clock
        on fresh measurements. False whenever that is not known."""
        if self.stepped():
            return False  # until the peers are measured again with the new clock
        ok = 1 + self.agreeing() >= self.cluster_size // 2 + 1
        if ok:
            self.last_confirmed_ms = int(time.time() * 1000)
        return ok

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
        confirmed = self.confirmed()
        last = self.last_confirmed_ms
        return {
            "confirmed": confirmed,
            # The former name of `confirmed`, kept for existing readers.
            "trusted": confirmed,
            "last_confirmed_at": None if last is None else datetime.fromtimestamp(
                last / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "agreeing_peers": self.agreeing(),
            "needed_peers": self.cluster_size // 2,
            "skew_ms": self.skew_ms(),
            "max_skew_ms": self.max_skew_ms,
            "peers": {u: round(s.offset_ms) for u, s in self.samples.items()},
            "probe_errors": {u: {"count": e.count, "last": e.last}
                             for u, e in self.errors.items()},
        }

    # --- probing -------------------------------------------------------------------------

    async def run(self, verify: ssl.SSLContext | bool = True,
                  transport: httpx.AsyncBaseTransport | None = None) -> None:
        """Probe every peer once per period, each on its own: a peer that hangs (paused,
        half-open) delays only its own measurement. `verify` is the peer TLS setting
        every other peer call uses (`cluster.peer_tls`)."""
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S, verify=verify,
                                     transport=transport) as client:
            in_flight: dict[str, asyncio.Task[None]] = {}
            try:
                while True:
                    for url in list(self.peer_urls):
                        task = in_flight.get(url)
                        if task is None or task.done():
                            in_flight[url] = asyncio.create_task(self._probe(client, url))
                    for url in [u for u in in_flight if u not in self.peer_urls]:
                        in_flight.pop(url).cancel()
                        self.samples.pop(url, None)
                    self.confirmed()  # keeps last_confirmed_at current
                    await asyncio.sleep(self.period_s)
            finally:
                for task in in_flight.values():
                    task.cancel()

    async def _probe(self, client: httpx.AsyncClient, url: str) -> None:
        sent = time.time() * 1000
        try:
            resp = await client.get(f"{url}/healthz")
            resp.raise_for_status()
            answer = resp.json()
            peer = answer.get("now_ms")
            if not isinstance(peer, int | float) or isinstance(peer, bool):
                raise ValueError(f"no numeric now_ms in the answer: {peer!r}")
        except Exception as e:  # noqa: BLE001 - every failure is a "no", recorded and logged
            self.record_error(url, f"{type(e).__name__}: {e}")
            if self.on_answer is not None:
                self.on_answer(url, None)
            return
        received = time.time() * 1000
        self.record(url, sent, float(peer), received)
        if self.on_answer is not None:
            self.on_answer(url, answer)
