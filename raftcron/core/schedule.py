"""Cron schedule compilation and fire-time computation.

This module is pure: it performs no I/O of its own (zone data is loaded by ``zoneinfo``),
never reads the clock and uses no randomness. All instants are ``int`` UTC epoch seconds.

The engine is three modules; this one is its interface and re-exports the others' names:

* :mod:`raftcron.core.cron_fields`: the field grammar, ``H``, and croniter's expansion of
  field items (the first part below, "What croniter does, and what is ours");
* this module: the compiled :class:`CronSchedule`, its month calendar, the local-time
  search and the DST mapping (the second part, "How fire times are found"), jitter and
  the instant helpers;
* :mod:`raftcron.core.cron_describe`: the plain-English ``describe``.

What croniter does, and what is ours
------------------------------------
croniter (7.x) expands every plain field item (``*``, values, ranges, steps, lists) into
its values: :func:`_croniter_values`. Ours, and why:

* **The grammar check in front of it** (:meth:`_FieldParser.spell`), which also turns
  month and weekday names into numbers (the range checks need them). croniter accepts what
  cron refuses: ``5-1`` as a wrap-around, ``*/61``, ``0005``; it widens an equal range
  (``5-5``) to the whole field, and reads ``7/2`` in day-of-week as ``0,2,4,6`` (cron:
  Sunday only). Such items are refused, or respelled so croniter means what cron means.
  Our checks also write the messages: croniter's name neither the field nor the value
  (``[60 * * * *] is not acceptable, out of range``) and can hold a traceback.
* **Field splitting and macros** (:func:`_shape`): seconds come first (croniter's come
  last), whitespace is any Unicode whitespace as before, and ``@reboot`` gets a message.
* **``H``** (:func:`_hash_int`): croniter hashes ``crc32(job id) >> field index``; ours is
  sha256 of (job id, field name), so existing jobs keep their hashed instants, and ``H``
  in day-of-month stays within 1-28. ``H`` items are resolved to concrete text first.
* **The day-of-month and day-of-week specials** ``L``, ``L-n``, ``nW``, ``LW``, ``nL``,
  ``n#k`` and their month calendar (:func:`_month_days`): croniter lacks ``L-n``, ``LW``
  and the ``nL`` spelling, refuses ``W`` in a list and ``#`` beside plain weekdays.
* **The Vixie day rule** (both day fields restricted: either matches; either starting
  with ``*``: both must), "never fires" (croniter only checks a day past a month's
  length), and **the whole search and DST mapping** below: croniter's own iteration maps
  a nonexistent local time to the next existing one and picks one pass of a fold, with
  no ``dst_gap``/``dst_fold`` policy, and costs about 8 times as much per fire on the hot
  path (the planner and the herd chart expand fires for 33,000+ jobs):
  ``bench/cron_engine.py``, ``bench/results/cron_engine.txt``.

croniter only ever sees digits, ``*``, ``-``, ``/`` and ``,``: names are numbers by then
and ``H`` is resolved, so its random ``R`` items (and anything else that is not a pure
function of the text) cannot reach the state machine's ``apply``.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from raftcron.core.cron_describe import describe_fields

# This module stays the engine's interface: MAX_CRON_LENGTH and ScheduleError are imported
# from here, and the tests and benchmarks reach into the parsing caches through it
# (`schedule._shape`, `schedule._croniter_values`, `_FieldParser._hash_plan`, ...).
from raftcron.core.cron_fields import MAX_CRON_LENGTH as MAX_CRON_LENGTH
from raftcron.core.cron_fields import ScheduleError, _err, _expand, _Fields, _resolve_hashes, _shape
from raftcron.core.cron_fields import _croniter_values as _croniter_values
from raftcron.core.cron_fields import _FieldParser as _FieldParser

__all__ = [
    "CronSchedule",
    "ScheduleError",
    "compile_schedule",
    "jitter_offset_ms",
    "parse_instant",
    "to_local_iso",
    "to_utc_iso",
]

HORIZON_YEARS = 10

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DAY = 86_400
_MAX_YEAR = 9_000

_GAP_POLICIES = ("auto", "shift", "skip")
_FOLD_POLICIES = ("auto", "once", "both")

# Zone keys whose offset never changes; they take the fixed-offset fast path.
_FIXED_ZONE_RE = re.compile(
    r"(Etc/)?(UTC|UCT|GMT|GMT0|GMT[+-]0|Greenwich|Universal|Zulu)|Etc/GMT[+-]\d{1,2}"
)
# Host-dependent aliases: resolving them would make schedules differ between machines.
_REJECTED_ZONES = frozenset({"localtime", "posixrules"})


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


def instants_between(next_after: Callable[[int], int | None], after: int, until: int
                     ) -> Iterator[int]:
    """The instants ``t`` with ``after < t <= until`` that ``next_after`` steps through,
    ascending: every schedule kind that knows its next instant lists a range this way."""
    t = next_after(after)
    while t is not None and t <= until:
        yield t
        t = next_after(t)


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
    # The last answer of `next_after` with the range it holds for: next_after(t) is `nxt`
    # for every t in [lo, nxt). A fleet's equal schedules share one object and mostly ask
    # from the same watermark, so a new leader loading a million jobs computes each
    # distinct answer once. One tuple, replaced whole, so threads may share it.
    _last_answer: list[tuple[int, int]] = field(
        default_factory=lambda: [(0, 0)], repr=False, compare=False, hash=False
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
        ts = int(ts)
        lo, nxt = self._last_answer[0]
        if lo <= ts < nxt:
            return nxt
        found = self._next_after(ts)
        if found is not None:
            self._last_answer[0] = (ts, found)
        return found

    def _next_after(self, ts: int) -> int | None:
        u = ts + 1
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
        return instants_between(self.next_after, after, until)

    def describe(self) -> str:
        """The schedule in plain English, e.g. "at 09:00 on Monday–Friday (Europe/Berlin)"."""
        try:
            return describe_fields(self._fields, self.has_seconds, self.timezone)
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


def hash_resolution(cron: str, hash_key: str) -> tuple[str, str, str, str, str, str]:
    """The six fields of ``cron`` with the ``H`` items of job ``hash_key`` resolved: two
    jobs whose resolutions are equal compile to the same schedule."""
    return _resolve_hashes(_shape(cron), hash_key)


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
