"""Cron schedule compilation and fire-time computation.

This module is pure: it performs no I/O of its own (zone data is loaded by ``zoneinfo``),
never reads the clock and uses no randomness. All instants are ``int`` UTC epoch seconds.

How fire times are found
------------------------
Cron expressions describe *local wall-clock* times. Matching wall-clock times are searched
on naive local time (plain integer arithmetic, which has no DST problems) by skipping whole
months/days/hours/minutes that cannot match. The UTC time line is then split into
*segments* of constant UTC offset, delimited by the zone's offset transitions. Inside one
segment local and UTC time differ by a constant, so the next fire in a segment is simply
``next matching local time - offset``, provided it lies before the segment end. The DST
policies only act at segment starts:

* a *gap* (offset increases at instant T): with ``dst_gap="shift"`` a matching local time
  inside the missing range fires once, at T itself; with ``"skip"`` it does not fire;
* a *fold* (offset decreases at T): the repeated local range appears in both segments;
  with ``dst_fold="once"`` it is excluded from the later segment.

Transitions are discovered by sampling ``zoneinfo`` offsets and bisecting (``zoneinfo``
does not expose its transition table); results are cached per zone and UTC year.
"""

from __future__ import annotations

import hashlib
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "CronSchedule",
    "ScheduleError",
    "compile_schedule",
    "jitter_offset_ms",
    "parse_instant",
    "to_local_iso",
    "to_utc_iso",
]

MAX_CRON_LENGTH = 256
HORIZON_YEARS = 10

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DAY = 86_400
_MAX_YEAR = 9_000

_MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DOW_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_MONTH_WORDS = ("January", "February", "March", "April", "May", "June", "July",
                "August", "September", "October", "November", "December")
_DOW_WORDS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")

_GAP_POLICIES = ("auto", "shift", "skip")
_FOLD_POLICIES = ("auto", "once", "both")

# Zone keys whose offset never changes; they take the fixed-offset fast path.
_FIXED_ZONE_RE = re.compile(
    r"(Etc/)?(UTC|UCT|GMT|GMT0|GMT[+-]0|Greenwich|Universal|Zulu)|Etc/GMT[+-]\d{1,2}"
)
# Host-dependent aliases: resolving them would make schedules differ between machines.
_REJECTED_ZONES = frozenset({"localtime", "posixrules"})

_NUM = r"(\d{1,3})"
_RE_RANGE = re.compile(r"([0-9A-Za-z]{1,3})(?:-([0-9A-Za-z]{1,3}))?(?:/(\d{1,3}))?")
_RE_STAR = re.compile(r"[*?](?:/(\d{1,3}))?")
_RE_HASH = re.compile(r"H(?:\((\d{1,2})-(\d{1,2})\))?(?:/(\d{1,3}))?")
_RE_DOM_LAST = re.compile(r"L(?:-" + _NUM + r")?")
_RE_DOM_W = re.compile(_NUM + r"W")
_RE_DOW_LAST = re.compile(r"([0-7]|[A-Za-z]{3})L")
_RE_DOW_NTH = re.compile(r"([0-7]|[A-Za-z]{3})#(\d{1,2})")


class ScheduleError(ValueError):
    """A schedule definition is invalid.

    ``field`` is the dotted field name of the offending input ("schedule.cron",
    "schedule.timezone", "schedule.dst_gap", "schedule.dst_fold"); ``message`` is a
    one-line human-readable reason.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def __reduce__(self) -> tuple[type[ScheduleError], tuple[str, str]]:
        return (type(self), (self.field, self.message))


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class _Fields:
    """Expanded cron fields. Day matching is kept symbolic because L/W/# depend on the month."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: tuple[int, ...]
    dom_values: frozenset[int]
    dom_last: tuple[int, ...]  # offsets from the last day: L -> 0, L-3 -> 3
    dom_nearest_weekday: tuple[int, ...]  # nW
    dom_last_weekday: bool  # LW
    dow_values: frozenset[int]  # 0 = Sunday
    dow_last: tuple[int, ...]  # nL: last <weekday> of the month
    dow_nth: tuple[tuple[int, int], ...]  # (weekday, k) for weekday#k
    dom_star: bool
    dow_star: bool

    @property
    def all_days(self) -> bool:
        return self.dom_star and self.dow_star and len(self.dom_values) == 31 and len(
            self.dow_values
        ) == 7


