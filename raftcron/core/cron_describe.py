"""The plain-English reading of a compiled cron schedule ("at 09:00 on Monday–Friday
(Europe/Berlin)"), for status pages and the API.

It reads the expanded fields only, never the schedule object, so the schedule module can
call it without this module importing that one.
"""

from __future__ import annotations

from raftcron.core.cron_fields import _Fields

_MONTH_WORDS = ("January", "February", "March", "April", "May", "June", "July",
                "August", "September", "October", "November", "December")
_DOW_WORDS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")


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


def _describe_time(f: _Fields, has_seconds: bool) -> str:
    secs, mins, hours = f.seconds, f.minutes, f.hours
    show_secs = has_seconds and secs != (0,)
    count = len(secs) * len(mins) * len(hours)
    if count <= 4 and len(hours) < 24:
        times = [
            f"{h:02d}:{m:02d}" + (f":{x:02d}" if show_secs else "")
            for h in hours for m in mins for x in secs
        ]
        return "at " + _join_words(times)
    parts: list[str] = []
    if has_seconds:
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
    elif len(hours) == 24 and not has_seconds:
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


def describe_fields(f: _Fields, has_seconds: bool, timezone: str) -> str:
    """The schedule of these fields in plain English (:meth:`CronSchedule.describe`)."""
    words = [_describe_time(f, has_seconds)]
    days = _describe_days(f)
    if days:
        words.append(days)
    if len(f.months) < 12:
        words.append("in " + _runs(f.months, dict(enumerate(_MONTH_WORDS, start=1))))
    return f"{' '.join(words)} ({timezone})"
