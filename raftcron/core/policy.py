"""Pure policy decisions: misfire, overlap, retry/backoff. No I/O, no clock reads."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

FIRE = "fire"
SKIP_MISFIRE = "misfire"
SKIP_PAUSED = "paused"
SKIP_OVERLAP = "overlap"
SKIP_QUOTA = "quota"

MAX_BACKOFF_MS = 3_600_000


def plan_misfires(
    instants_ms: Sequence[int], now_ms: int, policy: str, grace_s: int, catch_up_max: int
) -> list[tuple[int, str]]:
    """Decide, for ascending due instants, which fire and which are skipped as misfires.

    An instant is *missed* when `now - instant > grace`. On-time instants always fire.
    - `skip`: every missed instant is recorded as skipped.
    - `run_once`: the latest missed instant fires (late); the rest are skipped.
    - `catch_up`: the latest `catch_up_max` missed instants fire; older ones are skipped.
    """
    grace_ms = grace_s * 1000
    missed = [t for t in instants_ms if now_ms - t > grace_ms]
    if policy == "skip":
        fire_missed: set[int] = set()
    elif policy == "run_once":
        fire_missed = set(missed[-1:])
    elif policy == "catch_up":
        fire_missed = set(missed[-catch_up_max:]) if catch_up_max > 0 else set()
    else:
        raise ValueError(f"unknown misfire policy {policy!r}")
    missed_set = set(missed)
    return [
        (t, FIRE if t not in missed_set or t in fire_missed else SKIP_MISFIRE)
        for t in instants_ms
    ]


@dataclass(frozen=True, slots=True)
class OverlapDecision:
    run: bool
    cancel_running: bool = False


def decide_overlap(policy: str, running: int, queued: int) -> OverlapDecision:
    """What to do with a new run of a job that has `running` leased and `queued` pending runs.

    - `allow`: always run.
    - `forbid`: skip while any run is queued or running.
    - `replace`: cancel what is queued or runs (through its heartbeat); queue the new run.
    - `buffer_one`: queue behind the running one, but never more than one queued run.
    """
    if policy == "allow":
        return OverlapDecision(run=True)
    if policy == "forbid":
        return OverlapDecision(run=running == 0 and queued == 0)
    if policy == "replace":
        return OverlapDecision(run=True, cancel_running=running > 0 or queued > 0)
    if policy == "buffer_one":
        return OverlapDecision(run=queued == 0)
    raise ValueError(f"unknown overlap policy {policy!r}")


def exclusive(policy: str) -> bool:
    """Whether at most one run of the job may be leased at a time."""
    return policy != "allow"


def should_retry(attempt_number: int, max_attempts: int) -> bool:
    return attempt_number < max_attempts


def retry_delay_ms(base_s: int, attempt_number: int, attempt_key: str) -> int:
    """Capped exponential backoff with deterministic jitter (+0..50%).

    `attempt_number` is the number of the attempt that just ended (1-based). The jitter is a
    hash of `attempt_key`, so every node computes the same delay.
    """
    if base_s <= 0:
        return 0
    raw = min(base_s * 1000 * (2 ** min(attempt_number - 1, 20)), MAX_BACKOFF_MS)
    frac = int.from_bytes(hashlib.sha256(attempt_key.encode()).digest()[:4], "big") / 2**32
    return int(raw * (1 + 0.5 * frac))
