"""The value schemas of /openapi.json: job, schedule, target, calendar, tenant and worker
bodies, instants, names and query values, each built from the constants (and regexes) the
validators use, so a bound moved there moves here. The operations that use them, and what
JSON Schema cannot state, are in :mod:`raftcron.api.openapi`.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from typing import Any

from raftcron.api import alerts, jobs, tenants, workers
from raftcron.api.context import CONSISTENT_VALUES
from raftcron.core import calendar, model, one_time
from raftcron.core.ahead import REFUSAL_REASONS
from raftcron.core.chains import CHAIN_ON
from raftcron.core.schedule import MAX_CRON_LENGTH, ScheduleError, compile_schedule
from raftcron.core.secrets import SECRET_NAME_RE
from raftcron.core.tenant_policy import MAX_PATTERNS, TARGET_KINDS


def anchored(rx: re.Pattern[str]) -> str:
    """A validator's regex as a schema pattern (both anchors, as `fullmatch` reads it)."""
    text = rx.pattern.removeprefix("^").removesuffix("$")
    return f"^{text}$"


def _any_case(words: list[str]) -> str:
    """A pattern matching exactly these words in any letter case."""
    def one(word: str) -> str:
        return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c)
                       for c in word)
    return "^(" + "|".join(one(w) for w in words) + ")$"


# --- shared value schemas ------------------------------------------------------------------

JOB_ID = {"type": "string", "pattern": anchored(model.JOB_ID_RE)}
NAME = {"type": "string", "pattern": anchored(model.NAME_RE)}
LABEL_VALUE = {"type": "string", "pattern": anchored(model.LABEL_VALUE_RE)}
# An instant between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z (in UTC) with an
# offset or Z; the pattern states the year range and the offset, the rest is date-time.
_AFTER_THE_YEAR = r"-[0-9]{2}-[0-9]{2}[Tt ][0-9:.]+([Zz]|[+-][0-9]{2}:[0-9]{2})$"
INSTANT = {"type": "string", "format": "date-time", "maxLength": 64,
           "pattern": r"^(19[7-9][0-9]|[2-9][0-9]{3})" + _AFTER_THE_YEAR,
           "description": "ISO 8601 with Z or an offset, from 1970-01-01T00:00:00Z to "
                          "9999-12-31T23:59:59.999Z in UTC; no leap second"}
# `after` of the job page: up to 9998-12-31T23:59:59Z (its fire times stay in 9999).
INSTANT_TO_9998 = {**INSTANT, "pattern": r"^(19[7-9][0-9]|[2-8][0-9]{3}|9[0-8][0-9]{2}|"
                                         r"99[0-8][0-9]|999[0-8])" + _AFTER_THE_YEAR,
                   "description": "ISO 8601 with Z or an offset, from 1970-01-01T00:00:00Z "
                                  "to 9998-12-31T23:59:59Z in UTC"}
_H16 = "[0-9A-Fa-f]{1,4}"
_DEC = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_LS32 = f"({_H16}:{_H16}|{_DEC}(\\.{_DEC}){{3}})"
IPV6 = "(" + "|".join([
    f"({_H16}:){{6}}{_LS32}",
    f"::({_H16}:){{5}}{_LS32}",
    f"({_H16})?::({_H16}:){{4}}{_LS32}",
    f"(({_H16}:){{0,1}}{_H16})?::({_H16}:){{3}}{_LS32}",
    f"(({_H16}:){{0,2}}{_H16})?::({_H16}:){{2}}{_LS32}",
    f"(({_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
    f"(({_H16}:){{0,4}}{_H16})?::{_LS32}",
    f"(({_H16}:){{0,5}}{_H16})?::{_H16}",
    f"(({_H16}:){{0,6}}{_H16})?::",
]) + ")"
HTTP_URL = {"type": "string", "maxLength": model.MAX_URL_LEN,
            # A host, or an IPv6 literal in brackets (RFC 3986's IPv6address), with a port
            # and credentials or not.
            "pattern": r"^[Hh][Tt][Tt][Pp][Ss]?://([^/?#\[\]\s]*@)?([^/?#\[\]\s@]+|"
                       rf"\[{IPV6}\](:[0-9]*)?)([/?#][\s\S]*)?$"}
SECRET_REF = {"type": "object", "required": ["secret"], "additionalProperties": False,
              "properties": {"secret": {"type": "string",
                                        "pattern": anchored(SECRET_NAME_RE)}},
              "description": "a secret held by the worker (its secrets file), by name"}
