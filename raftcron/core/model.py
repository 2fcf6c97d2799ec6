"""The job definition: parsing and validation of client JSON into a frozen `Job`.

Every error is a `ValidationError` naming the dotted field and the reason. A `Job` is
stored as its canonical JSON (`Job.to_spec()`), which is what travels in commands.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import urlsplit

from raftcron.core.chains import After, after_from_spec, parse_after
from raftcron.core.errors import ValidationError
from raftcron.core.job_parts import LABEL_VALUE_RE as LABEL_VALUE_RE  # re-exported
from raftcron.core.job_parts import MAX_CALENDARS as MAX_CALENDARS  # re-exported
from raftcron.core.job_parts import MAX_LABELS as MAX_LABELS  # re-exported
from raftcron.core.job_parts import (
    NAME_RE,
    check_run_bounds,
    parse_calendar_names,
    parse_labels,
)
from raftcron.core.notify_refs import parse_notify
from raftcron.core.one_time import (
    IntervalSchedule,
    OnceSchedule,
    compile_kind,
    compile_once,
    every_text,
    parse_at,
    parse_every,
)
from raftcron.core.schedule import CronSchedule, ScheduleError, compile_schedule
from raftcron.core.schedule_set import ScheduleSet
from raftcron.core.secrets import is_secret_ref
from raftcron.core.timefmt import clamp_accepted, ms_to_iso, parse_iso_ms

JOB_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
MISFIRE_POLICIES = ("skip", "run_once", "catch_up")
OVERLAP_POLICIES = ("allow", "forbid", "replace", "buffer_one")
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
MAX_SHELL_LEN = 16_384
MAX_BODY_LEN = 65_536
MAX_URL_LEN = 2048
MAX_HEADERS = 50
MAX_HEADER_NAME_LEN = 256
MAX_HEADER_VALUE_LEN = 4096
MAX_NOTIFY = 10
MAX_JITTER_S = 3600
MAX_SCHEDULES = 16
DEFAULT_ACK_TIMEOUT_S = 3
MAX_ACK_TIMEOUT_S = 600
WEEK_S = 86_400 * 7
MAX_FAILURE_THRESHOLD = 1000
# The integer fields of a job: (default, lowest, highest). A default of None makes the
# field optional and nullable; the others refuse null. /openapi.json is built from this.
JOB_INT_FIELDS: dict[str, tuple[int | None, int, int]] = {
    "misfire_grace_s": (60, 0, WEEK_S),
    "catch_up_max": (100, 1, 10_000),
    "max_runtime_s": (None, 1, WEEK_S),
    "max_attempts": (3, 1, 100),
    "retry_backoff_s": (10, 0, 86_400),
    "heartbeat_timeout_s": (30, 2, 3600),
    "ack_timeout_s": (DEFAULT_ACK_TIMEOUT_S, 1, MAX_ACK_TIMEOUT_S),
    "deadline_s": (None, 1, WEEK_S),
    # Run bounds (leader.deadlines, state.run_alerts): off unless set.
    "start_deadline_s": (None, 1, WEEK_S),
    "min_duration_s": (None, 1, WEEK_S),
    "max_duration_s": (None, 1, WEEK_S),
    "alert_after_failures": (None, 1, MAX_FAILURE_THRESHOLD),
}

# Left out of a spec while unset, so that the stored definition of a job that uses none of
# them is byte for byte what it was before they existed (equal digests in a rolling upgrade).
RUN_BOUND_FIELDS = ("start_deadline_s", "min_duration_s", "max_duration_s",
                    "alert_after_failures")

_TOP_LEVEL = {
    "id", "tenant", "version", "schedule", "misfire_policy", "misfire_grace_s",
    "catch_up_max", "overlap_policy", "max_runtime_s", "max_attempts", "retry_backoff_s",
    "heartbeat_timeout_s", "ack_timeout_s", "deadline_s", "target", "queue", "paused",
    "notify", "start_deadline_s", "min_duration_s", "max_duration_s", "alert_after_failures",
    "concurrency_group", "schedules", "calendars", "labels", "after",
}
_SCHEDULE_KEYS = {"cron", "timezone", "dst_gap", "dst_fold", "jitter_s", "start_at", "end_at",
                  "at", "every", "anchor"}
# An entry of `schedules` may be named; the name is what an occurrence records as matched.
_LISTED_SCHEDULE_KEYS = _SCHEDULE_KEYS | {"name"}


@dataclass(frozen=True, slots=True)
class Schedule:
    """One schedule of a job: a cron expression, one-time local times (`at`), or an
    interval (`every_s` from `anchor_ms`); exactly one of the three is set."""

    cron: str = ""
    timezone: str = "UTC"
    dst_gap: str = "auto"
    dst_fold: str = "auto"
    jitter_s: int = 0
    start_at_ms: int | None = None
    end_at_ms: int | None = None
    # Set on the entries of a job's `schedules` list only (a single schedule has none).
    name: str | None = None
    # One-time and interval schedules (core.one_time); left out of a spec while unset, so
    # a cron schedule's spec is what it was before they existed.
    at: tuple[str, ...] = ()
    every_s: int | None = None
    anchor_ms: int | None = None

    @property
    def kind(self) -> str:
        return "at" if self.at else "every" if self.every_s is not None else "cron"


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    schedule: Schedule
    target: dict[str, Any]
    tenant: str = "default"
    version: int = 1
    misfire_policy: str = "run_once"
    misfire_grace_s: int = 60
    catch_up_max: int = 100
    overlap_policy: str = "allow"
    max_runtime_s: int | None = None
    max_attempts: int = 3
    retry_backoff_s: int = 10
    heartbeat_timeout_s: int = 30
    # How long a lease may go unacknowledged (no first heartbeat) before it is released
    # and leased again, uncounted. Specs stored before the field existed get the default.
    ack_timeout_s: int = DEFAULT_ACK_TIMEOUT_S
    deadline_s: int | None = None
    queue: str = "default"
    paused: bool = False
    notify: tuple[Any, ...] = field(default_factory=tuple)  # URLs, {"channel": name}
    # Run bounds, each off (None) unless set; specs stored before them decode as off.
    start_deadline_s: int | None = None
    min_duration_s: int | None = None
    max_duration_s: int | None = None
    alert_after_failures: int | None = None
    # A concurrency group of the job's tenant (state.groups); None: none. Left out of the
    # spec when None, so specs of jobs without one are as before the field existed.
    concurrency_group: str | None = None
    # Several schedules (all of them, the first being `schedule`); empty for a job with
    # one. Specs stored before these fields existed decode with them empty.
    schedules: tuple[Schedule, ...] = field(default_factory=tuple)
    calendars: tuple[str, ...] = field(default_factory=tuple)
    labels: dict[str, str] = field(default_factory=dict)
    # The job whose ends start this one (core.chains); None: a scheduled job. A chained job
    # has an empty schedule (it fires at no instant of its own); left out of a spec when None.
    after: After | None = None

    def fire_times(self) -> ScheduleSet:
        """The union of the job's schedules: what every reader of fire times uses."""
        return ScheduleSet.from_spec(self.to_spec(), self.id)

    def compiled(self) -> CronSchedule | OnceSchedule | IntervalSchedule:
        """The first schedule compiled (what a single-schedule view describes)."""
        return compile_member(self.schedule, self.id)

    def with_version(self, version: int) -> Job:
        return replace(self, version=version)

    def to_spec(self) -> dict[str, Any]:
        """Canonical dict form (times as epoch ms), used inside commands and the DB.

        Written out field by field: `dataclasses.asdict` (a deepcopy per field) made a
        1,000-job CreateJobs apply take a quarter of a second on the Raft thread."""
        d = {name: getattr(self, name) for name in _JOB_FIELDS}
        d["schedule"] = _schedule_spec(self.schedule)
        d["target"] = copy.deepcopy(self.target)
        d["notify"] = [dict(e) if isinstance(e, dict) else e for e in self.notify]
        for name in RUN_BOUND_FIELDS:
            if d[name] is None:
                del d[name]
        if d["concurrency_group"] is None:
            del d["concurrency_group"]
        # The fields added with several schedules and calendars are left out while empty:
        # a job that uses none of them has the spec it had before they existed.
        for name in ("schedules", "calendars", "labels"):
            del d[name]
        if self.schedules:
            d["schedules"] = [_schedule_spec(s) for s in self.schedules]
        if self.calendars:
            d["calendars"] = list(self.calendars)
        if self.labels:
            d["labels"] = dict(self.labels)
        if self.after is None:
            del d["after"]
        else:
            d["after"] = self.after.to_spec()
        return d

    @staticmethod
    def from_spec(d: dict[str, Any]) -> Job:
        d = dict(d)
        d["schedule"] = schedule_from_spec(d["schedule"])
        d["notify"] = tuple(d.get("notify") or ())
        d["schedules"] = tuple(schedule_from_spec(s) for s in d.get("schedules") or ())
        d["calendars"] = tuple(d.get("calendars") or ())
        d["labels"] = dict(d.get("labels") or {})
        d["after"] = after_from_spec(d.get("after"))
        return Job(**d)

    def fields_differing_from(self, other: Job, *, compare_paused: bool = True) -> list[str]:
        """The top-level fields in which `other` differs from this job, in definition
        order. The version is never compared (every edit moves it), and `paused` only when
        asked: pause and resume change it outside the definition."""
        return [name for name in _JOB_FIELDS
                if name != "version" and (compare_paused or name != "paused")
                and getattr(self, name) != getattr(other, name)]

    def to_api(self) -> dict[str, Any]:
        """The public JSON shape (times as ISO 8601). A bound stored before instants were
        checked in UTC (up to the year 10000) is shown clamped: it fires the same, and the
        text shown is accepted back."""
        d = self.to_spec()
        for name in RUN_BOUND_FIELDS:
            d.setdefault(name, None)
        for sched in [d["schedule"], *d.get("schedules", ())]:
            sched["start_at"] = ms_to_iso(clamp_accepted(sched.pop("start_at_ms")))
            sched["end_at"] = ms_to_iso(clamp_accepted(sched.pop("end_at_ms")))
            if "every_s" in sched:  # as it was given: "90m", and the anchor as an instant
                sched["every"] = every_text(sched.pop("every_s"))
                sched["anchor"] = ms_to_iso(sched.pop("anchor_ms"))
        if "schedules" in d or self.after is not None:
            del d["schedule"]  # as it was given: several, or none for a chained job
        d.setdefault("calendars", [])
        d.setdefault("labels", {})
        d["target"] = renderable(d["target"])
        d["notify"] = renderable(d["notify"])
        d.setdefault("concurrency_group", None)
        return d


