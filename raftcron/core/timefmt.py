"""Instant formatting and parsing. Instants in the state are int UTC epoch milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from raftcron.core.errors import ValidationError

# The instants `ms_to_iso` can write (years 1 to 9999, whole seconds at the top).
ISO_MIN_MS = -62_135_596_800_000
ISO_MAX_MS = 253_402_300_799_000


def ms_to_iso(ms: int | None) -> str | None:
    """UTC ISO 8601 with a `Z`, millisecond precision only when needed."""
    if ms is None:
        return None
    # Whole seconds and milliseconds apart: `ms / 1000` as a float loses the millisecond
    # of instants after about the year 2200 (…57.219 written as …57.218).
    dt = datetime.fromtimestamp(ms // 1000, tz=UTC)
    if ms % 1000:
        dt = dt.replace(microsecond=ms % 1000 * 1000)
        return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return dt.isoformat(timespec="seconds").replace("+00:00", "Z")


def ms_to_local_iso(ms: int, tz: str) -> str:
    dt = datetime.fromtimestamp(ms // 1000, tz=ZoneInfo(tz))
    return dt.isoformat(timespec="seconds")


def parse_iso_ms(text: object, field: str) -> int:
    """Parse ISO 8601 with `Z` or an offset into epoch ms; naive times are rejected."""
    if not isinstance(text, str) or not text or len(text) > 64:
        raise ValidationError(field, "must be an ISO 8601 instant such as 2026-03-08T07:00:00Z")
    try:
        dt = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise ValidationError(
            field, f"{text!r} is not an ISO 8601 instant such as 2026-03-08T07:00:00Z"
        ) from None
    if dt.tzinfo is None:
        raise ValidationError(field, "must carry a UTC offset or Z")
    if not 1970 <= dt.year <= 9999:
        raise ValidationError(field, "year out of range")
    return int(round(dt.timestamp() * 1000))