CRON = {
    # The format says it all (an empty string is no cron expression either); a pattern or
    # length bounds beside it would make generators draw from those instead of the format.
    "type": "string", "format": "cron",
    "description": f"at most {MAX_CRON_LENGTH} characters: 5 fields (minute hour "
                   "day-of-month month day-of-week), or 6 with "
                   "seconds first; `H` hashes per job; macros such as @daily and @hourly. "
                   "It must fire at least once.",
}


@functools.cache
def accepted_zones() -> list[str]:
    """The zone names of the tz database that the schedule validator accepts (it refuses
    host-dependent ones such as `localtime`): the `timezone` enum, asked of the validator."""
    def accepted(zone: str) -> bool:
        try:
            compile_schedule("0 0 * * *", zone)
        except ScheduleError:
            return False
        return True
    return sorted(z for z in zoneinfo.available_timezones() if accepted(z))


TIMEZONE = {"$ref": "#/components/schemas/TimeZone"}

SCHEDULE_COMMON: dict[str, Any] = {
    "timezone": TIMEZONE,
    "dst_gap": {"enum": ["auto", "shift", "skip"]},
    "dst_fold": {"enum": ["auto", "once", "both"]},
    "jitter_s": {"type": "integer", "minimum": 0, "maximum": model.MAX_JITTER_S},
    "start_at": {"anyOf": [INSTANT, {"type": "null"}]},
    "end_at": {"anyOf": [INSTANT, {"type": "null"}],
               "description": "after start_at when both are set"},
}
# One local date-time of a one-time schedule. The format says it all (a pattern beside it
# would make generators draw from it instead), as for `cron`.
LOCAL_DATE_TIME = {
    "type": "string", "format": "local-date-time",
    "description": "YYYY-MM-DDTHH:MM[:SS] in the schedule's zone (its dst_gap and dst_fold "
                   "rules apply), or with an offset or Z (that instant); between 1970 and "
                   "the end of 9999 in UTC, and not in a DST gap when dst_gap is skip"}
EVERY = {"anyOf": [
    {"type": "string", "format": "interval",
     "description": "a duration such as 45s, 90m, 1h30m, 2d or 1w (each unit once, largest "
                    "first), from 1 s to 366 days"},
    {"type": "integer", "minimum": one_time.MIN_EVERY_S, "maximum": one_time.MAX_EVERY_S,
     "description": "seconds"}]}
WHOLE_SECOND_INSTANT = {**INSTANT, "pattern": INSTANT["pattern"].replace("[0-9:.]+", "[0-9:]+"),
                        "description": "ISO 8601 with Z or an offset, to the whole second"}
CRON_SCHEDULE: dict[str, Any] = {
    "type": "object", "required": ["cron"], "additionalProperties": False,
    "properties": {"cron": CRON, **SCHEDULE_COMMON},
}
ONCE_SCHEDULE: dict[str, Any] = {
    "type": "object", "required": ["at"], "additionalProperties": False,
    "description": "one-time: fires at each of its times once, and the job then shows done",
    "properties": {"at": {"anyOf": [LOCAL_DATE_TIME, {
        "type": "array", "minItems": 1, "maxItems": one_time.MAX_AT,
        "items": LOCAL_DATE_TIME}]}, **SCHEDULE_COMMON},
}
EVERY_SCHEDULE: dict[str, Any] = {
    "type": "object", "required": ["every"], "additionalProperties": False,
    "description": "an interval: the instants anchor + k x every (absolute: DST does not "
                   "move them; the zone is the one the job is shown in)",
    "properties": {"every": EVERY, "anchor": {**WHOLE_SECOND_INSTANT, "description": (
        "the phase: one instant of the series (default 1970-01-01T00:00:00Z)")},
        **SCHEDULE_COMMON},
}
SCHEDULE_OBJECT: dict[str, Any] = {"oneOf": [CRON_SCHEDULE, ONCE_SCHEDULE, EVERY_SCHEDULE]}
SHELL_TARGET = {"type": "object", "required": ["shell"], "additionalProperties": False,
                "properties": {"shell": {
                    "type": "string", "minLength": 1, "maxLength": model.MAX_SHELL_LEN,
                    "pattern": r"^[^\x00]*[^\x00\s][^\x00]*$",
                    "description": "a command line, run by /bin/sh on the worker"}}}