def renderable(value: Any) -> Any:
    """`value` with every lone UTF-16 surrogate in its strings replaced by U+FFFD. The API
    refuses them now; a job stored before that would otherwise make every read of it fail
    (no response can encode one). Values without one are returned as they are."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return value
    except UnicodeEncodeError:
        pass
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {renderable(k): renderable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [renderable(v) for v in value]
    return value


_JOB_FIELDS = tuple(f.name for f in fields(Job))
# The one-time and interval fields: in a spec only when set (and `cron` only when it is one).
_KIND_FIELDS = ("at", "every_s", "anchor_ms")
_SCHEDULE_FIELDS = tuple(f.name for f in fields(Schedule)
                         if f.name != "name" and f.name not in _KIND_FIELDS)


def _schedule_spec(s: Schedule) -> dict[str, Any]:
    d = {name: getattr(s, name) for name in _SCHEDULE_FIELDS}
    if s.name is not None:
        d["name"] = s.name
    if s.at:
        del d["cron"]
        d["at"] = list(s.at)
    elif s.every_s is not None:
        del d["cron"]
        d["every_s"], d["anchor_ms"] = s.every_s, s.anchor_ms
    return d


def schedule_from_spec(d: dict[str, Any]) -> Schedule:
    """A schedule of a stored spec (its `at` a list there)."""
    if "at" in d:
        d = {**d, "at": tuple(d["at"])}
    return Schedule(**d)


def json_int(value: Any) -> int | None:
    """The integer a JSON number denotes, or None (for booleans and anything else).

    JSON Schema counts `1.0` as an integer, and so does the API: a client whose JSON
    library writes every number as a float is not refused."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _int(data: dict[str, Any], key: str, default: int | None, lo: int, hi: int,
         prefix: str = "") -> int | None:
    value = data.get(key, default)
    if value is None and default is None:
        return None
    value = json_int(value)
    if value is None:
        raise ValidationError(prefix + key, "must be an integer")
    if not lo <= value <= hi:
        raise ValidationError(prefix + key, f"must be between {lo} and {hi}")
    return value


