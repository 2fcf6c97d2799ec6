"""Instant formatting and parsing. Instants in the state are int UTC epoch milliseconds."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from raftcron.core.errors import ValidationError

# The instants `ms_to_iso` can write (years 1 to 9999, whole seconds at the top).
ISO_MIN_MS = -62_135_596_800_000
ISO_MAX_MS = 253_402_300_799_000

# The instants the API accepts, in UTC: 1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z. The
# range is checked on the instant itself, not on the local year of the text: a local
# 9999-12-31T23:59:59-23:59 is in the year 10000 in UTC, which `ms_to_iso` cannot write.
# Everything in it can be written back out, so an accepted value can always be read.
ACCEPTED_MIN_MS = 0
ACCEPTED_MAX_MS = ISO_MAX_MS + 999
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


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
    # Exact integer arithmetic (a float timestamp rounds near the year 9999); fractions of
    # a millisecond are floored, so the instant never moves past the range's end.
    ms = (dt - _UNIX_EPOCH) // _ONE_MS
    if not ACCEPTED_MIN_MS <= ms <= ACCEPTED_MAX_MS:
        raise ValidationError(field, "must be between 1970-01-01T00:00:00Z and "
                              "9999-12-31T23:59:59.999Z (in UTC)")
    return ms


def clamp_accepted(ms: int | None) -> int | None:
    """`ms` moved into the accepted range, for rendering values stored before the range
    was checked in UTC (a job's `start_at`/`end_at`). Schedules fire between 1970 and the
    year 9010 only, so the clamped bound fires exactly as the stored one did."""
    if ms is None:
        return None
    return min(max(ms, ACCEPTED_MIN_MS), ACCEPTED_MAX_MS)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(text: str | float | int) -> float | None:
    """`7d`, `12h`, `30m`, `90s`, `2w` or seconds as a number; `off` (or 0) disables."""
    if isinstance(text, bool):
        raise ValueError("retention must be a duration such as 7d, 12h or 90s")
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        if text.strip().lower() in ("off", "none", "never"):
            return None
        match = _DURATION.match(text.lower())
        if not match:
            raise ValueError(f"retention {text!r} is not a duration such as 7d, 12h or 90s")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds < 0:
        raise ValueError("retention cannot be negative")
    return seconds or None