HTTP_TARGET = {"type": "object", "required": ["http"], "additionalProperties": False,
               "properties": {"http": {
                   "type": "object", "required": ["url"], "additionalProperties": False,
                   "properties": {
                       "url": HTTP_URL,
                       "method": {"type": "string", "pattern": _any_case(
                           list(model.HTTP_METHODS)), "description": "default POST"},
                       "headers": {"type": ["object", "null"],
                                   "maxProperties": model.MAX_HEADERS,
                                   "propertyNames": {
                                       "maxLength": model.MAX_HEADER_NAME_LEN,
                                       "pattern": anchored(model.HEADER_NAME_RE)},
                                   "additionalProperties": {"anyOf": [
                                       {"type": "string",
                                        "maxLength": model.MAX_HEADER_VALUE_LEN,
                                        "pattern": anchored(model.HEADER_VALUE_RE)},
                                       SECRET_REF]}},
                       "body": {"anyOf": [{"type": "string", "maxLength": model.MAX_BODY_LEN},
                                          SECRET_REF, {"type": "null"}]},
                   }}}}


def _int_field(default: int | None, lo: int, hi: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer" if default is not None else ["integer", "null"],
                              "minimum": lo, "maximum": hi}
    if default is not None:
        schema["default"] = default
    return schema


# The run bounds (null: off), with the constraints between them that JSON Schema cannot
# state (core.model.check_run_bounds).
RUN_BOUNDS = {
    "start_deadline_s": "alert `not_started` when no attempt is leased this long after the "
                        "instant",
    "min_duration_s": "alert `too_fast` for a success quicker than this; at most "
                      "max_duration_s, and less than max_runtime_s",
    "max_duration_s": "alert `too_slow` while a run goes on longer than this (it is not "
                      "killed); less than max_runtime_s",
    "alert_after_failures": "one `failures` alert after this many consecutive failed "
                            "occurrences, resolved by the next success",
}
JOB_INPUT: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "required": ["id", "schedule", "target"],
    "properties": {
        "id": JOB_ID,
        "tenant": NAME,
        "version": {"description": "ignored: the server numbers versions (If-Match guards "
                                   "an edit)"},
        "schedule": {"anyOf": [SCHEDULE_OBJECT, CRON],
                     "description": 'an object, or its cron alone ("0 9 * * *")'},
        "misfire_policy": {"enum": list(model.MISFIRE_POLICIES)},
        "overlap_policy": {"enum": list(model.OVERLAP_POLICIES)},
        **{key: _int_field(*bounds) | ({"description": RUN_BOUNDS[key]} if key in RUN_BOUNDS
                                       else {})
           for key, bounds in model.JOB_INT_FIELDS.items()},
        "target": {"oneOf": [SHELL_TARGET, HTTP_TARGET], "description": (
            'A header value or the body may be {"secret": "<name>"}, resolved on the '
            'worker. Header values and URL credentials read as "***" for non-admins')},
        "queue": NAME,
        "paused": {"type": "boolean"},
        "notify": {"type": "array", "maxItems": model.MAX_NOTIFY, "items": {"anyOf": [
            HTTP_URL, {"type": "object", "required": ["channel"], "additionalProperties": False,
                       "properties": {"channel": NAME},
                       "description": "a notification channel of the job's tenant"}]}},
        "concurrency_group": {"type": ["string", "null"], "pattern": NAME["pattern"],
                              "description": "a concurrency group of the job's tenant: at "
                                             "most its limit of runs hold leases at once"},
    },
}
SCHEDULE_NAME = {**NAME, "description": "what an occurrence records as matched (default: "
                                       "the position, from 0); distinct within the job"}
SCHEDULE_LISTED = {"oneOf": [{**kind, "properties": {**kind["properties"],
                                                     "name": SCHEDULE_NAME}}
                             for kind in (CRON_SCHEDULE, ONCE_SCHEDULE, EVERY_SCHEDULE)]}
JOB_INPUT["properties"].update({
    "schedules": {"type": "array", "minItems": 1, "maxItems": model.MAX_SCHEDULES,
                  "items": {"anyOf": [SCHEDULE_LISTED, CRON]},
                  "description": "several schedules instead of `schedule`: the job fires at "
                                 "the union of their instants, each instant once"},
    "calendars": {"type": "array", "maxItems": model.MAX_CALENDARS, "uniqueItems": True,
                  "items": NAME, "description": "calendars of the job's tenant; an instant "
                  "one excludes is recorded skipped with reason calendar:<name>"},
    "labels": {"type": "object", "maxProperties": model.MAX_LABELS,
               "propertyNames": {"pattern": anchored(model.NAME_RE)},
               "additionalProperties": {"type": "string",
                                        "pattern": anchored(model.LABEL_VALUE_RE)},
               "description": "name -> value, selects jobs for POST /v1/jobs:pause"},
})
JOB_INPUT["properties"]["after"] = {
    "type": "object", "required": ["job"], "additionalProperties": False,
    "properties": {"job": {**JOB_ID, "description": "a job of the same tenant; no cycle"},
                   "on": {"enum": list(CHAIN_ON), "default": "success",
                          "description": "success: the upstream run succeeded; failure: it "
                                         "failed after its last retry; finish: either"}},
    "description": "a chained job, instead of a schedule: one run for each run of `job` "
                   "that ends as `on` says, with the upstream's occurrence id and outcome",
}
JOB_INPUT["required"] = ["id", "target"]
JOB_INPUT["oneOf"] = [{"required": ["schedule"]}, {"required": ["schedules"]},
                      {"required": ["after"]}]