def _choice(data: dict[str, Any], key: str, default: str, choices: tuple[str, ...],
            prefix: str = "") -> str:
    value = data.get(key, default)
    if value not in choices:
        raise ValidationError(prefix + key, f"must be one of {', '.join(choices)}")
    return value


def _name(data: dict[str, Any], key: str, default: str) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise ValidationError(key, "must be 1-64 characters of A-Z a-z 0-9 . _ -")
    return value


def is_http_url(value: Any) -> bool:
    """An http(s) URL with a host, at most MAX_URL_LEN characters. A URL that
    `urlsplit` cannot split at all (`http://[`) is not one either."""
    if not isinstance(value, str) or len(value) > MAX_URL_LEN:
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc)


# RFC 7230 §3.2.6: a header name is a token; RFC 7230 §3.2: a value is visible characters
# with spaces or tabs between them, none at either end (h11, which sends the worker's
# requests, refuses anything else, and httpx encodes a value as ASCII).
HEADER_NAME_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
HEADER_VALUE_RE = re.compile(r"([\x21-\x7e]([\t\x20-\x7e]*[\x21-\x7e])?)?")


def check_header(name: str, value: Any) -> None:
    """Refuse (ValidationError naming the header) what no HTTP request can carry.

    Accepting it would store a job every run of which fails at the worker (h11 refuses
    to send it), or worse, a CR/LF would split the request. A secret reference is
    checked for its form only: its value is known only on the worker."""
    if not HEADER_NAME_RE.fullmatch(name):
        raise ValidationError("target.http.headers", f"header name {name!r} is not an "
                              "HTTP token (letters, digits and !#$%&'*+-.^_`|~ only)")
    if is_secret_ref(value) or HEADER_VALUE_RE.fullmatch(value):
        return
    bad = next((c for c in value if not ("\x20" <= c <= "\x7e" or c == "\t")), None)
    if bad is None:
        reason = "starts or ends with a space or tab"
    elif ord(bad) > 0x7e and bad != "\x7f":
        reason = f"holds the non-ASCII character U+{ord(bad):04X}"
    else:
        reason = f"holds the control character U+{ord(bad):04X} (only tab is allowed)"
    raise ValidationError("target.http.headers", f"the value of header {name!r} {reason}")


