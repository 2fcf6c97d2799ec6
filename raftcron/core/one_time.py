"""One-time and interval schedules, beside cron: the same interface as `CronSchedule`
(`next_after`, `iter_between`, `describe`, `timezone`), so `ScheduleSet` reads all three.

- **One-time** (`{"at": "2026-12-24T09:00:00", "timezone": "Europe/Berlin"}`, or a list of
  such local times): each local time is resolved in the zone by the same DST rules as a
  cron schedule's (`dst_gap`, `dst_fold`), by compiling the cron expression of that one
  second of the year and asking it for its first instants in that year. A time with an
  offset (`...T09:00:00+01:00`, `Z`) is that instant whatever the zone.
- **Interval** (`{"every": "90m", "anchor": "2026-01-01T00:15:00Z"}`): the instants
  anchor + k x every for every whole k (the anchor sets the phase; `start_at` bounds
  them), absolute instants that DST does not move.

Pure: no clock, no I/O.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from raftcron.core.schedule import (
    CronSchedule,
    ScheduleError,
    compile_schedule,
    instants_between,
    to_local_iso,
    to_utc_iso,
)

MAX_AT = 100
MIN_EVERY_S = 1
MAX_EVERY_S = 366 * 86_400
# 9999-12-31T23:59:59Z: the last second any schedule may name.
LAST_SECOND = 253_402_300_799
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
# `90m`, `1h30m`, `2d`, `45s`, `1w2d` (each unit once, largest first).
_EVERY = re.compile(r"^(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class OnceSchedule:
    """Fires at each of its instants (epoch seconds, ascending, distinct) and never again."""

    instants: tuple[int, ...]
    timezone: str
    at: tuple[str, ...]

    def next_after(self, ts: int) -> int | None:
        i = bisect_right(self.instants, ts)
        return self.instants[i] if i < len(self.instants) else None

    def iter_between(self, after: int, until: int) -> Iterator[int]:
        for t in self.instants[bisect_right(self.instants, after):]:
            if t > until:
                return
            yield t

    def describe(self) -> str:
        shown = ", ".join(to_local_iso(t, self.timezone) for t in self.instants[:3])
        more = f" and {len(self.instants) - 3} more" if len(self.instants) > 3 else ""
        return f"once at {shown}{more} ({self.timezone})"


@dataclass(frozen=True, slots=True)
class IntervalSchedule:
    """Fires at anchor + k x every (epoch seconds) for every whole k."""

    every_s: int
    anchor_s: int
    timezone: str

    def next_after(self, ts: int) -> int | None:
        k = (int(ts) - self.anchor_s) // self.every_s + 1
        nxt = self.anchor_s + k * self.every_s
        return nxt if nxt <= LAST_SECOND else None

    def iter_between(self, after: int, until: int) -> Iterator[int]:
        return instants_between(self.next_after, after, until)

    def describe(self) -> str:
        return f"every {every_text(self.every_s)} from {to_utc_iso(self.anchor_s)}"


def every_text(seconds: int) -> str:
    """`5400` -> `1h30m`: the canonical spelling of an interval."""
    out = []
    for unit in ("w", "d", "h", "m", "s"):
        n, seconds = divmod(seconds, _UNITS[unit])
        if n:
            out.append(f"{n}{unit}")
    return "".join(out) or "0s"


def parse_every(value: object, field: str) -> int:
    """An interval (`90m`, `1h30m`, `2d`, or whole seconds as a number) as seconds, from
    MIN_EVERY_S to MAX_EVERY_S."""
    if isinstance(value, bool):
        raise ScheduleError(field, "must be a duration such as 90m, 1h30m or 2d")
    if isinstance(value, int | float):
        if not float(value).is_integer():
            raise ScheduleError(field, "must be a whole number of seconds")
        seconds = int(value)
    elif isinstance(value, str) and value and (m := _EVERY.match(value.strip().lower())) \
            and any(m.groups()):
        seconds = sum(int(n) * _UNITS[u] for n, u in zip(m.groups(), "wdhms", strict=True)
                      if n)
    else:
        raise ScheduleError(field, "must be a duration such as 90m, 1h30m or 2d")
    if not MIN_EVERY_S <= seconds <= MAX_EVERY_S:
        raise ScheduleError(field, f"must be between {MIN_EVERY_S} s and 366 days")
    return seconds


def parse_at(value: object, field: str) -> tuple[str, ...]:
    """`at`: one local date-time or a list of 1 to MAX_AT, each `YYYY-MM-DDTHH:MM[:SS]`
    (local to the schedule's zone) or with an offset or `Z` (an absolute instant);
    returned in their canonical spelling (seconds always written), in the given order."""
    items = value if isinstance(value, list) else [value]
    if not 1 <= len(items) <= MAX_AT:
        raise ScheduleError(field, f"must be a date-time or a list of 1 to {MAX_AT}")
    out = []
    for i, item in enumerate(items):
        where = f"{field}.{i}" if isinstance(value, list) else field
        out.append(_canonical_at(item, where))
    return tuple(out)


def _canonical_at(item: object, field: str) -> str:
    if not isinstance(item, str) or not 10 < len(item) <= 40:
        raise ScheduleError(field, "must be a date-time such as 2026-12-24T09:00:00")
    text = item.strip()
    if text[-1:] in ("z", "Z"):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ScheduleError(field, f"{item!r} is not a date-time such as "
                                   "2026-12-24T09:00:00") from None
    if "T" not in text.upper() or dt.microsecond:
        raise ScheduleError(field, "must be a date-time to the second, such as "
                                   "2026-12-24T09:00:00")
    if dt.year < 1970:
        raise ScheduleError(field, "must be in the years 1970 to 9999")
    return dt.isoformat()


def compile_once(at: tuple[str, ...], timezone: str, dst_gap: str, dst_fold: str,
                 field: str = "schedule.at") -> OnceSchedule:
    """Resolve each local time of `at` in `timezone` by the DST rules (ScheduleError when
    one names no instant: a time in the spring gap with `dst_gap` skip)."""
    instants: set[int] = set()
    for i, text in enumerate(at):
        where = f"{field}.{i}" if len(at) > 1 else field
        found = _resolve(text, timezone, dst_gap, dst_fold, where)
        if not found:
            raise ScheduleError(where, f"{text} does not exist in {timezone} (a DST gap) "
                                       "and dst_gap is skip")
        instants.update(found)
    if max(instants) > LAST_SECOND or min(instants) < 0:
        raise ScheduleError(field, "must fall between 1970 and the end of 9999 in UTC")
    return OnceSchedule(tuple(sorted(instants)), timezone, at)


def _resolve(text: str, timezone: str, dst_gap: str, dst_fold: str, field: str
             ) -> list[int]:
    """The instants (epoch seconds) of one `at` text: an absolute one as it is; a local
    one in `timezone` by the DST rules, as a cron schedule resolves its local times: a
    time the fall-back fold repeats is its first instant (`dst_fold` once or auto) or both
    (both); one in the spring gap is none (`dst_gap` skip) or the gap's end (shift or
    auto: the time the clocks moved to)."""
    # The zone and the policies are checked as a cron schedule's are.
    try:
        zone_check = compile_schedule("0 0 * * *", timezone, dst_gap, dst_fold)
    except ScheduleError as e:
        raise ScheduleError(field.rsplit(".at", 1)[0] + e.field.removeprefix("schedule"),
                            e.message) from None
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is not None:
        return [_epoch(dt)]
    try:
        return _resolve_local(dt, ZoneInfo(zone_check.timezone), dst_gap, dst_fold)
    except (OverflowError, ValueError):  # past the year 9999 in UTC
        raise ScheduleError(field, "must fall between 1970 and the end of 9999 in UTC"
                            ) from None


def _resolve_local(dt: datetime, zone: ZoneInfo, dst_gap: str, dst_fold: str) -> list[int]:
    first, second = (_epoch(dt.replace(tzinfo=zone, fold=f)) for f in (0, 1))
    lo, hi = min(first, second), max(first, second)
    real = [t for t in dict.fromkeys((lo, hi)) if _local(t, zone) == dt]
    if real:  # one instant, or the fold's two
        return real if dst_fold == "both" else real[:1]
    if dst_gap == "skip":
        return []
    # The gap: the first second whose local time is past `dt` (the clocks' jump).
    while lo < hi:
        mid = (lo + hi) // 2
        if _local(mid, zone) > dt:
            hi = mid
        else:
            lo = mid + 1
    return [lo]


def _epoch(dt: datetime) -> int:
    return (dt - _EPOCH) // timedelta(seconds=1)


def _local(t: int, zone: ZoneInfo) -> datetime:
    return (_EPOCH + timedelta(seconds=t)).astimezone(zone).replace(tzinfo=None)


@dataclass(frozen=True, slots=True)
class NeverSchedule:
    """The schedule of a chained job (core.chains): no instant of its own. Its runs come
    from its upstream's ends, which are not instants a clock can name ahead."""

    timezone: str = "UTC"

    def next_after(self, ts: int) -> int | None:
        return None

    def iter_between(self, after: int, until: int) -> Iterator[int]:
        return iter(())

    def describe(self) -> str:
        return "no schedule of its own: runs after another job"


def compile_kind(cron: str, at: tuple[str, ...], every_s: int | None, anchor_ms: int | None,
                 timezone: str, dst_gap: str, dst_fold: str, *, hash_key: str = ""
                 ) -> CronSchedule | OnceSchedule | IntervalSchedule | NeverSchedule:
    """A schedule of any kind compiled to what answers its fire instants (a chained job's
    empty one to `NeverSchedule`)."""
    if not cron and not at and every_s is None:
        return NeverSchedule(timezone)
    if at:
        return compile_once(at, timezone, dst_gap, dst_fold)
    if every_s is not None:
        return IntervalSchedule(every_s, (anchor_ms or 0) // 1000, timezone)
    return compile_schedule(cron, timezone, dst_gap, dst_fold, hash_key=hash_key)
