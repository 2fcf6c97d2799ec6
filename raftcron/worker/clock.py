"""The worker's view of the cluster's clock, which decides whether it takes runs ahead.

Every `PROBE_EVERY_S` the worker asks its current server for its wall clock (`GET /healthz`
carries `now_ms`, as for the nodes' clock guard), a few times, and keeps the sample with
the smallest round trip. `refusal()` then says whether it may lease runs ahead of their
instant (core.ahead.ahead_refusal): not before a first good sample, not on a stale one,
not after a probe failed (the sample is dropped), not after its own wall clock stepped,
and not while it is off the server's by more than the tolerance.

Every lease answer also carries the leader's clock (`server_now_ms`): one that disagrees
with this worker's wall clock by more than the tolerance drops the sample at once, so a
clock that jumps between two probes stops the next poll from asking for runs ahead. (The
leases already held start on time either way: their wait is measured on the monotonic
clock from the server's time, see core.ahead.)

The times this worker reports (when a run's process started) are read on its monotonic
clock from the last good sample, never from its wall clock: a wall clock that steps
between two probes would otherwise put a run's start, and so its recorded finish,
seconds off (a chaos run's worker bumped 2 s reported starts 2 s late, then 2 s early).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from raftcron.core.ahead import CLOCK_TOLERANCE_MS, UNMEASURED, OffsetSample, ahead_refusal

log = logging.getLogger("raftcron.worker")

PROBE_EVERY_S = 5.0
PROBES = 3

# Returns the server's `now_ms` (raises on any failure).
ServerClock = Callable[[], Awaitable[float]]


class WorkerClock:
    def __init__(self, tolerance_ms: float = CLOCK_TOLERANCE_MS,
                 wall_ms: Callable[[], float] = lambda: time.time() * 1000,
                 mono_s: Callable[[], float] = time.monotonic) -> None:
        self.tolerance_ms = tolerance_ms
        self.sample: OffsetSample | None = None
        # The last good sample, kept when `sample` is dropped: it still tells the cluster's
        # time from the monotonic clock, which a step of the wall clock does not move.
        self.basis: OffsetSample | None = None
        self._wall_ms = wall_ms
        self._mono_s = mono_s
        self._last_refusal: str | None = "start"

    async def probe(self, server_clock: ServerClock) -> None:
        """Measure the offset again; any failure leaves no sample (fail closed)."""
        best: OffsetSample | None = None
        try:
            for _ in range(PROBES):
                sent = self._wall_ms()
                server_ms = await server_clock()
                sample = OffsetSample.measure(sent, server_ms, self._wall_ms(), self._mono_s())
                if best is None or sample.error_ms < best.error_ms:
                    best = sample
        except Exception as e:  # noqa: BLE001 - a failed probe is a "no", whatever failed
            log.warning("measuring the server's clock failed (%s: %s): taking no run ahead",
                        type(e).__name__, e)
            best = None
        self.sample = best
        if best is not None:
            self.basis = best

    def cluster_now_ms(self) -> int:
        """Now on the cluster's clock as this worker knows it: the server's time at the
        last good sample plus the monotonic time since (the wall clock, uncorrected,
        only before any sample). What the worker reports as a run's start; the cluster
        raises a start reported before the run's instant to the instant, and keeps a
        finish from lying after its own stamp of the completion (core.run_times)."""
        basis = self.basis
        if basis is None:
            return round(self._wall_ms())
        return round(self._mono_s() * 1000 + basis.wall_minus_mono_ms + basis.offset_ms)

    def check_lease_time(self, server_now_ms: float) -> None:
        """A lease answer's server time, compared with this worker's clock at receipt: one
        ahead of it by more than the tolerance (plus the sample's own error) drops the
        sample. One behind it is what a slow answer looks like (the leader reads its clock
        as it sends the answer, api.workers.AheadLeaseAnswer, but the answer may still
        wait in the network or in a forwarding node) and only makes a run start later; a
        step of this worker's own clock is caught against its monotonic clock instead."""
        if self.sample is None:
            return
        off = server_now_ms - self._wall_ms() - self.sample.offset_ms
        if off > self.tolerance_ms + self.sample.error_ms:
            log.warning("a lease answer's server time is %.0f ms off this worker's clock: "
                        "taking no run ahead until the clock is measured again", off)
            self.sample = None

    def not_before_mono(self, start_at_ms: int, sample: OffsetSample | None = None
                        ) -> float | None:
        """The monotonic instant at which this worker's own clock, corrected by `sample`
        (default: the current one) and its error, reaches `start_at_ms`; None without a
        sample that still describes the wall clock (it stepped since, or went stale)."""
        sample = self.sample if sample is None else sample
        wall, mono = self._wall_ms(), self._mono_s()
        if ahead_refusal(sample, wall, mono, self.tolerance_ms) == UNMEASURED:
            return None  # no sample, a stale one, or the wall clock stepped since
        assert sample is not None
        local = start_at_ms - sample.offset_ms + sample.error_ms
        return mono + (local - wall) / 1000

    def refusal(self) -> str | None:
        """Why this worker takes no run ahead now (None: it may); logged when it changes."""
        why = ahead_refusal(self.sample, self._wall_ms(), self._mono_s(), self.tolerance_ms)
        if why != self._last_refusal:
            if why is None:
                assert self.sample is not None
                log.info("clock agrees with the server's (offset %+.0f ms, +/- %.0f ms): "
                         "leasing runs ahead of their instant", self.sample.offset_ms,
                         self.sample.error_ms)
            else:
                offset = (f"offset {self.sample.offset_ms:+.0f} ms" if self.sample
                          else "no measurement")
                log.warning("taking no run ahead of its instant: clock %s (%s; tolerance "
                            "%.0f ms)", why, offset, self.tolerance_ms)
            self._last_refusal = why
        return why
