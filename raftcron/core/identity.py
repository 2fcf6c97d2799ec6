"""Stable identities for occurrences and attempts.

A scheduled occurrence is named by its job and nominal instant, so two leaders that
claim the same instant produce the same id (and the database's UNIQUE constraint makes
the final call). Manual runs are named by their idempotency key, backfills by instant
and request key, a chained job's runs by the upstream occurrence that
started them. The idempotency key handed to a job is its occurrence id.
"""

from __future__ import annotations

import functools
import hashlib
from datetime import UTC, datetime

from raftcron.core.timefmt import ms_to_iso


def _short_hash(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


@functools.lru_cache(maxsize=4096)
def _instant_text(ms: int) -> str:
    return ms_to_iso(ms) or ""


def scheduled_occurrence_id(job_id: str, scheduled_for_ms: int) -> str:
    return f"{job_id}@{_instant_text(scheduled_for_ms)}"


def manual_occurrence_id(job_id: str, idempotency_key: str) -> str:
    return f"{job_id}@manual-{_short_hash(idempotency_key, 20)}"


def backfill_occurrence_id(job_id: str, scheduled_for_ms: int, request_key: str) -> str:
    return f"{job_id}@backfill-{_short_hash(request_key, 12)}-{ms_to_iso(scheduled_for_ms)}"


def chained_occurrence_id(job_id: str, upstream_occurrence_id: str, created_ms: int) -> str:
    """A chained job's run for one upstream occurrence (core.chains), created at
    `created_ms` (the entry's time, so every node names it alike). The pair (job, upstream)
    is what is unique (the index occ_chained); the time leads the suffix so that a job's
    chained runs sort by it, and a page of them reads from the end of their id range."""
    when = datetime.fromtimestamp(created_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return (f"{job_id}@after-{when}.{created_ms % 1000:03d}Z-"
            f"{_short_hash(upstream_occurrence_id, 12)}")


def job_chained_occurrences(job_id: str) -> tuple[str, str]:
    """The chained-run occurrence ids of a job, in the order of their creation."""
    return f"{job_id}@after-", f"{job_id}@after."  # "." follows "-"


def is_backfill(occurrence_or_attempt_id: str) -> bool:
    """Whether the id is a backfill's (job ids contain no `@`, so only a backfill occurrence
    id, and its attempts' ids, contain `@backfill-`)."""
    return "@backfill-" in occurrence_or_attempt_id


def attempt_id(occurrence_id: str, number: int) -> str:
    return f"{occurrence_id}~{number}"


def job_of(occurrence_or_attempt_id: str) -> str:
    """The job an occurrence or attempt id belongs to (job ids contain no `@`)."""
    return occurrence_or_attempt_id.split("@", 1)[0]


# Id ranges. Job ids are `[A-Za-z0-9._-]`, so no job id contains `@` and no occurrence id
# contains `~`: the ids that start with `<job>@` are exactly that job's occurrences, and
# the ids that start with `<occurrence>~` exactly its attempts. A scheduled occurrence's
# suffix is its instant in ISO 8601 (whole seconds, starting with a digit), so within
# [`<job>@0`, `<job>@:`) ids sort by instant and nothing else falls there (`manual-...`
# and `backfill-...` sort after `:`). Half-open ranges: `id >= lo AND id < hi`.

def job_occurrences(job_id: str) -> tuple[str, str]:
    """Every occurrence id of a job."""
    return f"{job_id}@", f"{job_id}A"  # "A" follows "@"


def job_scheduled_occurrences(job_id: str) -> tuple[str, str]:
    """The scheduled occurrence ids of a job, in the order of their instants."""
    return f"{job_id}@0", f"{job_id}@:"  # ":" follows "9"


def job_manual_occurrences(job_id: str) -> tuple[str, str]:
    """The manual occurrence ids of a job."""
    return f"{job_id}@manual-", f"{job_id}@manual."  # "." follows "-"


def scheduled_id_bound(job_id: str, ms: int) -> str:
    """The scheduled id of the second holding `ms`: an inclusive id bound for instants at
    or after (lower) or at or before (upper) `ms`, since instants are whole seconds. The
    bound may also admit instants of that same second: filter on the instant too."""
    return scheduled_occurrence_id(job_id, ms - ms % 1000)


def job_scheduled_occurrences_after(job_id: str, after_ms: int) -> tuple[str, str]:
    """A range holding every scheduled occurrence id of a job with an instant after
    `after_ms` (and possibly a few from the same second: filter on the instant too)."""
    return scheduled_id_bound(job_id, after_ms), f"{job_id}@:"


def occurrence_attempts(occurrence_id: str) -> tuple[str, str]:
    """Every attempt id of an occurrence."""
    return f"{occurrence_id}~", f"{occurrence_id}\x7f"  # DEL follows "~"


FENCING_EPOCH_STRIDE = 1_000_000_000


def fencing_token(epoch: int, sequence: int) -> int:
    """Tokens embed the epoch (`token // STRIDE`) and strictly increase across epochs."""
    if not 0 < sequence < FENCING_EPOCH_STRIDE:
        raise ValueError("fencing sequence out of range for one epoch")
    return epoch * FENCING_EPOCH_STRIDE + sequence


def token_epoch(token: int) -> int:
    return token // FENCING_EPOCH_STRIDE
