"""The OpenAPI description served at /openapi.json.

Request schemas are built from the constants the validators use (core/model.py and the
api modules): a bound moved there moves here. What JSON Schema cannot state is named by a
`format` and said in a description: a cron expression that fires at all (`format: cron`,
checked by core/schedule.py), `end_at` after `start_at`, a backfill range of at most ten
years, the duration bounds' order (`min_duration_s` at most `max_duration_s`, both below
`max_runtime_s`). tests/integration/test_api_schema_agreement.py proves, field by field, that a
value this schema allows is accepted and one it refuses is refused with a 400 naming the
field; tests/system/test_api_contract.py runs schemathesis with every check against a
real node.

Every status code and content type the server sends is listed per operation: 400 where
the request has parameters or a body, 401/403 for tokens (except the open health routes),
413 for bodies, 503 where the answer waits on Raft (a write, `?consistent=true`, the
leader's long poll), with `Retry-After`.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from typing import Any

from raftcron.api import (
    alerts,
    apply,
    groups,
    job_history,
    jobpage,
    jobs,
    occurrences,
    outbox,
    status,
    tenants,
    workers,
)
from raftcron.api.context import CONSISTENT_VALUES
from raftcron.cluster import membership
from raftcron.core import calendar, model, one_time
from raftcron.core.ahead import REFUSAL_REASONS
from raftcron.core.schedule import MAX_CRON_LENGTH, ScheduleError, compile_schedule
from raftcron.core.secrets import SECRET_NAME_RE
from raftcron.core.tenant_policy import MAX_PATTERNS, TARGET_KINDS
from raftcron.state.digest_marks import DEFAULT_CAPACITY, MARK_PATTERN

JSON = "application/json"
ERROR = {"$ref": "#/components/schemas/Error"}
JSON_OBJ = {"type": "object"}
AUTH_ERRORS = (401, 403)
# Every answer that waits on Raft can be "no leader" or "outcome unknown": 503 with
# Retry-After; every write can meet a rate limit, a conflict or a reused idempotency key.
RAFT_WRITE = (409, 422, 429, 503)
# A job write also answers 404 when a calendar the job lists does not exist in its tenant.
JOB_WRITE = (404, *RAFT_WRITE)
DESCRIPTIONS = {
    400: "invalid input: `error.field` names the field, `error.message` the reason",
    401: "no token, or a token this cluster does not know",
    403: "the token's scopes do not allow this, or the tenant policy refuses it",
    404: "no such resource (or one the token may not see)",
    409: "conflicts with the current state (exists already, stale fencing token, a tenant "
         "quota: quota_exceeded naming max_jobs or max_schedules, a feature the cluster is "
         "not fully upgraded for: cluster_not_upgraded, ...)",
    412: "If-Match names another version than the current one",
    413: "the request body exceeds 1 MiB",
    422: "the Idempotency-Key was used before for another request",
    429: "a rate limit (max_fires_per_minute) or the tenant's max_pending_runs quota; "
         "Retry-After says when to try again",
    503: "no leader, the outcome is unknown (retry with the same Idempotency-Key), or "
         "this node knows no confirmed cluster time to stamp a write with "
         "(`clock_unconfirmed`); Retry-After: 1",
}


def _anchored(rx: re.Pattern[str]) -> str:
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

JOB_ID = {"type": "string", "pattern": _anchored(model.JOB_ID_RE)}
NAME = {"type": "string", "pattern": _anchored(model.NAME_RE)}
LABEL_VALUE = {"type": "string", "pattern": _anchored(model.LABEL_VALUE_RE)}
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
HTTP_URL = {"type": "string", "maxLength": model.MAX_URL_LEN,
            "pattern": r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\[\]\s]+([/?#][\s\S]*)?$"}
SECRET_REF = {"type": "object", "required": ["secret"], "additionalProperties": False,
              "properties": {"secret": {"type": "string",
                                        "pattern": _anchored(SECRET_NAME_RE)}},
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
                                       "pattern": _anchored(model.HEADER_NAME_RE)},
                                   "additionalProperties": {"anyOf": [
                                       {"type": "string",
                                        "maxLength": model.MAX_HEADER_VALUE_LEN,
                                        "pattern": _anchored(model.HEADER_VALUE_RE)},
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
        "notify": {"type": "array", "maxItems": model.MAX_NOTIFY, "items": HTTP_URL},
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
               "propertyNames": {"pattern": _anchored(model.NAME_RE)},
               "additionalProperties": {"type": "string",
                                        "pattern": _anchored(model.LABEL_VALUE_RE)},
               "description": "name -> value, selects jobs for POST /v1/jobs:pause"},
})
JOB_INPUT["required"] = ["id", "target"]
JOB_INPUT["oneOf"] = [{"required": ["schedule"]}, {"required": ["schedules"]}]
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

WORKER_ID = {"type": "string", "pattern": _anchored(workers.WORKER_ID_RE)}
ATTEMPT_ID = {"type": "string", "minLength": 1, "maxLength": workers.MAX_ATTEMPT_ID_LEN}
FENCING_TOKEN = {"type": "integer", "minimum": 0, "maximum": workers.MAX_TOKEN}
PAIRS = {"type": "object", "required": ["worker_id", "attempts"], "properties": {
    "worker_id": WORKER_ID,
    "attempts": {"type": "array", "minItems": 1, "maxItems": workers.MAX_BATCH,
                 "items": {"type": "object", "required": ["attempt_id", "fencing_token"],
                           "properties": {"attempt_id": ATTEMPT_ID,
                                          "fencing_token": FENCING_TOKEN}}}}}
HEARTBEATS = {**PAIRS, "properties": {**PAIRS["properties"], "before_start": {
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
    "started_ms": {"type": "integer", "minimum": 0, "maximum": workers.MAX_STARTED_MS,
                   "description": "when the job's process started, in ms since the epoch on "
                                  "the cluster's clock (the worker's own, corrected by the "
                                  "offset it measured); recorded as the attempt's "
                                  "started_at, never before its instant"},
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


# --- operations ----------------------------------------------------------------------------

def _any_content(op: dict, media_types: Any) -> dict:
    """`op` whose 200 answer is text of any of `media_types`."""
    op["responses"]["200"]["content"] = {
        m: {"schema": JSON_OBJ if m == JSON else {}} for m in media_types}
    return op


def _op(summary: str, *, body: dict | None = None, body_required: bool = True, ok: int = 200,
        params: list[dict] | None = None, errors: tuple[int, ...] = (),
        content: str = JSON, extra: dict | None = None) -> dict:
    """One operation. 400 is added when it takes input, 413 with a body, 503 when a
    parameter asks for a barrier; 401/403 always (removed for the open routes)."""
    statuses = set(errors) | set(AUTH_ERRORS)
    if body is not None or params:
        statuses.add(400)
    if body is not None:
        statuses.add(413)
    if any(p["name"] == "consistent" for p in params or ()):
        statuses.add(503)
    if any(p["in"] == "path" for p in params or ()):
        statuses.add(404)  # none such, or `.`/`..` that URL normalisation moved elsewhere
    op: dict[str, Any] = {"summary": summary, "responses": {
        str(ok): {"description": "OK", "content": {content: {"schema": (
            JSON_OBJ if content == JSON else {"type": "string"})}}}}}
    for code in sorted(statuses):
        response: dict[str, Any] = {"description": DESCRIPTIONS[code],
                                    "content": {JSON: {"schema": ERROR}}}
        if code in (429, 503):
            response["headers"] = {"Retry-After": {"schema": {"type": "string"}}}
        op["responses"][str(code)] = response
    if body is not None:
        op["requestBody"] = {"required": body_required,
                             "content": {JSON: {"schema": body}}}
    if params:
        op["parameters"] = params
    op.update(extra or {})
    return op


def _also_created(op: dict) -> dict:
    """`op` answering 201 as well as 200 (a PUT that creates or replaces)."""
    op["responses"]["201"] = {"description": "Created",
                              "content": {JSON: {"schema": JSON_OBJ}}}
    return op


def _path(name: str, schema: dict | None = None) -> dict:
    return {"name": name, "in": "path", "required": True,
            "schema": schema or {"type": "string", "minLength": 1}}


def _query(name: str, schema: dict | None = None) -> dict:
    return {"name": name, "in": "query", "required": False,
            "schema": schema or {"type": "string"}}


# If-Match is described, not declared as a parameter: whether a version matches depends
# on the state, not on the request's shape (a generator would send versions at random).
IF_MATCH = (" An If-Match header with the version the edit expects (a number, quoted or "
            "not) makes it conditional: 412 when the job is at another version.")


JOB = [_path("job_id", JOB_ID)]
HISTORY_PAGE = [_query("limit", {**LIMIT, "default": job_history.DEFAULT_PAGE}),
                _query("before", {"type": "integer", "minimum": 1,
                                  "maximum": job_history.MAX_SEQ}),
                CONSISTENT]
TENANT = [_path("name", NAME)]


def openapi_spec() -> dict[str, Any]:
    spec = _spec()
    for path in ("/healthz", "/readyz"):  # open: no token needed
        for op in spec["paths"][path].values():
            op["security"] = []
            for code in AUTH_ERRORS:
                op["responses"].pop(str(code), None)
    return spec


def _spec() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "raftcron", "version": "1"},
        "security": [{"bearer": []}],
        "components": {"securitySchemes": {"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "Scopes: admin, read, tenant:<name>, worker[:<queues>]"}},
            "schemas": {
                "TimeZone": {"type": "string", "enum": accepted_zones(),
                             "description": "an IANA time zone name"},
                "Error": {
                "type": "object", "required": ["error"], "properties": {"error": {
                    "type": "object", "required": ["code", "message"], "properties": {
                        "code": {"type": "string"}, "message": {"type": "string"},
                        "field": {"type": "string"}}}}}}},
        "paths": {
            "/openapi.json": {"get": _op("This description")},
            "/healthz": {"get": _op("The process is up")},
            "/readyz": {"get": _op(
                "Caught up and the cluster has a leader", extra={"responses": {
                    "200": {"description": "ready", "content": {JSON: {"schema": JSON_OBJ}}},
                    "503": {"description": "not ready: `problems` says why",
                            "content": {JSON: {"schema": JSON_OBJ}}}}})},
            "/v1/cluster": {"get": _op("This node's view of the cluster")},
            "/v1/digest": {"get": _op("Canonical digest of this node's state")},
            "/v1/digest/marks": {"post": _op(
                "Commit a digest mark (admin): a barrier entry at whose index every node "
                "keeps its digest. Answers `mark` and `index` (and this node's `digest` "
                "once computed); an unknown outcome (503) names the `mark` too",
                ok=201, errors=(503,))},
            "/v1/digest/marks/{mark}": {"get": _op(
                "This node's digest at a mark's index (admin): `mark`, `index`, `digest`, "
                "`node_id`; `digest` null with `error` when this node could not compute "
                "it. 404 while this node has not applied or digested the mark, once it "
                f"evicted it (it keeps the newest {DEFAULT_CAPACITY}), or for an id never "
                "made",
                params=[_path("mark", {"type": "string", "pattern": MARK_PATTERN})])},
            "/metrics": {"get": _op("Prometheus text exposition of this node",
                                    content="text/plain")},
            "/v1/cluster/nodes": {"get": _op(
                "Every node's view (asked over HTTP), replication lag and clock skew vs the "
                "leader")},
            "/v1/alerts": {"get": _op("Alerts with their raise/resolve history", params=[
                _query("status", {"enum": list(alerts.STATUSES), "default": "open"}),
                _query("job_id", JOB_ID),
                _query("cursor", {"type": "string", "maxLength": 600,
                                  "pattern": r"^([0-9]{1,15}\|[\s\S]*)?$"}),
                _query("limit", LIMIT), CONSISTENT])},
            **{f"/v1/alerts/{{alert_id}}/{action}": {"post": _op(
                f"{summary} an open alert by hand, with a note (admin, or the job's tenant); "
                "409 when it is already resolved" + extra,
                params=[_path("alert_id", {"type": "string", "minLength": 1,
                                           "maxLength": alerts.MAX_ALERT_ID})],
                body=NOTE_BODY,
                errors=(404, *RAFT_WRITE))}
               for action, summary, extra in (
                   ("ack", "Acknowledge", " or already acknowledged"), ("resolve", "Resolve", ""))},
            "/v1/status/jobs": {"get": _op(
                "Jobs with schedule in words, next fire times and recent occurrences",
                params=[_query("timeline", {"type": "integer", "minimum": 1,
                                            "maximum": status.TIMELINE_MAX}),
                        _query("q", {"type": "string",
                                     "maxLength": status.MAX_QUERY_CHARS})])},
            "/v1/status/jobs/{job_id}": {"get": _op(
                "One job for its page: schedule in words, next fire times marked where "
                "the zone's UTC offset changes (DST); cron, timezone, dst_gap or dst_fold "
                "propose a schedule (validated as a PUT, nothing written) whose fire times "
                "come back as `proposed`",
                params=[*JOB, _query("fires", {"type": "integer", "minimum": 1,
                                               "maximum": jobpage.MAX_FIRES}),
                        _query("after", INSTANT_TO_9998), _query("cron", CRON),
                        _query("timezone", TIMEZONE),
                        _query("dst_gap", {"enum": ["auto", "skip", "shift"]}),
                        _query("dst_fold", {"enum": ["auto", "once", "both"]})],
                errors=(404,))},
            "/v1/status/jobs/{job_id}/backfill-preview": {"get": _op(
                "The instants a backfill of [start, end] would create (count, first 50; "
                "end not before start, at most ten years); writes nothing",
                params=[*JOB, {**_query("start", INSTANT), "required": True},
                        {**_query("end", INSTANT), "required": True}],
                errors=(404,))},
            "/v1/status/fire-lag": {"get": _op(
                "Per minute: p50/p99 of first-lease time minus dispatch instant of "
                "scheduled occurrences (at most 20,000 newest instants)",
                params=[_query("minutes", {"type": "integer", "minimum": 1,
                                           "maximum": jobpage.LAG_MAX_MINUTES})])},
            "/v1/status/queues": {"get": _op(
                "Per queue: runs due and not yet leased, and how long the oldest has waited")},
            "/v1/attempts": {"get": _op("Running (or pending) attempts with heartbeat age",
                                        params=[_query("status", {"enum": ["running", "pending"]}),
                                                _query("limit", LIMIT)])},
            "/v1/workers": {"get": _op("Workers as derived from the attempts they held")},
            "/v1/schedule/herd": {"get": _op(
                "Occurrences due per bucket over the next hours, from the schedules",
                params=[_query("hours", {"type": "integer", "minimum": 1,
                                         "maximum": status.HERD_MAX_HOURS}),
                        _query("bucket_s", {"type": "integer",
                                            "minimum": status.HERD_BUCKET_S[0],
                                            "maximum": status.HERD_BUCKET_S[1]})])},
            "/v1/jobs": {
                "post": _op("Create a job", body=JOB_INPUT, ok=201, errors=JOB_WRITE),
                "get": _op("List jobs", params=[
                    _query("tenant"), _query("paused", {"enum": ["true", "false"]}),
                    _query("cursor", {"type": "string",
                                      "pattern": r"^([A-Za-z0-9._-]{1,128})?$"}),
                    _query("limit", LIMIT), CONSISTENT]),
            },
            "/v1/jobs:batchCreate": {"post": _op(
                "Create up to 1,000 jobs in one replicated entry; one result per job (for "
                "an existing one: its current_version and the fields that differ)",
                body={"type": "object", "required": ["jobs"], "properties": {
                    "jobs": {"type": "array", "minItems": 1, "maxItems": jobs.MAX_BATCH_CREATE,
                             "items": JOB_INPUT}}},
                errors=RAFT_WRITE)},
            "/v1/jobs:apply": {"post": _op(
                "Make a tenant's jobs match a list of specs (jobs as code): the plan "
                "(create, change field by field with secrets as ***, and with prune "
                "delete) and its expect; an apply sends expect back and commits the plan "
                "whole in one entry, or nothing of it (409 when a job moved since)",
                body={"type": "object", "required": ["jobs"], "additionalProperties": False,
                      "properties": {
                          "jobs": {"type": "array", "minItems": 1,
                                   "maxItems": apply.MAX_APPLY_JOBS, "items": JOB_INPUT},
                          "tenant": NAME,
                          "prune": {"type": "boolean"}, "dry_run": {"type": "boolean"},
                          "selector": {"type": "object", "propertyNames": NAME,
                                       "additionalProperties": LABEL_VALUE},
                          "expect": {"type": "object", "additionalProperties": {
                              "type": "integer", "minimum": 0}}},
                      # An apply sends the plan's expect back; a dry run needs none.
                      "anyOf": [{"required": ["dry_run"],
                                 "properties": {"dry_run": {"const": True}}},
                                {"required": ["expect"]}],
                      # A selector chooses what prune deletes: only with prune.
                      "dependentSchemas": {"selector": {"anyOf": [
                          {"properties": {"selector": {"maxProperties": 0}}},
                          {"required": ["prune"], "properties": {"prune": {"const": True}}}]}}},
                errors=(409, *JOB_WRITE))},
            "/v1/jobs:export": {"get": _any_content(_op(
                "The jobs this token reads as a jobs file (TOML, YAML or JSON) that apply "
                "reads back unchanged; secrets as ***", content="application/toml",
                params=[_query("format", {"enum": list(apply.FORMATS)}), _query("tenant")],
                errors=(413,)), apply.MEDIA_TYPES.values())},
            "/v1/jobs/{job_id}": {
                "get": _op("A job with its next fire times", params=[*JOB, CONSISTENT],
                           errors=(404,)),
                "put": _op("Replace a job." + IF_MATCH, body=JOB_REPLACE,
                           params=JOB, errors=(412, *JOB_WRITE)),
                "delete": _op("Delete a job." + IF_MATCH, params=JOB,
                              errors=(412, *RAFT_WRITE)),
            },
            "/v1/jobs/{job_id}/history": {"get": _op(
                "A job's committed changes, newest first (create, edit, pause, resume, "
                "bulk_pause, bulk_resume, delete): who, when, the job after the change and "
                "the fields changed. 404 once the job is deleted (see /v1/job-history). "
                "`before`: the `next_before` of the previous page",
                params=[*JOB, *HISTORY_PAGE], errors=(404,))},
            "/v1/job-history/{job_id}": {"get": _op(
                "The changes of a job id whether or not it exists now: a deleted job's "
                "stay until retention (its last change is the delete, with the last "
                "definition)", params=[*JOB, *HISTORY_PAGE], errors=(404,))},
            "/v1/jobs/{job_id}/pause": {"post": _op("Pause", params=JOB,
                                                    errors=(404, *RAFT_WRITE))},
            "/v1/jobs/{job_id}/resume": {"post": _op("Resume", params=JOB,
                                                     errors=(404, *RAFT_WRITE))},
            "/v1/jobs/{job_id}/trigger": {"post": _op(
                "Run now (Idempotency-Key header dedupes)", ok=202, params=JOB,
                body={"type": "object", "additionalProperties": False,
                      "properties": {"override_overlap": {"type": "boolean"}}},
                body_required=False, errors=(404, *RAFT_WRITE))},
            "/v1/jobs/{job_id}/backfill": {"post": _op(
                "Create occurrences for the nominal instants in a range (at most ten years "
                f"and {jobs.MAX_BACKFILL:,} instants; end not before start). An instant the "
                "job already has a run of waiting, running or succeeded creates nothing, "
                "whatever the Idempotency-Key (`existing` counts them)", ok=202,
                params=JOB,
                body={"type": "object", "required": ["start", "end"],
                      "additionalProperties": False,
                      "properties": {"start": INSTANT, "end": INSTANT}},
                errors=(404, *RAFT_WRITE))},
            "/v1/jobs:pause": {"post": _op(
                "Pause every job of a tenant, a queue or a label (within the token's "
                "tenants), with a note; each job records who and why", body=BULK_PAUSE,
                errors=RAFT_WRITE)},
            "/v1/jobs:resume": {"post": _op(
                "Resume every job of a tenant, a queue or a label, with a note",
                body=BULK_PAUSE, errors=RAFT_WRITE)},
            "/v1/calendars": {"get": _op("Calendars (a tenant token sees its own)",
                                         params=[CONSISTENT])},
            "/v1/calendars/{name}": {
                "get": _op("A calendar and the jobs that list it",
                           params=[*TENANT, CONSISTENT], errors=(404,)),
                "put": _also_created(_op(
                    "Create (201) or replace (200) a calendar (admin, or its tenant)",
                    body=CALENDAR_INPUT, params=TENANT, errors=RAFT_WRITE)),
                "delete": _op("Delete a calendar; 409 naming the jobs while jobs list it",
                              params=TENANT, errors=(404, *RAFT_WRITE)),
            },
            "/v1/tenants": {"get": _op("Tenants with quotas (a tenant token sees its own)",
                                       params=[CONSISTENT])},
            "/v1/tenants/{name}": {
                "get": _op("One tenant's quotas", params=[*TENANT, CONSISTENT],
                           errors=(404,)),
                "put": _op("Set a tenant's quotas and policy (admin)", body=TENANT_INPUT,
                           params=TENANT, errors=RAFT_WRITE),
            },
            "/v1/tenants/{name}/webhook-key": {
                "get": _op("The key that signs the tenant's notify webhooks (admin)",
                           params=TENANT, errors=(503,)),
                "put": _op("Rotate the tenant's webhook key; answers the new key (admin)",
                           params=TENANT, errors=RAFT_WRITE),
            },
            "/v1/webhook-key": {"get": _op(
                "The key that signs webhooks to the cluster-wide receivers (admin)",
                errors=(503,))},
            "/v1/outbox": {"get": _op(
                "Webhook deliveries given up (dead) or pending, per receiver (admin)", params=[
                    _query("status", {"enum": list(outbox.STATUSES), "default": "dead"}),
                    _query("cursor", {"type": "string", "maxLength": outbox.MAX_CURSOR_LEN,
                                      "pattern": r"^([0-9]{1,18}\|[\s\S]*)?$"}),
                    _query("limit", LIMIT), CONSISTENT])},
            "/v1/outbox/{outbox_id}/retry": {"post": _op(
                "Deliver a dead row again, attempts reset (admin)",
                params=[_path("outbox_id", {"type": "integer", "minimum": 0,
                                            "maximum": outbox.MAX_OUTBOX_ID})],
                body={"type": "object", "additionalProperties": False,
                      "properties": {"receiver": {
                          "type": ["string", "null"], "minLength": 1,
                          "maxLength": model.MAX_URL_LEN,
                          "description": "only the delivery to this receiver (missing or "
                                         "null: every dead delivery of the row)"}}},
                body_required=False, errors=(404, *RAFT_WRITE))},
            "/v1/backup": {"get": _op(
                "A consistent SQLite snapshot of the state (admin)", params=[CONSISTENT],
                content="application/vnd.sqlite3", errors=(503,))},
            "/v1/cluster/members": {
                "get": _op("Cluster members (admin)"),
                "post": _op("Add a member (admin; raftcron cluster add-node)", body={
                    "type": "object", "required": ["id", "raft_addr", "http_url"],
                    "properties": {
                        "id": {"type": "string", "pattern": _anchored(membership.ID_RE)},
                        "raft_addr": {"type": "string",
                                      "pattern": _anchored(membership.ADDR_RE),
                                      "description": "HOST:PORT, port 1-65535"},
                        "http_url": {"type": "string", "maxLength": 500,
                                     "pattern": _anchored(membership.URL_RE)}}},
                    errors=(409, 503)),
            },
            "/v1/cluster/members/{member_id}": {"delete": _op(
                "Remove a member (admin; raftcron cluster remove-node)",
                params=[_path("member_id")], errors=(404, 409, 503))},
            "/v1/occurrences": {"get": _op("List occurrences", params=[
                _query("job_id"), _query("status", {"enum": list(occurrences.STATUSES)}),
                _query("kind", {"enum": list(occurrences.KINDS)}), _query("since", INSTANT),
                _query("until", INSTANT),
                _query("cursor", {"type": "string", "pattern": r"^[0-9]{1,18}:[\s\S]+$"}),
                _query("limit", LIMIT), CONSISTENT])},
            "/v1/occurrences/{occurrence_id}": {"get": _op(
                "An occurrence with its attempts",
                params=[_path("occurrence_id"), CONSISTENT], errors=(404,))},
            "/v1/occurrences/{occurrence_id}/cancel": {"post": _op(
                "Cancel a run, with a note (admin, or the run's tenant): a queued one at "
                "once; a running one is told by its heartbeat answer, killed after a grace "
                "period and ends cancelled. 409 naming the state when it already ended",
                params=[_path("occurrence_id")],
                body=NOTE_BODY,
                errors=(404, *RAFT_WRITE))},
            "/v1/concurrency-groups": {"get": _op(
                "Concurrency groups of the visible tenants (set, or named by a job), with "
                "runs holding and waiting", params=[CONSISTENT])},
            "/v1/concurrency-groups/{name}": {
                "get": _op("One group: limit, jobs, holders and waiters",
                           params=[*TENANT, _query("tenant", NAME), CONSISTENT],
                           errors=(404,)),
                "put": _op(
                    "Set a group's limit (admin, or the group's tenant): at most `limit` "
                    "runs of its jobs hold leases at once, across all workers",
                    params=TENANT, body={
                        "type": "object", "additionalProperties": False,
                        "required": ["limit"], "properties": {
                            "limit": {"type": "integer", "minimum": 1,
                                      "maximum": groups.MAX_LIMIT},
                            "tenant": NAME}},
                    errors=RAFT_WRITE)},
            "/v1/leases": {"post": _op(
                "Lease due runs (long poll, up to wait_s seconds)", body=LEASES,
                errors=(503,), extra={"x-long-poll": {"parameter": "wait_s",
                                                      "max_s": workers.MAX_WAIT_S}})},
            "/v1/heartbeats": {"post": _op("Heartbeat many attempts", body=HEARTBEATS,
                                           errors=(403, 503))},
            "/v1/releases": {"post": _op("Hand leases back unrun", body=PAIRS,
                                         errors=(403, 503))},
            "/v1/completions": {"post": _op("Report many outcomes", body=COMPLETIONS,
                                            errors=(403, 503))},
            "/v1/attempts/{attempt_id}/heartbeat": {"post": _op(
                "Heartbeat one attempt", params=[_path("attempt_id", ATTEMPT_ID)],
                body={"type": "object", "required": ["worker_id", "fencing_token"],
                      "properties": {"worker_id": WORKER_ID, "fencing_token": FENCING_TOKEN}},
                errors=(404, 409, 503))},
            "/v1/attempts/{attempt_id}/complete": {"post": _op(
                "Report one outcome", params=[_path("attempt_id", ATTEMPT_ID)],
                body={"type": "object", "required": ["worker_id", "fencing_token", "outcome"],
                      "properties": {"worker_id": WORKER_ID, **OUTCOME_FIELDS},
                      **OUTCOME_TIMES},
                errors=(404, 409, 503))},
        },
    }