def parse_target(value: Any) -> dict[str, Any]:
    """Validate an execution target: {"shell": "..."} or {"http": {...}}."""
    if not isinstance(value, dict) or len(value) != 1:
        raise ValidationError("target", 'must be {"shell": "..."} or {"http": {"url": ...}}')
    if "shell" in value:
        cmd = value["shell"]
        if not isinstance(cmd, str) or not cmd.strip():
            raise ValidationError("target.shell", "must be a non-empty command string")
        if len(cmd) > MAX_SHELL_LEN or "\x00" in cmd:
            raise ValidationError("target.shell", f"must be at most {MAX_SHELL_LEN} characters")
        return {"shell": cmd}
    if "http" in value:
        http = value["http"]
        if not isinstance(http, dict):
            raise ValidationError("target.http", "must be an object with a url")
        unknown = set(http) - {"url", "method", "headers", "body"}
        if unknown:
            raise ValidationError(f"target.http.{sorted(unknown)[0]}", "unknown field")
        url = http.get("url")
        if not is_http_url(url):
            raise ValidationError("target.http.url", "must be an http(s) URL")
        method = http.get("method", "POST")
        if not isinstance(method, str) or method.upper() not in HTTP_METHODS:
            raise ValidationError("target.http.method", f"must be one of {', '.join(HTTP_METHODS)}")
        headers = http.get("headers")
        headers = {} if headers is None else headers
        if not isinstance(headers, dict) or len(headers) > MAX_HEADERS or not all(
            isinstance(k, str) and len(k) <= MAX_HEADER_NAME_LEN
            and (is_secret_ref(v) or (isinstance(v, str) and len(v) <= MAX_HEADER_VALUE_LEN))
            for k, v in headers.items()
        ):
            raise ValidationError("target.http.headers", "must map header names to strings "
                                  'or secret references {"secret": "<name>"}')
        for name, header_value in headers.items():
            check_header(name, header_value)
        body = http.get("body")
        if body is not None and not is_secret_ref(body) and (
                not isinstance(body, str) or len(body) > MAX_BODY_LEN):
            raise ValidationError("target.http.body", f"must be a string of at most "
                                  f'{MAX_BODY_LEN} or a secret reference {{"secret": "<name>"}}')
        return {"http": {"url": url, "method": method.upper(), "headers": headers, "body": body}}
    raise ValidationError("target", 'must be {"shell": "..."} or {"http": {"url": ...}}')