def _err(message: str) -> ScheduleError:
    return ScheduleError("schedule.cron", message)


def _hash_int(hash_key: str, field_name: str) -> int:
    digest = hashlib.sha256(f"raftcron-H\x00{hash_key}\x00{field_name}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


class _FieldParser:
    def __init__(self, name: str, lo: int, hi: int, names: tuple[str, ...] = (),
                 names_base: int = 0, hash_range: tuple[int, int] | None = None) -> None:
        self.name = name
        self.lo = lo
        self.hi = hi
        self.names = {n: i + names_base for i, n in enumerate(names)}
        # Range for H and '*'; day of week uses 0-6 (7 is only an alias of 0),
        # day of month hashes into 1-28 so every month has the day.
        self.star_range = (lo, 6) if name == "day-of-week" else (lo, hi)
        self.hash_range = hash_range or self.star_range

    def value(self, token: str) -> int:
        if token.isdigit():
            v = int(token)
        else:
            up = token.upper()
            if up not in self.names:
                raise _err(f"bad {self.name} value {token!r}")
            v = self.names[up]
        if not self.lo <= v <= self.hi:
            raise _err(f"{self.name} value {v} out of range {self.lo}-{self.hi}")
        return v

    def step(self, token: str | None, span: int) -> int:
        if token is None:
            return 1
        n = int(token)
        if n < 1 or n > span:
            raise _err(f"{self.name} step {n} out of range 1-{span}")
        return n

    def hashed(self, item: str, hash_key: str) -> str | None:
        """This job's concrete spelling of an ``H`` item (``H`` -> ``"17"``, ``H/15`` ->
        ``"7-59/15"``), or None when ``item`` is not an ``H`` item.

        ``H`` values come from a hash of (job id, field name), so every ``H`` item of a
        field shares one hash; a step starts at the hash modulo the step."""
        plan = self._hash_plan(item)
        if plan is None:
            return None
        lo, hi, step = plan
        h = _hash_int(hash_key, self.name)
        if step is None:
            return str(lo + h % (hi - lo + 1))
        return f"{lo + h % step}-{hi}/{step}"

    @lru_cache(maxsize=1024)  # noqa: B019 - the parsers are module constants
    def _hash_plan(self, item: str) -> tuple[int, int, int | None] | None:
        """(lo, hi, step) of an ``H`` item, validated; None for any other item."""
        m = _RE_HASH.fullmatch(item)
        if not m:
            return None
        if m.group(1) is not None:
            lo, hi = self.value(m.group(1)), self.value(m.group(2))
            if lo > hi:
                raise _err(f"{self.name} hash range H({lo}-{hi}) is reversed")
        else:
            lo, hi = self.hash_range
        step = None if m.group(3) is None else self.step(m.group(3), hi - lo + 1)
        return lo, hi, step

    def item(self, item: str) -> list[int]:
        m = _RE_STAR.fullmatch(item)
        if m:
            if item[0] == "?" and self.name not in ("day-of-month", "day-of-week"):
                raise _err(f"'?' is not allowed in the {self.name} field")
            lo, hi = self.star_range
            return list(range(lo, hi + 1, self.step(m.group(1), hi - lo + 1)))
        m = _RE_RANGE.fullmatch(item)
        if not m:
            raise _err(f"bad {self.name} item {item!r}")
        start = self.value(m.group(1))
        if m.group(2) is not None:
            end = self.value(m.group(2))
            if start > end:
                raise _err(f"{self.name} range {item!r} is reversed")
        elif m.group(3) is not None:
            end = self.star_range[1] if start <= self.star_range[1] else self.hi
        else:
            end = start
        return list(range(start, end + 1, self.step(m.group(3), self.hi - self.lo + 1)))


_SECOND = _FieldParser("second", 0, 59)
_MINUTE = _FieldParser("minute", 0, 59)
_HOUR = _FieldParser("hour", 0, 23)
_DOM = _FieldParser("day-of-month", 1, 31, hash_range=(1, 28))
_MONTH = _FieldParser("month", 1, 12, _MONTH_NAMES, names_base=1)
_DOW = _FieldParser("day-of-week", 0, 7, _DOW_NAMES)
_FIELD_PARSERS = (_SECOND, _MINUTE, _HOUR, _DOM, _MONTH, _DOW)


def _simple_field(parser: _FieldParser, text: str) -> tuple[int, ...]:
    values: set[int] = set()
    for item in text.split(","):
        values.update(parser.item(item))
    return tuple(sorted(values))


def _parse_dom(text: str) -> tuple[frozenset[int], tuple[int, ...], tuple[int, ...], bool]:
    values: set[int] = set()
    last: list[int] = []
    nearest: list[int] = []
    last_weekday = False
    for item in text.split(","):
        up = item.upper()
        if up == "LW":
            last_weekday = True
            continue
        m = _RE_DOM_LAST.fullmatch(up)
        if m:
            off = int(m.group(1) or 0)
            if off > 30:
                raise _err(f"day-of-month offset in {item!r} out of range 0-30")
            last.append(off)
            continue
        m = _RE_DOM_W.fullmatch(up)
        if m:
            nearest.append(_DOM.value(m.group(1)))
            continue
        values.update(_DOM.item(item))
    return (frozenset(values), tuple(sorted(set(last))), tuple(sorted(set(nearest))),
            last_weekday)


def _parse_dow(text: str
               ) -> tuple[frozenset[int], tuple[int, ...], tuple[tuple[int, int], ...]]:
    values: set[int] = set()
    last: list[int] = []
    nth: list[tuple[int, int]] = []
    for item in text.split(","):
        m = _RE_DOW_LAST.fullmatch(item)
        if m:
            last.append(_DOW.value(m.group(1)) % 7)
            continue
        m = _RE_DOW_NTH.fullmatch(item)
        if m:
            k = int(m.group(2))
            if not 1 <= k <= 5:
                raise _err(f"day-of-week occurrence in {item!r} out of range 1-5")
            nth.append((_DOW.value(m.group(1)) % 7, k))
            continue
        values.update(v % 7 for v in _DOW.item(item))
    return frozenset(values), tuple(sorted(set(last))), tuple(sorted(set(nth)))


@lru_cache(maxsize=8192)
def _expand(sec: str, minute: str, hour: str, dom: str, mon: str, dow: str) -> _Fields:
    """The expansion of six concrete (``H``-free) fields. Cached: a fleet of jobs shares a
    few distinct field texts, so a new leader loading 100,000 jobs expands each once."""
    dom_values, dom_last, dom_near, dom_lw = _parse_dom(dom)
    dow_values, dow_last, dow_nth = _parse_dow(dow)
    return _Fields(
        seconds=_simple_field(_SECOND, sec),
        minutes=_simple_field(_MINUTE, minute),
        hours=_simple_field(_HOUR, hour),
        months=_simple_field(_MONTH, mon),
        dom_values=dom_values,
        dom_last=dom_last,
        dom_nearest_weekday=dom_near,
        dom_last_weekday=dom_lw,
        dow_values=dow_values,
        dow_last=dow_last,
        dow_nth=dow_nth,
        dom_star=dom[0] in "*?",
        dow_star=dow[0] in "*?",
    )


def _is_wildcard_time_field(text: str) -> bool:
    """True for time fields that mean "repeatedly" rather than "at a fixed value".

    Vixie cron looks only at a leading ``*``; a hashed step over the whole range
    (``H/15``) is the hashed spelling of ``*/15`` and is treated the same way.
    """
    return text.startswith("*") or text.upper().startswith("H/")


@dataclass(frozen=True)
class _Shape:
    """A cron expression split into six fields (seconds first), before ``H`` is resolved."""

    parts: tuple[str, str, str, str, str, str]
    has_seconds: bool
    is_fixed_time: bool
    hashed: tuple[int, ...]  # indexes of the fields that contain an H item


@lru_cache(maxsize=4096)
def _shape(cron: str) -> _Shape:
    if len(cron) > MAX_CRON_LENGTH:
        raise _err(f"expression longer than {MAX_CRON_LENGTH} characters")
    text = cron.strip()
    if not text:
        raise _err("expression is empty")
    if text.startswith("@"):
        macro = _MACROS.get(text.lower())
        if macro is None:
            raise _err(f"unknown macro {text!r}")
        text = macro
    parts = text.split()
    if len(parts) == 5:
        has_seconds = False
        parts.insert(0, "0")
    elif len(parts) == 6:
        has_seconds = True
    else:
        raise _err(f"expected 5 fields (or 6 with seconds), got {len(parts)}")
    time_fields = parts[1:3] + (parts[:1] if has_seconds else [])
    fixed = not any(_is_wildcard_time_field(t) for t in time_fields)
    hashed = tuple(i for i, part in enumerate(parts) if "H" in part)
    sec, minute, hour, dom, mon, dow = parts
    return _Shape((sec, minute, hour, dom, mon, dow), has_seconds, fixed, hashed)


def _resolve_hashes(shape: _Shape, hash_key: str) -> tuple[str, str, str, str, str, str]:
    """The six fields with this job's ``H`` items replaced by concrete values."""
    if not shape.hashed:
        return shape.parts
    parts = list(shape.parts)
    for i in shape.hashed:
        parser = _FIELD_PARSERS[i]
        parts[i] = ",".join(parser.hashed(item, hash_key) or item
                            for item in parts[i].split(","))
    sec, minute, hour, dom, mon, dow = parts
    return sec, minute, hour, dom, mon, dow


# --------------------------------------------------------------------------- calendar


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


_ALL_DAYS = {n: tuple(range(1, n + 1)) for n in (28, 29, 30, 31)}


def _month_days(f: _Fields, year: int, month: int) -> tuple[int, ...]:
    """Days of ``year``-``month`` on which the day fields match (Vixie DOM/DOW rules)."""
    ndays = _days_in_month(year, month)
    if f.all_days:
        return _ALL_DAYS[ndays]
    first_ord = date(year, month, 1).toordinal()

    def wd(day: int) -> int:  # 0 = Sunday, like cron
        return (first_ord + day - 1) % 7

    dom = {d for d in f.dom_values if d <= ndays}
    for off in f.dom_last:
        if ndays - off >= 1:
            dom.add(ndays - off)
    for n in f.dom_nearest_weekday:
        if n > ndays:
            continue
        w = wd(n)
        if w == 6:
            dom.add(n - 1 if n > 1 else n + 2)
        elif w == 0:
            dom.add(n + 1 if n < ndays else n - 2)
        else:
            dom.add(n)
    if f.dom_last_weekday:
        w = wd(ndays)
        dom.add(ndays - (1 if w == 6 else 2 if w == 0 else 0))

    dow = {d for d in range(1, ndays + 1) if wd(d) in f.dow_values}
    for x in f.dow_last:
        dow.add(ndays - (wd(ndays) - x) % 7)
    for x, k in f.dow_nth:
        d = 1 + (x - wd(1)) % 7 + 7 * (k - 1)
        if d <= ndays:
            dow.add(d)

    days = dom & dow if (f.dom_star or f.dow_star) else dom | dow
    return tuple(sorted(days))


# --------------------------------------------------------------------------- zones


def _year_start(year: int) -> int:
    return (date(year, 1, 1).toordinal() - _EPOCH_ORDINAL) * _DAY


def _year_of(ts: int) -> int:
    return date.fromordinal(ts // _DAY + _EPOCH_ORDINAL).year


def _offset_at(tz: ZoneInfo, ts: int) -> int:
    off = datetime.fromtimestamp(ts, tz).utcoffset()
    return int(off.total_seconds()) if off is not None else 0


_Transition = tuple[int, int, int]  # (instant, offset before, offset after)
_SAMPLE_STEP = 6 * 3600


@lru_cache(maxsize=8192)
def _year_transitions(key: str, year: int) -> tuple[_Transition, ...]:
    """Offset transitions T with year_start(year) < T <= year_start(year + 1).

    Offsets are sampled every 6 hours and each change is bisected to the exact second;
    this assumes two transitions of one zone are never less than 6 hours apart.
    """
    tz = ZoneInfo(key)
    start, end = _year_start(year), _year_start(year + 1)
    out: list[_Transition] = []
    a, off_a = start, _offset_at(tz, start)
    while a < end:
        b = min(a + _SAMPLE_STEP, end)
        off_b = _offset_at(tz, b)
        if off_b != off_a:
            lo, hi = a, b
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _offset_at(tz, mid) == off_a:
                    lo = mid
                else:
                    hi = mid
            out.append((hi, off_a, off_b))
        a, off_a = b, off_b
    return tuple(out)


def _ts_key(t: _Transition) -> int:
    return t[0]


def _prev_transition(key: str, ts: int) -> _Transition | None:
    """The last transition at or before ``ts`` (looking back at most about a year)."""
    year = _year_of(ts)
    for y in (year, year - 1):
        table = _year_transitions(key, y)
        i = bisect_right(table, ts, key=_ts_key)
        if i:
            return table[i - 1]
    return None


def _first_transition_in(key: str, lo: int, hi: int) -> _Transition | None:
    """The first transition T with lo < T <= hi."""
    for y in range(_year_of(lo) - 1, _year_of(hi) + 1):
        table = _year_transitions(key, y)
        i = bisect_right(table, lo, key=_ts_key)
        if i < len(table):
            t = table[i]
            return t if t[0] <= hi else None
    return None


def _load_zone(timezone: str) -> tuple[ZoneInfo, int | None]:
    """Return the zone and, for zones with a constant offset, that offset."""
    if not isinstance(timezone, str) or not timezone or len(timezone) > 128:
        raise ScheduleError("schedule.timezone", "must be a non-empty IANA zone name")
    return _load_named_zone(timezone)


@lru_cache(maxsize=1024)
def _load_named_zone(timezone: str) -> tuple[ZoneInfo, int | None]:
    if timezone in _REJECTED_ZONES:
        raise ScheduleError("schedule.timezone", f"{timezone!r} is host-dependent; "
                            "use an IANA zone name")
    try:
        tz = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ScheduleError("schedule.timezone", f"unknown IANA time zone {timezone!r}") from None
    fixed = None
    if _FIXED_ZONE_RE.fullmatch(timezone):
        fixed = _offset_at(tz, 0)
    return tz, fixed


# --------------------------------------------------------------------------- schedule


@dataclass(frozen=True)
class CronSchedule:
    """A compiled, validated cron schedule. Build it with :func:`compile_schedule`."""

    cron: str
    timezone: str
    dst_gap: str
    dst_fold: str
    has_seconds: bool
    is_fixed_time: bool
    _fields: _Fields = field(repr=False)
    _fixed_offset: int | None = field(repr=False, compare=False)
    _tz: ZoneInfo = field(repr=False, compare=False)
    _day_cache: dict[tuple[int, int], tuple[int, ...]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    # ----------------------------------------------------------------- local search

    def _days(self, year: int, month: int) -> tuple[int, ...]:
        cache = self._day_cache
        days = cache.get((year, month))
        if days is None:
            if len(cache) > 1024:
                cache.clear()
            days = cache[(year, month)] = _month_days(self._fields, year, month)
        return days

    def _local_next(self, local: int, year_limit: int) -> int | None:
        """Smallest matching naive local time (epoch-style seconds) >= ``local``."""
        days_since, secs = divmod(local, _DAY)
        d0 = date.fromordinal(days_since + _EPOCH_ORDINAL)
        y, mo, d = d0.year, d0.month, d0.day
        h, rem = divmod(secs, 3600)
        mi, s = divmod(rem, 60)
        f = self._fields
        months, hours, minutes, seconds = f.months, f.hours, f.minutes, f.seconds
        while y <= year_limit:
            i = bisect_left(months, mo)
            if i == len(months):
                y, mo, d, h, mi, s = y + 1, 1, 1, 0, 0, 0
                continue
            if months[i] != mo:
                mo, d, h, mi, s = months[i], 1, 0, 0, 0
            days = self._days(y, mo)
            j = bisect_left(days, d)
            if j == len(days):
                mo, d, h, mi, s = mo + 1, 1, 0, 0, 0
                continue
            if days[j] != d:
                d, h, mi, s = days[j], 0, 0, 0
            k = bisect_left(hours, h)
            if k == len(hours):
                d, h, mi, s = d + 1, 0, 0, 0
                continue
            if hours[k] != h:
                h, mi, s = hours[k], 0, 0
            m = bisect_left(minutes, mi)
            if m == len(minutes):
                h, mi, s = h + 1, 0, 0
                continue
            if minutes[m] != mi:
                mi, s = minutes[m], 0
            n = bisect_left(seconds, s)
            if n == len(seconds):
                mi, s = mi + 1, 0
                continue
            return ((date(y, mo, d).toordinal() - _EPOCH_ORDINAL) * _DAY
                    + h * 3600 + mi * 60 + seconds[n])
        return None

    # ----------------------------------------------------------------- public

    def next_after(self, ts: int) -> int | None:
        """Smallest fire instant strictly greater than ``ts`` (UTC epoch seconds).

        Returns None when the schedule does not fire within about ten years of ``ts``.
        """
        u = int(ts) + 1
        year = _year_of(u)
        if year >= _MAX_YEAR or year < 2:
            return None
        year_limit = year + HORIZON_YEARS
        off = self._fixed_offset
        if off is not None:
            c = self._local_next(u + off, year_limit)
            return None if c is None else c - off

        key = self.timezone
        off = _offset_at(self._tz, u)
        prev = _prev_transition(key, u)
        shift = self.dst_gap == "shift"
        once = self.dst_fold == "once"
        while True:
            lo_local = u + off
            if prev is not None:
                t, before, after = prev
                if after > before:
                    if shift and t == u:
                        c = self._local_next(t + before, year_limit)
                        if c is not None and c < t + after:
                            return t
                elif once:
                    lo_local = max(lo_local, t + before)
            c = self._local_next(lo_local, year_limit)
            if c is None:
                return None
            cand = c - off
            nxt = _first_transition_in(key, u, cand)
            if nxt is None:
                return cand
            prev = nxt
            u, off = nxt[0], nxt[2]

    def seconds_field(self) -> tuple[int, ...]:
        """The seconds (0-59, ascending) a matching minute fires at."""
        return self._fields.seconds

    def iter_between(self, after: int, until: int) -> Iterator[int]:
        """Fire instants ``t`` with ``after < t <= until``, strictly ascending."""
        t = self.next_after(after)
        while t is not None and t <= until:
            yield t
            t = self.next_after(t)

    def describe(self) -> str:
        """The schedule in plain English, e.g. "at 09:00 on Monday–Friday (Europe/Berlin)"."""
        try:
            return _describe(self)
        except Exception:  # pragma: no cover - best effort for a status page
            return f"cron {self.cron!r} ({self.timezone})"


def compile_schedule(
    cron: str,
    timezone: str = "UTC",
    dst_gap: str = "auto",
    dst_fold: str = "auto",
    *,
    hash_key: str = "",
) -> CronSchedule:
    """Validate and compile a schedule; raises :class:`ScheduleError` naming the bad field.

    ``hash_key`` (the job id) seeds the ``H`` values. Equal schedules share one object
    (and its day cache): a fleet of 100,000 ``H H * * *`` jobs compiles to at most 1,440
    distinct schedules.
    """
    for name, value in (("cron", cron), ("timezone", timezone), ("dst_gap", dst_gap),
                        ("dst_fold", dst_fold)):
        if not isinstance(value, str):
            raise ScheduleError(f"schedule.{name}", "must be a string")
    if not isinstance(hash_key, str):
        raise TypeError("hash_key must be a string")
    shape = _shape(cron)
    return _compile(_resolve_hashes(shape, hash_key), shape.has_seconds,
                    shape.is_fixed_time, cron, timezone, dst_gap, dst_fold)


@lru_cache(maxsize=8192)
def _compile(parts: tuple[str, str, str, str, str, str], has_seconds: bool, fixed: bool,
             cron: str, timezone: str, dst_gap: str, dst_fold: str) -> CronSchedule:
    """Keyed by the resolved fields, so every job whose ``H`` values agree (and every job
    of a schedule without ``H``) gets the same object."""
    fields = _expand(*parts)
    if not _fires_ever(fields):
        raise _err("never fires")
    tz, fixed_offset = _load_zone(timezone)
    if dst_gap not in _GAP_POLICIES:
        raise ScheduleError("schedule.dst_gap", f"must be one of {', '.join(_GAP_POLICIES)}")
    if dst_fold not in _FOLD_POLICIES:
        raise ScheduleError("schedule.dst_fold",
                            f"must be one of {', '.join(_FOLD_POLICIES)}")
    if dst_gap == "auto":
        dst_gap = "shift" if fixed else "skip"
    if dst_fold == "auto":
        dst_fold = "once" if fixed else "both"
    return CronSchedule(
        cron=cron,
        timezone=timezone,
        dst_gap=dst_gap,
        dst_fold=dst_fold,
        has_seconds=has_seconds,
        is_fixed_time=fixed,
        _fields=fields,
        _fixed_offset=fixed_offset,
        _tz=tz,
    )


@lru_cache(maxsize=4096)
def _fires_ever(f: _Fields) -> bool:
    """Whether some day matches; 2000-2027 covers every weekday/leap-year combination."""
    return any(_month_days(f, y, m) for y in range(2000, 2028) for m in f.months)


# --------------------------------------------------------------------------- jitter


def jitter_offset_ms(job_id: str, scheduled_for: int, jitter_s: int) -> int:
    """Deterministic offset in ``[0, jitter_s * 1000)`` ms for one (job, instant) pair."""
    if jitter_s < 0:
        raise ValueError("jitter_s must be >= 0")
    if jitter_s == 0:
        return 0
    digest = hashlib.sha256(f"raftcron-jitter\x00{job_id}\x00{int(scheduled_for)}".encode())
    return int.from_bytes(digest.digest()[:8], "big") % (jitter_s * 1000)


# --------------------------------------------------------------------------- datetime helpers


def to_utc_iso(ts: int) -> str:
    """``1772953200`` -> ``"2026-03-08T07:00:00Z"``."""
    return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_local_iso(ts: int, tz: str) -> str:
    """The instant as local ISO 8601 with offset, e.g. ``"2026-03-08T03:00:00-04:00"``."""
    zone, _ = _load_zone(tz)
    return datetime.fromtimestamp(int(ts), zone).isoformat()


_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_instant(text: str) -> int:
    """Parse ISO 8601 with ``Z`` or an explicit offset into epoch seconds (fractions floored).

    Raises ValueError for anything else, including times without an offset.
    """
    if not isinstance(text, str) or not 0 < len(text) <= 64:
        raise ValueError(f"not an ISO 8601 instant: {text!r}")
    s = text.strip()
    if s[-1:] in ("z", "Z"):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(f"not an ISO 8601 instant: {text!r}") from None
    if dt.tzinfo is None or dt.utcoffset() is None or "T" not in s.upper():
        raise ValueError(f"instant needs a 'Z' or UTC offset: {text!r}")
    return (dt - _UNIX_EPOCH) // timedelta(seconds=1)


# --------------------------------------------------------------------------- describe


def _join_words(words: list[str]) -> str:
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _runs(values: tuple[int, ...] | list[int], fmt: dict[int, str] | None = None) -> str:
    """[1,2,3,4,5] -> "1–5"; [1,3] -> "1 and 3" (with optional value names)."""
    def name(v: int) -> str:
        return fmt[v] if fmt else str(v)

    vals = sorted(values)
    parts: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{name(vals[i])}–{name(vals[j])}")
        else:
            parts.extend(name(v) for v in vals[i:j + 1])
        i = j + 1
    return _join_words(parts)


def _step_of(values: tuple[int, ...], lo: int, hi: int) -> int | None:
    """n if values == range(lo, hi+1, n) with n > 1."""
    if len(values) < 2 or values[0] != lo:
        return None
    n = values[1] - values[0]
    return n if n > 1 and values == tuple(range(lo, hi + 1, n)) else None


def _describe_time(s: CronSchedule) -> str:
    f = s._fields
    secs, mins, hours = f.seconds, f.minutes, f.hours
    show_secs = s.has_seconds and secs != (0,)
    count = len(secs) * len(mins) * len(hours)
    if count <= 4 and len(hours) < 24:
        times = [
            f"{h:02d}:{m:02d}" + (f":{x:02d}" if show_secs else "")
            for h in hours for m in mins for x in secs
        ]
        return "at " + _join_words(times)
    parts: list[str] = []
    if s.has_seconds:
        if len(secs) == 60:
            parts.append("every second")
        elif (n := _step_of(secs, 0, 59)) is not None:
            parts.append(f"every {n} seconds")
        else:
            parts.append(f"at second {_runs(secs)}")
    all_minutes = len(mins) == 60
    if all_minutes:
        if not parts:
            parts.append("every minute")
    elif (n := _step_of(mins, 0, 59)) is not None:
        parts.append(f"every {n} minutes")
    elif len(hours) == 24 and not s.has_seconds:
        parts.append("every hour at minute " + _runs(mins))
    else:
        parts.append("at minute " + _runs(mins))
    if len(hours) != 24:
        if (n := _step_of(hours, 0, 23)) is not None:
            parts.append(f"of every {n} hours")
        else:
            parts.append("during hour " + _runs(hours))
    return " ".join(parts)


def _describe_days(f: _Fields) -> str:
    if f.all_days:
        return ""
    dow_names = dict(enumerate(_DOW_WORDS))
    dom_parts: list[str] = []
    if f.dom_values and len(f.dom_values) < 31:
        dom_parts.append("day " + _runs(tuple(f.dom_values)) + " of the month")
    for off in f.dom_last:
        dom_parts.append("the last day of the month" if off == 0
                         else f"{off} days before the last day of the month")
    for n in f.dom_nearest_weekday:
        dom_parts.append(f"the weekday nearest day {n}")
    if f.dom_last_weekday:
        dom_parts.append("the last weekday of the month")
    dow_parts: list[str] = []
    if f.dow_values and len(f.dow_values) < 7:
        dow_parts.append(_runs(tuple(f.dow_values), dow_names))
    ordinals = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}
    for x in f.dow_last:
        dow_parts.append(f"the last {_DOW_WORDS[x]}")
    for x, k in f.dow_nth:
        dow_parts.append(f"the {ordinals[k]} {_DOW_WORDS[x]}")
    dom_text = " or ".join(dom_parts)
    dow_text = " or ".join(dow_parts)
    if dom_text and dow_text:
        if f.dom_star or f.dow_star:
            return f"on {dom_text} if it is {dow_text}"
        return f"on {dom_text} or {dow_text}"
    return "on " + (dom_text or dow_text)


def _describe(s: CronSchedule) -> str:
    f = s._fields
    words = [_describe_time(s)]
    days = _describe_days(f)
    if days:
        words.append(days)
    if len(f.months) < 12:
        words.append("in " + _runs(f.months, dict(enumerate(_MONTH_WORDS, start=1))))
    return f"{' '.join(words)} ({s.timezone})"
