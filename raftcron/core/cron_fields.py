"""The cron field grammar: splitting an expression into fields, macros, ``H`` hashing,
the day-of-month and day-of-week specials, and the croniter-backed expansion of plain
field items into their values.

Pure, like the rest of the engine. Why each piece is ours rather than croniter's is told
item by item in the docstring of :mod:`raftcron.core.schedule` ("What croniter does, and
what is ours"), which also re-exports the names defined here.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache

from croniter import CroniterError, croniter

MAX_CRON_LENGTH = 256

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

    def spell(self, item: str) -> str:
        """Validate one plain item (``*``, ``a``, ``a-b``, ``a/n``, ``a-b/n``; values may be
        names) and return its numeric spelling for croniter, which expands it.

        These checks are stricter than croniter's, which accepts reversed ranges as
        wrap-arounds, steps wider than the field, numbers of any length, and expands an
        equal range (``5-5``) to the whole field; here each of those is either refused
        (with the field and the reason) or respelled so that croniter means what cron
        means."""
        m = _RE_STAR.fullmatch(item)
        if m:
            if item[0] == "?" and self.name not in ("day-of-month", "day-of-week"):
                raise _err(f"'?' is not allowed in the {self.name} field")
            lo, hi = self.star_range
            if m.group(1) is None:
                return "*"
            return f"*/{self.step(m.group(1), hi - lo + 1)}"
        m = _RE_RANGE.fullmatch(item)
        if not m:
            raise _err(f"bad {self.name} item {item!r}")
        start = self.value(m.group(1))
        if m.group(2) is not None:
            end = self.value(m.group(2))
            if start > end:
                raise _err(f"{self.name} range {item!r} is reversed")
        else:
            end = None
        step = self.step(m.group(3), self.hi - self.lo + 1)
        if end is None and m.group(3) is not None and start <= self.star_range[1]:
            return f"{start}/{step}"  # croniter reads a/n as a-<field max>/n, like cron
        if end is None or end == start:
            # A single value; also 7/n in day-of-week (nothing follows 7, Sunday again),
            # and an equal range, which croniter would widen to the whole field.
            return str(start)
        return f"{start}-{end}" if step == 1 else f"{start}-{end}/{step}"

    def expand(self, items: list[str]) -> set[int]:
        """The values of validated plain items (see :meth:`spell`), expanded by croniter."""
        return set(_croniter_values(self.name, ",".join(items))) if items else set()


# croniter's own field order (seconds last when there are six fields).
_CRONITER_POSITION = {"minute": 0, "hour": 1, "day-of-month": 2, "month": 3,
                      "day-of-week": 4, "second": 5}


@lru_cache(maxsize=4096)
def _croniter_values(field_name: str, text: str) -> tuple[int, ...]:
    """croniter's expansion of one field whose items :meth:`_FieldParser.spell` made.

    The field is placed in an otherwise all-``*`` six-field expression; croniter answers
    ``'*'`` for a field that lists every value, which is its whole range here. Any
    croniter rejection of a spelling our checks accepted is reported as a bad field (it
    would be a disagreement between the two, which the tests rule out): its exception
    text, which can hold a traceback, is never shown."""
    position = _CRONITER_POSITION[field_name]
    fields = ["*"] * 6
    fields[position] = text
    try:
        expanded, _ = croniter.expand(" ".join(fields))
    except (CroniterError, ValueError, TypeError):
        raise _err(f"bad {field_name} field {text!r}") from None
    values = expanded[position]
    if "*" in values:  # alone, or beside values when a list holds '*' ('1,*')
        lo, hi = croniter.RANGES[position]
        return tuple(range(lo, hi + 1))
    return tuple(sorted(int(v) for v in values))


_SECOND = _FieldParser("second", 0, 59)
_MINUTE = _FieldParser("minute", 0, 59)
_HOUR = _FieldParser("hour", 0, 23)
_DOM = _FieldParser("day-of-month", 1, 31, hash_range=(1, 28))
_MONTH = _FieldParser("month", 1, 12, _MONTH_NAMES, names_base=1)
_DOW = _FieldParser("day-of-week", 0, 7, _DOW_NAMES)
_FIELD_PARSERS = (_SECOND, _MINUTE, _HOUR, _DOM, _MONTH, _DOW)


def _simple_field(parser: _FieldParser, text: str) -> tuple[int, ...]:
    return tuple(sorted(parser.expand([parser.spell(item) for item in text.split(",")])))


def _parse_dom(text: str) -> tuple[frozenset[int], tuple[int, ...], tuple[int, ...], bool]:
    plain: list[str] = []
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
        plain.append(_DOM.spell(item))
    return (frozenset(_DOM.expand(plain)), tuple(sorted(set(last))),
            tuple(sorted(set(nearest))), last_weekday)


def _parse_dow(text: str
               ) -> tuple[frozenset[int], tuple[int, ...], tuple[tuple[int, int], ...]]:
    plain: list[str] = []
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
        plain.append(_DOW.spell(item))
    values = frozenset(v % 7 for v in _DOW.expand(plain))
    return values, tuple(sorted(set(last))), tuple(sorted(set(nth)))


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