def parse_schedule(value: Any, job_id: str, where: str = "schedule",
                   listed: bool = False) -> Schedule:
    """One schedule; `where` is its field ("schedule", or "schedules.2" in a list, where
    an entry may carry a `name`). A cron expression, `at` (one-time local times) or
    `every` (an interval from its `anchor`): exactly one of them."""
    if isinstance(value, str):
        value = {"cron": value}
    if not isinstance(value, dict):
        raise ValidationError(where, 'must be an object such as {"cron": "0 9 * * *"}')
    unknown = set(value) - (_LISTED_SCHEDULE_KEYS if listed else _SCHEDULE_KEYS)
    if unknown:
        raise ValidationError(f"{where}.{sorted(unknown)[0]}", "unknown field")
    kinds = [k for k in ("cron", "at", "every") if k in value]
    if not kinds:
        raise ValidationError(f"{where}.cron", "is required (or at, or every)")
    if len(kinds) > 1:
        raise ValidationError(f"{where}.{kinds[1]}", f"goes alone: give one of cron, at or "
                              f"every, not {' and '.join(kinds)}")
    if "anchor" in value and "every" not in value:
        raise ValidationError(f"{where}.anchor", "goes with every")
    tz = value.get("timezone", "UTC")
    if not isinstance(tz, str):
        raise ValidationError(f"{where}.timezone", "must be an IANA time zone name")
    gap = value.get("dst_gap", "auto")
    fold = value.get("dst_fold", "auto")
    cron, at, every_s, anchor_ms = "", (), None, None
    try:
        if "cron" in value:
            cron = value["cron"]
            if not isinstance(cron, str):
                raise ValidationError(f"{where}.cron", "is required and must be a string")
            compile_schedule(cron, tz, gap, fold, hash_key=job_id)
        elif "at" in value:
            at = parse_at(value["at"], f"{where}.at")
            compile_once(at, tz, gap, fold, f"{where}.at")
        else:
            every_s = parse_every(value["every"], f"{where}.every")
            anchor = value.get("anchor")
            anchor_ms = 0 if anchor is None else parse_iso_ms(anchor, f"{where}.anchor")
            if anchor_ms % 1000:
                raise ValidationError(f"{where}.anchor", "must be a whole second")
            compile_schedule("0 0 * * *", tz, gap, fold)  # the zone it is shown in
    except ScheduleError as e:
        field = e.field if e.field.startswith(where) else \
            where + e.field.removeprefix("schedule")
        raise ValidationError(field, e.message) from None
    jitter = _int(value, "jitter_s", 0, 0, MAX_JITTER_S, f"{where}.")
    start = value.get("start_at")
    end = value.get("end_at")
    start_ms = parse_iso_ms(start, f"{where}.start_at") if start is not None else None
    end_ms = parse_iso_ms(end, f"{where}.end_at") if end is not None else None
    if start_ms is not None and end_ms is not None and end_ms <= start_ms:
        raise ValidationError(f"{where}.end_at", f"must be after {where}.start_at")
    name = value.get("name")
    if name is not None and (not isinstance(name, str) or not NAME_RE.fullmatch(name)):
        raise ValidationError(f"{where}.name", "must be 1-64 characters of A-Z a-z 0-9 . _ -")
    return Schedule(cron, tz, gap, fold, jitter or 0, start_ms, end_ms, name, at, every_s,
                    anchor_ms)