# A chained job has no instants for a calendar to exclude.
JOB_INPUT["if"] = {"required": ["after"]}
JOB_INPUT["then"] = {"properties": {"calendars": {"maxItems": 0}}}
# PUT takes the id from the URL; a body may repeat it (an exported job put back as it is).
JOB_REPLACE: dict[str, Any] = {
    **JOB_INPUT, "required": ["target"],
    "properties": {**JOB_INPUT["properties"], "id": {
        **JOB_ID, "description": "optional; when given, it must be the job id of the URL"}},
}

_YEAR = r"([1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
EXCLUSIONS = [
    {"type": "object", "required": ["start", "end"], "additionalProperties": False,
     "description": "the window [start, end); end after start",
     "properties": {"start": INSTANT, "end": INSTANT}},
    {"type": "object", "required": ["cron"], "additionalProperties": False,
     "description": "every minute (second, with six fields) the expression names, in the "
                    "calendar's zone", "properties": {"cron": CRON}},
    {"type": "object", "required": ["date"], "additionalProperties": False,
     "description": "the whole local day, in the calendar's zone",
     "properties": {"date": {"type": "string", "format": "date",
                             "pattern": rf"^{_YEAR}-[0-9]{{2}}-[0-9]{{2}}$"}}},
]
CALENDAR_INPUT: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["exclude"],
    "properties": {
        "tenant": NAME,
        "timezone": TIMEZONE,
        "exclude": {"type": "array", "maxItems": calendar.MAX_EXCLUSIONS,
                    "items": {"oneOf": EXCLUSIONS}},
    },
}
NOTE = {"type": "string", "minLength": 1, "maxLength": alerts.MAX_NOTE, "pattern": r"\S",
        "description": "why: at least one character that is not white space"}
# The body of an action a person takes (an alert's ack or resolve, a run's cancel).
NOTE_BODY = {"type": "object", "additionalProperties": False, "required": ["note"],
             "properties": {"note": NOTE}}
BULK_PAUSE: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["note"],
    "oneOf": [{"required": ["tenant"]}, {"required": ["queue"]}, {"required": ["label"]}],
    "properties": {
        "tenant": NAME, "queue": NAME,
        "label": {"type": "string", "description": '"name=value", e.g. "team=billing"',
                  "pattern": f"^{model.NAME_RE.pattern.strip('^$')}="
                             f"{model.LABEL_VALUE_RE.pattern.strip('^$')}$"},
        "note": NOTE,
    },
}

QUOTA = {"type": ["integer", "null"], "minimum": 1, "maximum": tenants.QUOTA_MAX}
_HOST_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_PATTERN = {"type": "string", "description": "a host, *.domain, or an IP",
                "pattern": rf"^(\*\.{_HOST_LABEL}(\.{_HOST_LABEL})+|"
                           rf"{_HOST_LABEL}(\.{_HOST_LABEL})*)\.?$"}
TENANT_INPUT: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "description": "Quotas and policy of one tenant; the body replaces every field: a "
                   "missing or null max_jobs, max_schedules or max_pending_runs is its "
                   "default (100,000), another missing or null quota is unlimited, a "
                   "missing or null policy list is any",
    "properties": {
        **{key: QUOTA for key in tenants.QUOTAS},
        "queues": {"type": ["array", "null"], "maxItems": MAX_PATTERNS, "items": NAME},
        "targets": {"type": ["array", "null"], "maxItems": MAX_PATTERNS,
                    "items": {"enum": list(TARGET_KINDS)}},
        "http_hosts": {"type": ["array", "null"], "maxItems": MAX_PATTERNS,
                       "items": HOST_PATTERN},
    },
}

