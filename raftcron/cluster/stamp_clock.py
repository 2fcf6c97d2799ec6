"""The cluster's confirmed time, as this node can tell it: the clock API stamps are read from.

Client writes and worker calls carry the time of the node that received them (`now_ms`
of `PutJob`, `Heartbeat`, `Complete`, ...). That node's own wall clock is confirmed by no
one: a follower 262 s fast (a chaos run) stamped completions minutes in the future and
set lease deadlines 262 s late, so a run whose worker then died stayed stranded.

Every node, however, applies the leader's confirmations: `BeginEpoch` and `ConfirmClock`
are proposed only while a majority confirms the leader's clock (leader.clock), and carry
that clock. Each one applied *live* is a one-way sample of the cluster's time:

    leader_ms - local_monotonic_ms_at_apply = K - delay

where K is "cluster time minus this node's monotonic clock" and delay >= 0 is the time
from the leader's proposal to this node's apply. So the sample with the largest value is
the one with the smallest delay (the NTP-style filter), and it is never ahead of K: the
estimate `monotonic_now + max(samples)` errs only behind the cluster, by the shortest
delay seen in the window (the state machine raises a stamp that lags more than 2 s to
the newest committed leader time anyway). A sample wrongly taken as live can therefore
only make stamps lag, never lead.

The estimate is kept against the monotonic clock, not the wall clock: a step of this
node's wall clock (a chaos clock bump, an NTP correction) changes nothing in it.

Samples are taken only from entries applied live, while this node follows the leader's
commit index closely: an entry replayed at startup or applied during a catch-up was
proposed long ago, its delay is not a network's but a history's. Only the newest epoch's
samples count (another leader has another clock, within the clock tolerance). The
estimate expires `fresh_s` after the newest sample: the leader stops confirming when no
majority confirms its clock, and an estimate extrapolated from the distant past would
drift with this node's monotonic clock and hide that the cluster's time is unknown.

Without a fresh estimate `stamp_ms` falls back to this node's own clock only if a
majority of the cluster confirms it (`local_confirmed`, the clock guard's NTP-style
probes of its peers); otherwise it returns None and the API refuses the write with 503
`clock_unconfirmed` (fail closed): a client retries, a worker tries its next server and
keeps its completion until one is accepted, so nothing is lost and nothing is stamped
with an unconfirmed clock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("raftcron.stamp_clock")

WINDOW_S = 30.0
FRESH_S = 5.0
# Beyond this, the local wall clock and the cluster's time are said to disagree (logged
# once per episode and shown). The clock guard's tolerance.
TOLERANCE_MS = 500


@dataclass(frozen=True, slots=True)
class StampSample:
    at_mono_ms: float  # this node's monotonic clock when the entry was applied
    cluster_minus_mono_ms: float  # the leader's stamp minus at_mono_ms


class StampClock:
    def __init__(self, local_confirmed: Callable[[], bool] = lambda: False,
                 window_s: float = WINDOW_S, fresh_s: float = FRESH_S,
                 tolerance_ms: int = TOLERANCE_MS,
                 wall: Callable[[], float] = time.time,
                 mono: Callable[[], float] = time.monotonic) -> None:
        self.local_confirmed = local_confirmed
        self.window_ms = window_s * 1000
        self.fresh_ms = fresh_s * 1000
        self.tolerance_ms = tolerance_ms
        self._wall = wall
        self._mono = mono
        self._samples: deque[StampSample] = deque()
        self._lock = threading.Lock()  # written on the tick thread, read by the API
        self._epoch = -1
        self.ignored = 0  # samples refused as not live (replayed, catching up)
        self._disagreeing = False

    # --- samples (the Raft tick thread) ----------------------------------------------------

    def observe(self, leader_ms: int, epoch: int, live: bool) -> None:
        """An applied leader confirmation stamped `leader_ms` by the leader of `epoch`.
        `live`: applied while this node follows the leader's commit index (not replayed)."""
        if not live:
            self.ignored += 1
            return
        at = self._mono() * 1000
        with self._lock:
            if epoch < self._epoch:
                return
            if epoch > self._epoch:
                self._epoch = epoch
                self._samples.clear()
            self._samples.append(StampSample(at, leader_ms - at))
            self._expire(at)

    def _expire(self, now_mono_ms: float) -> None:
        samples = self._samples
        while samples and now_mono_ms - samples[0].at_mono_ms > self.window_ms:
            samples.popleft()

    # --- readings (any thread) ------------------------------------------------------------

    def cluster_now_ms(self) -> int | None:
        """The cluster's confirmed time now, or None without a fresh live sample."""
        now = self._mono() * 1000
        with self._lock:
            samples = list(self._samples)
        fresh = [s for s in samples if now - s.at_mono_ms <= self.window_ms]
        if not fresh or now - fresh[-1].at_mono_ms > self.fresh_ms:
            return None
        return int(now + max(s.cluster_minus_mono_ms for s in fresh))

    def offset_ms(self) -> int | None:
        """This node's wall clock minus the cluster's time (None: no fresh estimate)."""
        cluster = self.cluster_now_ms()
        return None if cluster is None else int(self._wall() * 1000) - cluster

    def stamp_ms(self) -> int | None:
        """The time to stamp a command with: the cluster's time when it is known, this
        node's clock when a majority confirms it, else None (the caller refuses)."""
        cluster = self.cluster_now_ms()
        if cluster is not None:
            self._note_disagreement(int(self._wall() * 1000) - cluster)
            return cluster
        if self.local_confirmed():
            return int(self._wall() * 1000)
        return None

    def _note_disagreement(self, offset: int) -> None:
        disagreeing = abs(offset) > self.tolerance_ms
        if disagreeing and not self._disagreeing:
            log.warning("this node's clock is %+d ms off the cluster's confirmed time: "
                        "stamping writes with the cluster's time", offset)
        elif self._disagreeing and not disagreeing:
            log.info("this node's clock agrees with the cluster's time again (%+d ms)", offset)
        self._disagreeing = disagreeing

    def describe(self) -> dict[str, object]:
        offset = self.offset_ms()
        if offset is not None:
            self._note_disagreement(offset)
        return {
            "source": "cluster" if offset is not None else (
                "local" if self.local_confirmed() else "none"),
            "offset_ms": offset,
            "samples": len(self._samples),
            "ignored_samples": self.ignored,
            "epoch": self._epoch if self._epoch >= 0 else None,
        }