def compile_member(s: Schedule, hash_key: str) -> CronSchedule | OnceSchedule | IntervalSchedule:
    """A schedule compiled to what answers its fire instants, whatever its kind."""
    return compile_kind(s.cron, s.at, s.every_s, s.anchor_ms, s.timezone, s.dst_gap,
                        s.dst_fold, hash_key=hash_key)


def parse_schedules(value: Any, job_id: str) -> tuple[Schedule, ...]:
    """`schedules`: 1 to MAX_SCHEDULES entries, each named (by default its position, from
    "0"), the names distinct. A list of one is the single-schedule form."""
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_SCHEDULES:
        raise ValidationError("schedules", f"must be a list of 1 to {MAX_SCHEDULES} "
                              'schedules such as {"cron": "0 9 * * *"}')
    out: list[Schedule] = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        s = parse_schedule(item, job_id, f"schedules.{i}", listed=True)
        s = replace(s, name=s.name if s.name is not None else str(i))
        if s.name in seen:
            raise ValidationError(f"schedules.{i}.name", f"{s.name!r} names an earlier "
                                  "schedule of this job")
        seen.add(s.name)
        out.append(s)
    return tuple(out)


def parse_job(data: Any, *, job_id: str | None = None) -> Job:
    """Build a validated `Job` from client JSON. `job_id` (from the URL) wins over the body."""
    if not isinstance(data, dict):
        raise ValidationError("body", "must be a JSON object")
    unknown = set(data) - _TOP_LEVEL
    if unknown:
        raise ValidationError(sorted(unknown)[0], "unknown field")
    jid = data.get("id", job_id) if job_id is None else job_id
    if data.get("id") not in (None, jid):
        raise ValidationError("id", "does not match the job id in the URL")
    if jid is None:
        raise ValidationError("id", "is required")
    if not isinstance(jid, str) or not JOB_ID_RE.fullmatch(jid):
        raise ValidationError("id", "must be 1-128 characters of A-Z a-z 0-9 . _ -")
    if "schedule" in data and "schedules" in data:
        raise ValidationError("schedules", "give either schedule or schedules, not both")
    schedules: tuple[Schedule, ...] = ()
    if "schedules" in data:
        schedules = parse_schedules(data["schedules"], jid)
        schedule = schedules[0]
        if len(schedules) == 1:  # one schedule: the single form, as it always was
            schedule, schedules = replace(schedule, name=None), ()
    elif "schedule" in data:
        schedule = parse_schedule(data["schedule"], jid)
    elif "after" in data:
        schedule = Schedule()  # a chained job fires at no instant of its own
    else:
        raise ValidationError("schedule", "is required (or schedules, or after)")
    after = None
    if "after" in data:
        after = parse_after(data["after"], jid)
        if "schedule" in data or "schedules" in data:
            raise ValidationError("after", "a chained job has no schedule: give either "
                                  "after or a schedule, not both")
        if data.get("calendars"):
            raise ValidationError("calendars", "a chained job has no instants for a "
                                  "calendar to exclude")
    if "target" not in data:
        raise ValidationError("target", "is required")
    target = parse_target(data["target"])
    paused = data.get("paused", False)
    if not isinstance(paused, bool):
        raise ValidationError("paused", "must be true or false")
    notify = parse_notify(data.get("notify", []), MAX_NOTIFY, is_http_url)
    ints = {key: _int(data, key, *bounds) for key, bounds in JOB_INT_FIELDS.items()}
    check_run_bounds(ints)
    return Job(
        id=jid,
        schedule=schedule,
        target=target,
        tenant=_name(data, "tenant", "default"),
        version=1,
        misfire_policy=_choice(data, "misfire_policy", "run_once", MISFIRE_POLICIES),
        overlap_policy=_choice(data, "overlap_policy", "allow", OVERLAP_POLICIES),
        **ints,
        queue=_name(data, "queue", "default"),
        paused=paused,
        notify=tuple(notify),
        concurrency_group=_optional_name(data, "concurrency_group"),
        schedules=schedules,
        calendars=parse_calendar_names(data.get("calendars", [])),
        labels=parse_labels(data.get("labels", {})),
        after=after,
    )


def _optional_name(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise ValidationError(key, "must be null or 1-64 characters of A-Z a-z 0-9 . _ -")
    return value