WORKER_ID = {"type": "string", "pattern": anchored(workers.WORKER_ID_RE)}
ATTEMPT_ID = {"type": "string", "minLength": 1, "maxLength": workers.MAX_ATTEMPT_ID_LEN}
FENCING_TOKEN = {"type": "integer", "minimum": 0, "maximum": workers.MAX_TOKEN}
PAIRS = {"type": "object", "required": ["worker_id", "attempts"], "properties": {
    "worker_id": WORKER_ID,
    "attempts": {"type": "array", "minItems": 1, "maxItems": workers.MAX_BATCH,
                 "items": {"type": "object", "required": ["attempt_id", "fencing_token"],
                           "properties": {"attempt_id": ATTEMPT_ID,
                                          "fencing_token": FENCING_TOKEN}}}}}
STARTED_MS = {"type": "integer", "minimum": 0, "maximum": workers.MAX_STARTED_MS,
              "description": "when the job's process started, in ms since the epoch on the "
                             "cluster's clock (the worker's own, corrected by the offset it "
                             "measured); recorded as the attempt's started_at, never before "
                             "its instant"}
HEARTBEATS = {**PAIRS, "properties": {
    **PAIRS["properties"],
    "attempts": {**PAIRS["properties"]["attempts"], "items": {
        **PAIRS["properties"]["attempts"]["items"], "properties": {
            **PAIRS["properties"]["attempts"]["items"]["properties"],
            "started_ms": {**STARTED_MS, "description": "a running run's start (" +
                           STARTED_MS["description"] + "); the first one reported stands"}}}},
    "before_start": {
        "type": "boolean", "description": "the check just before the instant of runs leased "
        "ahead and not started: a run whose job was paused since is skipped, not started. "
        "Answered from a read after a barrier; only a skip, a lease awaiting its "
        "acknowledgement or one about to expire is committed"}}}
OUTCOME_FIELDS = {
    "fencing_token": FENCING_TOKEN,
    "outcome": {"enum": ["succeeded", "failed"]},
    "exit_code": {"type": ["integer", "null"], "minimum": -(2**31), "maximum": 2**31 - 1},
    "output": {"type": ["string", "null"],
               "description": f"the last {workers.MAX_OUTPUT} characters are kept"},
    "started_ms": STARTED_MS,
    "duration_ms": {"type": "integer", "minimum": 0, "maximum": workers.MAX_DURATION_MS,
                    "description": "how long the process ran, by the worker's monotonic "
                                   "clock: the attempt finishes at started_at + duration"},
}
# A reported start comes with its duration, and a duration with its start.
OUTCOME_TIMES = {"dependentRequired": {"started_ms": ["duration_ms"],
                                       "duration_ms": ["started_ms"]}}
COMPLETIONS = {"type": "object", "required": ["worker_id", "completions"], "properties": {
    "worker_id": WORKER_ID,
    "completions": {"type": "array", "minItems": 1, "maxItems": workers.MAX_BATCH,
                    "items": {"type": "object",
                              "required": ["attempt_id", "fencing_token", "outcome"],
                              "properties": {"attempt_id": ATTEMPT_ID, **OUTCOME_FIELDS},
                              **OUTCOME_TIMES}}}}
LEASES = {"type": "object", "required": ["worker_id"], "properties": {
    "worker_id": WORKER_ID,
    "queues": {"type": "array", "minItems": 1, "maxItems": 50, "items": NAME},
    "max": {"type": "integer", "minimum": 1, "maximum": workers.MAX_BATCH},
    "wait_s": {"type": "number", "minimum": 0, "maximum": workers.MAX_WAIT_S,
               "description": "long poll: the answer comes when runs are due or after "
                              "wait_s seconds; a client's timeout must exceed it"},
    "acknowledge": {"type": "boolean", "description":
                    "acknowledge each lease (first heartbeat) within the job's "
                    "ack_timeout_s, or it is released and leased again"},
    "ahead": {"type": "boolean", "description":
              "the worker starts each run at its lease's start_at_ms, timed from the "
              "answer's server_now_ms: runs due within the node's lease_ahead_s are leased "
              "before their instant"},
    "ahead_refused": {"enum": [*REFUSAL_REASONS, None], "description":
                      "why this worker takes no run ahead (its clock is unmeasured or "
                      "skewed); counted in /metrics"}}}

# `?consistent=`: any letter case of these spellings.
CONSISTENT = {"name": "consistent", "in": "query", "required": False,
              "description": "true: a Raft barrier first, so the read sees every write "
                             "acknowledged before it (503 without a leader)",
              "schema": {"type": "string", "pattern": _any_case(sorted(CONSISTENT_VALUES))}}
LIMIT = {"type": "integer", "minimum": 1, "maximum": jobs.MAX_PAGE, "default": 100}
