"""Dispatch ahead (issue 18 §4): the arithmetic of starting a run leased before its instant.

A run due at T may be leased up to the node's `lease_ahead_s` before T. Its lease names
the instant it may start (`start_at_ms`, the cluster's time) and the response carries the
leader's clock when it was answered (`server_now_ms`). The worker then waits
`start_at_ms - server_now_ms` on its monotonic clock, counted from when the response
arrived: the answer left the server after `server_now_ms`, so however long it travelled,
the run starts at or after T by the server's clock, and a step of the worker's wall clock
during the wait changes nothing.

The worker only asks for runs ahead while its own wall clock agrees with the cluster's
within `CLOCK_TOLERANCE_MS` (the clock guard's bound), on a fresh measurement taken since
its wall clock last stepped. Fail closed: no measurement, a stale one, a failed probe or a
step of its clock since the measurement means it takes only runs already due.

Pure: every clock reading is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass

# On by default, 2 s: room for a run's lease and its acknowledgement (one Raft commit each,
# typically 30-100 ms) and the pre-start check (worker.runner.Worker.check_lead_s: 0.3 s
# before the instant, up to 1.8 s where the cluster answers slowly) to be done before it,
# with several slow commits to spare; the value it was built, measured and run under chaos
# with (bench/results/chaos-ahead.md).
# A run handed back unrun before its instant stays due at its instant
# (state.attempts._due_again), not at once: before that fix a chaos run recorded effects
# 0.59-0.66 s early with it on. `lease_ahead_s = 0` in a node's config turns it off.
DEFAULT_LEASE_AHEAD_S = 2.0
# A herd (HERD_SIZE runs due at one instant) may go this far ahead: leasing
# and acknowledging 33,000 runs took 6-8 s on two cores (bench/herd.py), and their checks
# before the start go out up to 1.8 s before it. At 6 s, 4,000-16,000 of them were still
# leased after their instant; at 10 s every one was out 2.4 s before it.
DEFAULT_LEASE_AHEAD_HERD_S = 10.0
# How many runs due at one instant (within 10 ms) make a herd, by default.
HERD_SIZE = 1000
MAX_LEASE_AHEAD_S = 10.0
# A herd larger than its configured lead can lease may go further ahead (the node's
# `lease_ahead_herd_max_s`, off by default), as far as leasing it takes at this rate: the
# lease path's rate on two cores beside the pollers' acknowledgements (bench/herd.py:
# 100,000 runs went at 2,700-5,500 a second), so that every run is out before its instant.
# Never further than MAX_HERD_LEAD_S. Off by default because a worker holds such runs, in
# its slots' place, for that long before they start (worker.leasing counts them as held).
HERD_LEASES_PER_S = 2_500
MAX_HERD_LEAD_S = 60.0
# The leader claims such a herd early enough for its claims (in batches of 1,000, committed
# at 10,000-40,000 runs a second) to be in before its leasing starts.
HERD_CLAIMS_PER_S = 10_000
# The clock guard's bound (leader.clock.MAX_SKEW_MS): a worker further off than this from
# the server it measured takes nothing ahead.
CLOCK_TOLERANCE_MS = 500
# A measurement older than this no longer says the clocks agree.
OFFSET_FRESH_S = 30.0
# Reasons a worker gives for not leasing ahead (the `ahead_refused` field of a poll).
UNMEASURED = "unmeasured"
SKEWED = "skewed"
REFUSAL_REASONS = (UNMEASURED, SKEWED)


def herd_lead_ms(size: int, configured_ms: int, max_ms: int) -> int:
    """How long before its instant a herd of `size` runs starts leasing: the configured
    lead (`lease_ahead_herd_s`), or as long as leasing them all takes at
    HERD_LEASES_PER_S, up to `max_ms` (`lease_ahead_herd_max_s`; MAX_HERD_LEAD_S at most)."""
    needed = -(-size * 1000 // HERD_LEASES_PER_S)
    return max(configured_ms, min(needed, max_ms, int(MAX_HERD_LEAD_S * 1000)))


def herd_claim_lead_ms(size: int, configured_ms: int, max_ms: int) -> int:
    """How long before its instant the leader claims a herd of `size` runs: the configured
    claim lead; or, for a herd leased further ahead than that (herd_lead_ms), its leasing
    lead plus the time its claims take at HERD_CLAIMS_PER_S (again at most
    MAX_HERD_LEAD_S)."""
    lead = herd_lead_ms(size, configured_ms, max_ms)
    if lead <= configured_ms:
        return configured_ms
    claims_ms = -(-size * 1000 // HERD_CLAIMS_PER_S)
    return lead + min(claims_ms, int(MAX_HERD_LEAD_S * 1000))


def start_delay_s(start_at_ms: int, server_now_ms: int) -> float:
    """How long after receiving the lease its run may start (never negative)."""
    return max(0.0, (start_at_ms - server_now_ms) / 1000)


@dataclass(frozen=True, slots=True)
class OffsetSample:
    """One probe of a server's clock: `offset_ms` = server clock - this worker's wall clock,
    known to within `error_ms` (half the round trip)."""

    offset_ms: float
    error_ms: float
    at_mono_s: float
    wall_minus_mono_ms: float
    """This worker's wall clock minus its monotonic clock when measured: if that moves,
    the wall clock stepped and the sample no longer describes it."""

    @classmethod
    def measure(cls, sent_wall_ms: float, server_ms: float, received_wall_ms: float,
                received_mono_s: float) -> OffsetSample:
        rtt = max(0.0, received_wall_ms - sent_wall_ms)
        return cls(offset_ms=server_ms - (sent_wall_ms + received_wall_ms) / 2,
                   error_ms=rtt / 2, at_mono_s=received_mono_s,
                   wall_minus_mono_ms=received_wall_ms - received_mono_s * 1000)


def ahead_refusal(sample: OffsetSample | None, now_wall_ms: float, now_mono_s: float,
                  tolerance_ms: float = CLOCK_TOLERANCE_MS) -> str | None:
    """Why this worker must not take runs ahead now (None: it may)."""
    if sample is None or now_mono_s - sample.at_mono_s > OFFSET_FRESH_S:
        return UNMEASURED
    stepped = abs((now_wall_ms - now_mono_s * 1000) - sample.wall_minus_mono_ms)
    if stepped > tolerance_ms / 2:
        return UNMEASURED  # the wall clock moved since it was measured
    if abs(sample.offset_ms) + sample.error_ms > tolerance_ms:
        return SKEWED
    return None
