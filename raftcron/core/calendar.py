"""Calendars: named, replicated sets of excluded instants (holidays, freezes, blackouts).

    PUT /v1/calendars/{name}
    {"timezone": "Europe/Berlin", "exclude": [
        {"start": "2026-12-24T00:00:00+01:00", "end": "2027-01-02T00:00:00+01:00"},
        {"cron": "* * 24-26 12 *"},        # every minute those days match, in the zone
        {"date": "2026-12-31"}]}           # the whole local day, in the zone

A job that lists a calendar has each of its fire instants inside an exclusion recorded
`skipped` with reason `calendar:<name>` (the leader decides it when it claims the instant
and the claim carries the decision; apply checks only that the job names that calendar).

`start`/`end` is the half-open window [start, end). `cron` matches an instant whose minute
(or, with six fields, whose second) the expression names in the calendar's zone. `date`
matches every instant of that local day. Pure: no clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from raftcron.core.errors import ValidationError
from raftcron.core.model import NAME_RE
from raftcron.core.schedule import CronSchedule, ScheduleError, compile_schedule
from raftcron.core.timefmt import ms_to_iso, parse_iso_ms

MAX_EXCLUSIONS = 200
SKIP_PREFIX = "calendar:"
_DATE_LEN = len("2026-12-25")


def skip_reason(name: str) -> str:
    """The reason an instant excluded by calendar `name` is recorded with."""
    return SKIP_PREFIX + name


@dataclass(frozen=True, slots=True)
class Calendar:
    """A validated calendar. `exclude` holds canonical entries: {"start_ms", "end_ms"},
    {"cron"} or {"date"}; that is what travels in commands and is stored."""

    name: str
    tenant: str
    timezone: str
    exclude: tuple[dict[str, Any], ...]

    def to_spec(self) -> dict[str, Any]:
        return {"name": self.name, "tenant": self.tenant, "timezone": self.timezone,
                "exclude": [dict(e) for e in self.exclude]}

    @staticmethod
    def from_spec(d: dict[str, Any]) -> Calendar:
        return Calendar(d["name"], d["tenant"], d["timezone"],
                        tuple(dict(e) for e in d["exclude"]))

    def to_api(self) -> dict[str, Any]:
        out = []
        for e in self.exclude:
            if "start_ms" in e:
                out.append({"start": ms_to_iso(e["start_ms"]), "end": ms_to_iso(e["end_ms"])})
            else:
                out.append(dict(e))
        return {"name": self.name, "tenant": self.tenant, "timezone": self.timezone,
                "exclude": out}

    def compiled(self) -> CompiledCalendar:
        return CompiledCalendar(self)


def _zone(value: Any) -> str:
    if not isinstance(value, str):
        raise ValidationError("timezone", "must be an IANA time zone name")
    try:
        compile_schedule("0 0 * * *", value)
    except ScheduleError as e:
        raise ValidationError("timezone", e.message) from None
    return value


def _exclusion(value: Any, i: int, tz: str, name: str) -> dict[str, Any]:
    where = f"exclude.{i}"
    shape = ('must be {"start": ..., "end": ...}, {"cron": "* * 24-26 12 *"} or '
             '{"date": "2026-12-25"}')
    if not isinstance(value, dict) or not value:
        raise ValidationError(where, shape)
    keys = set(value)
    if keys == {"start", "end"}:
        start = parse_iso_ms(value["start"], f"{where}.start")
        end = parse_iso_ms(value["end"], f"{where}.end")
        if end <= start:
            raise ValidationError(f"{where}.end", f"must be after {where}.start")
        return {"start_ms": start, "end_ms": end}
    if keys == {"cron"}:
        cron = value["cron"]
        if not isinstance(cron, str):
            raise ValidationError(f"{where}.cron", "must be a cron expression")
        try:
            compile_schedule(cron, tz, hash_key=name)
        except ScheduleError as e:
            raise ValidationError(f"{where}.cron", e.message) from None
        return {"cron": cron}
    if keys == {"date"}:
        text = value["date"]
        try:
            if not isinstance(text, str) or len(text) != _DATE_LEN:
                raise ValueError
            date.fromisoformat(text)
        except ValueError:
            raise ValidationError(f"{where}.date", "must be a date such as 2026-12-25") from None
        return {"date": text}
    unknown = sorted(keys - {"start", "end", "cron", "date"})
    if unknown:
        raise ValidationError(f"{where}.{unknown[0]}", "unknown field")
    if "start" in keys or "end" in keys:
        missing = "end" if "start" in keys else "start"
        raise ValidationError(f"{where}.{missing}", "is required with "
                              f"{'start' if missing == 'end' else 'end'}")
    raise ValidationError(where, shape + " (one form per entry)")


def parse_calendar(data: Any, name: str) -> Calendar:
    """A validated calendar from client JSON; errors name the field."""
    if not isinstance(data, dict):
        raise ValidationError("body", "must be a JSON object")
    unknown = sorted(set(data) - {"tenant", "timezone", "exclude"})
    if unknown:  # `name` too: the URL names the calendar
        raise ValidationError(unknown[0], "unknown field")
    tenant = data.get("tenant", "default")
    if not isinstance(tenant, str) or not NAME_RE.fullmatch(tenant):
        raise ValidationError("tenant", "must be 1-64 characters of A-Z a-z 0-9 . _ -")
    tz = _zone(data.get("timezone", "UTC"))
    exclude = data.get("exclude")
    if not isinstance(exclude, list) or len(exclude) > MAX_EXCLUSIONS:
        raise ValidationError("exclude", f"is required: a list of at most {MAX_EXCLUSIONS} "
                              "exclusions")
    return Calendar(name, tenant, tz,
                    tuple(_exclusion(e, i, tz, name) for i, e in enumerate(exclude)))


@dataclass(slots=True)
class CompiledCalendar:
    """Answers "is this instant excluded?" for one calendar."""

    calendar: Calendar
    _windows: list[tuple[int, int]] = field(default_factory=list)
    _crons: list[CronSchedule] = field(default_factory=list)
    _dates: set[str] = field(default_factory=set)
    _tz: ZoneInfo | None = None

    def __post_init__(self) -> None:
        cal = self.calendar
        self._tz = ZoneInfo(cal.timezone)
        for e in cal.exclude:
            if "start_ms" in e:
                self._windows.append((e["start_ms"], e["end_ms"]))
            elif "cron" in e:
                self._crons.append(compile_schedule(e["cron"], cal.timezone,
                                                    hash_key=cal.name))
            else:
                self._dates.add(e["date"])

    @property
    def name(self) -> str:
        return self.calendar.name

    def excludes(self, at_ms: int) -> bool:
        if any(lo <= at_ms < hi for lo, hi in self._windows):
            return True
        if self._dates:
            local = datetime.fromtimestamp(at_ms / 1000, self._tz).date().isoformat()
            if local in self._dates:
                return True
        t = at_ms // 1000
        for sched in self._crons:
            # The minute (or second) holding the instant: is it one the expression names?
            unit = t if sched.has_seconds else t - t % 60
            if sched.next_after(unit - 1) == unit:
                return True
        return False


# A muted message is held at most this long (a calendar that excludes everything would
# otherwise hold it forever); the window is scanned second by second for its first hour
# (a cron exclusion of some seconds of every minute ends within it), then by minute.
MAX_HOLD_MS = 7 * 86_400_000
_FINE_SCAN_S = 3600


def window_end(cal: CompiledCalendar, at_ms: int, limit_ms: int = MAX_HOLD_MS) -> int:
    """The first whole second after `at_ms` that `cal` does not exclude (the end of the
    window holding `at_ms`), at most `limit_ms` after it. Pure."""
    first = (at_ms // 1000 + 1) * 1000
    last = at_ms + limit_ms
    t = first
    step = 1000
    while t <= last:
        if not cal.excludes(t):
            if step > 1000:  # the first free second of the last minute stepped over
                t = next(u for u in range(t - step + 1000, t + 1000, 1000)
                         if not cal.excludes(u))
            return t
        if t - first >= _FINE_SCAN_S * 1000:
            step = 60_000
        t += step
    return last


def excluding_calendar(calendars: list[CompiledCalendar], at_ms: int) -> str | None:
    """The name of the first of `calendars` (the job's order) that excludes `at_ms`."""
    for cal in calendars:
        if cal.excludes(at_ms):
            return cal.name
    return None


def without_excluded(instants: list[int], calendars: list[CompiledCalendar]
                     ) -> tuple[list[int], dict[str, int]]:
    """`instants` less those a calendar excludes, and how many each calendar took."""
    if not calendars:
        return instants, {}
    kept: list[int] = []
    excluded: dict[str, int] = {}
    for t in instants:
        name = excluding_calendar(calendars, t)
        if name is None:
            kept.append(t)
        else:
            excluded[name] = excluded.get(name, 0) + 1
    return kept, excluded
