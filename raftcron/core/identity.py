"""Stable identities for occurrences and attempts.

A scheduled occurrence is named by its job and nominal instant, so two leaders that
claim the same instant produce the same id (and the database's UNIQUE constraint makes
the final call). Manual runs are named by their idempotency key, backfills by instant
and request key. The idempotency key handed to a job is its occurrence id.
"""

from __future__ import annotations

import functools
import hashlib

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


def attempt_id(occurrence_id: str, number: int) -> str:
    return f"{occurrence_id}~{number}"


FENCING_EPOCH_STRIDE = 1_000_000_000


def fencing_token(epoch: int, sequence: int) -> int:
    """Tokens embed the epoch (`token // STRIDE`) and strictly increase across epochs."""
    if not 0 < sequence < FENCING_EPOCH_STRIDE:
        raise ValueError("fencing sequence out of range for one epoch")
    return epoch * FENCING_EPOCH_STRIDE + sequence


def token_epoch(token: int) -> int:
    return token // FENCING_EPOCH_STRIDE
