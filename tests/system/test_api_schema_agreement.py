"""/openapi.json and the validators agree, field by field, on a real node.

For every declared field of every operation (body properties, nested ones included, and
query and path parameters) the test takes values on both sides of what the schema
declares: its bounds and one past them, its enum and a value outside it, the wrong type,
null, one character or item too many, and hand-picked values for patterns and formats.
Each value is first classified by a JSON Schema validator over the served schema (so the
table cannot drift from the schema), then sent: a schema-valid value must be accepted
(anything but 400/413/422 and never 5xx; a 404 for a resource that does not exist means
it passed validation), a schema-invalid one refused with a 400 naming the field. A field
declared without cases fails the test.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jsonschema_rs
import pytest

from raftcron.core.one_time import compile_once, parse_at, parse_every
from raftcron.core.schedule import ScheduleError, compile_schedule
from raftcron.testing import LocalCluster
from tests.system.helpers import serving_cluster

pytestmark = pytest.mark.system

Path_ = tuple[str | int, ...]
_ids = itertools.count()


def is_cron(text: str) -> bool:
    """`format: cron`, as the schedule validator reads it."""
    try:
        compile_schedule(text, "UTC", hash_key="x")
    except ScheduleError:
        return False
    return True


def is_local_date_time(text: str) -> bool:
    """`format: local-date-time` (a one-time schedule's time), as the validator reads it."""
    try:
        compile_once(parse_at(text, "at"), "UTC", "auto", "auto")
    except ScheduleError:
        return False
    return True


def is_interval(text: str) -> bool:
    """`format: interval`, as the validator reads it."""
    try:
        parse_every(text, "every")
    except ScheduleError:
        return False
    return True


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with serving_cluster(Path(tmp_path_factory.mktemp("agreement")), nodes=1) as c:
        job = {"id": "agree", "schedule": {"cron": "0 9 * * *"}, "target": {"shell": "true"}}
        assert c.post("n1", "/v1/jobs", job).status_code == 201
        # The upstream the chained cases follow (a valid id of no job is refused by the
        # state with 400 invalid_reference, so the valid cases name this one).
        up = {"id": CHAIN_UPSTREAM, "schedule": "0 9 * * *", "target": {"shell": "true"}}
        assert c.post("n1", "/v1/jobs", up).status_code == 201
        yield c


@pytest.fixture(scope="module")
def spec(node: LocalCluster) -> dict[str, Any]:
    resp = node.http.get(node.urls["n1"] + "/openapi.json")
    assert resp.status_code == 200
    return resp.json()


# --- requests: a valid base per operation, and what to substitute -------------------------

JOB_TARGET_BASES = {"shell": {"shell": "true"}, "http": {"http": {"url": "https://ex.test/h"}}}
# A schedule of the kind a field belongs to (`at`: one-time; `every`, `anchor`: interval).
SCHEDULE_KIND_BASES = {"at": {"at": "2030-01-01T09:00:00"}, "every": {"every": "1h"},
                       "anchor": {"every": "1h"}}
PAIR = {"attempt_id": "a-1", "fencing_token": 1}
CHAIN_UPSTREAM = "agree-up"
# A job's `after` (a chained job, instead of a schedule): (valid, invalid).
JOB_AFTER = ([{"job": CHAIN_UPSTREAM}, {"job": CHAIN_UPSTREAM, "on": "failure"}],
             [{}, {"job": CHAIN_UPSTREAM, "when": "x"}, {"on": "finish"}, "agree-up", [], None])
JOB_AFTER_JOB = ([CHAIN_UPSTREAM], ["", "a b", "x" * 129, 5, None])
RUN_TIMES = {"started_ms": 1_790_000_000_000, "duration_ms": 200}


def _job() -> dict[str, Any]:
    return {"id": f"agree-{next(_ids)}", "schedule": {"cron": "0 9 * * *"},
            "target": {"shell": "true"}}


# (method, path) -> (path parameters, base body or None). Bodies are built per case.
BASES: dict[tuple[str, str], tuple[dict[str, str], Any]] = {
    ("POST", "/v1/jobs"): ({}, _job),
    ("PUT", "/v1/jobs/{job_id}"): ({"job_id": "agree"}, lambda: {
        "schedule": {"cron": "0 9 * * *"}, "target": {"shell": "true"}}),
    ("POST", "/v1/jobs:batchCreate"): ({}, lambda: {"jobs": [_job()]}),
    # A dry run: the plan is computed, nothing is applied. Sent as an apply (dry_run
    # false), the empty expect is not the plan's: 409, nothing applied.
    ("POST", "/v1/jobs:apply"): ({}, lambda: {"jobs": [_job()], "tenant": "agree-apply",
                                              "dry_run": True, "expect": {}}),
    ("PUT", "/v1/tenants/{name}"): ({"name": "agree"}, dict),
    ("POST", "/v1/alerts/{alert_id}/ack"): ({"alert_id": "none:x"}, lambda: {"note": "why"}),
    ("POST", "/v1/alerts/{alert_id}/resolve"): ({"alert_id": "none:x"},
                                                lambda: {"note": "why"}),
    ("POST", "/v1/jobs/{job_id}/trigger"): ({"job_id": "agree"}, dict),
    ("POST", "/v1/occurrences/{occurrence_id}/cancel"): ({"occurrence_id": "absent"},
                                                          lambda: {"note": "why"}),
    ("PUT", "/v1/concurrency-groups/{name}"): ({"name": "agree"}, lambda: {"limit": 2}),
    ("POST", "/v1/jobs/{job_id}/backfill"): ({"job_id": "agree"}, lambda: {
        "start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"}),
    ("POST", "/v1/outbox/{outbox_id}/retry"): ({"outbox_id": "1"}, dict),
    ("POST", "/v1/leases"): ({}, lambda: {"worker_id": "w", "queues": ["agree-q"],
                                          "wait_s": 0}),
    ("POST", "/v1/heartbeats"): ({}, lambda: {"worker_id": "w", "attempts": [dict(PAIR)]}),
    ("POST", "/v1/releases"): ({}, lambda: {"worker_id": "w", "attempts": [dict(PAIR)]}),
    # A run's start comes with its duration (dependentRequired): both in the base.
    ("POST", "/v1/completions"): ({}, lambda: {"worker_id": "w", "completions": [
        {**PAIR, "outcome": "failed", **RUN_TIMES}]}),
    ("POST", "/v1/attempts/{attempt_id}/heartbeat"): ({"attempt_id": "a-1"}, lambda: {
        "worker_id": "w", "fencing_token": 1}),
    ("POST", "/v1/attempts/{attempt_id}/complete"): ({"attempt_id": "a-1"}, lambda: {
        "worker_id": "w", "fencing_token": 1, "outcome": "failed", **RUN_TIMES}),
    ("GET", "/v1/status/jobs/{job_id}"): ({"job_id": "agree"}, None),
    ("GET", "/v1/status/jobs/{job_id}/backfill-preview"): ({"job_id": "agree"}, None),
    ("PUT", "/v1/calendars/{name}"): ({"name": "agree-cal"}, lambda: {"exclude": []}),
    ("PUT", "/v1/channels/{name}"): ({"name": "agree-chan"}, lambda: {
        "webhook": {"url": "https://ex.test/h"}}),
    ("POST", "/v1/jobs:pause"): ({}, lambda: {"note": "why", "queue": "agree-none"}),
    ("POST", "/v1/jobs:resume"): ({}, lambda: {"note": "why", "queue": "agree-none"}),
    ("POST", "/v1/cluster/members"): ({}, lambda: {
        "id": "n9", "raft_addr": "127.0.0.1:1", "http_url": "http://127.0.0.1:1"}),
}
# Query parameters an operation needs besides the one a case varies.
BASE_QUERY = {("GET", "/v1/status/jobs/{job_id}/backfill-preview"): {
    "start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"}}
# Path parameters of the other operations: a value that passes validation.
PATH_VALUES = {"job_id": "absent.job-1", "name": "absent", "occurrence_id": "absent",
               "member_id": "absent", "alert_id": "none:x", "outbox_id": "1",
               "attempt_id": "a-1", "mark": "digest-mark-" + "0" * 32}
# A valid add would change the membership of the node under test: invalid values only.
INVALID_ONLY = {("POST", "/v1/cluster/members")}
# The error's `field` for a path parameter, where the validator names it otherwise.
ERROR_FIELD = {"job_id": "id", "alert_id": "id", "outbox_id": "id"}
# batchCreate's items are the job schema, covered field by field on POST /v1/jobs.
NOT_DESCENDED = {("POST", "/v1/jobs:batchCreate", ("jobs", 0)),
                 ("POST", "/v1/jobs:apply", ("jobs", 0))}

INSTANTS = (["2026-01-01T00:00:00Z", "2026-06-01T12:30:00.250+02:00",
             "1970-01-01T00:00:00Z"],
            ["2026-01-01T00:00:00", "1969-12-31T23:59:59Z", "2026-13-01T00:00:00Z",
             "yesterday", "", 5])
# Hand-picked values for strings and structures, by field name: (valid, invalid).
EXAMPLES: dict[str, tuple[list[Any], list[Any]]] = {
    "id": (["a", "A.b_c-9", "x" * 128], ["", "x" * 129, "a b", "j\u00e9", 7, None]),
    "tenant": (["acme", "t" * 64], ["", "t" * 65, "a/b", None]),
    "concurrency_group": (["db-heavy", "g" * 64, None], ["", "g" * 65, "a b", 5]),
    "queue": (["q1", "q" * 64], ["", "q" * 65, "a b", None]),
    "name": (["acme"], ["a b", "x" * 65]),
    "schedule": (["0 9 * * *", {"cron": "*/10 * * * * *"}],
                 ["", "61 * * * *", {"every": 0}, {"cron": "* * * * *", "at": "x"}, [],
                  None]),
    "at": (["2030-01-01T09:00:00", "2030-01-01T09:00", "2030-06-01T12:00:00Z",
            ["2030-01-01T09:00:00", "2031-01-01T09:00:00"]],
           ["tomorrow", "2030-02-30T09:00:00", "1969-12-31T23:59:59Z", "", 5, [], None]),
    "every": (["1h", "90m", "1h30m", 60], ["0s", "367d", "1.5h", "m90", "", 0, None]),
    "anchor": (["2026-01-01T00:15:00Z", "2026-01-01T01:15:00+01:00"],
               ["yesterday", "2026-01-01T00:15:00.500Z", "2026-01-01T00:15:00", 5]),
    "cron": (["0 9 * * *", "*/10 * * * * *", "@daily", "H H * * 1-5", "0 9 L * *"],
             ["", "   ", "61 * * * *", "0 0 30 2 *", "@never", "x", 5, None]),
    "timezone": (["UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires"],
                 ["Mars/Olympus", "localtime", "", "utc ", 1, None]),
    "start_at": ([*INSTANTS[0], None], INSTANTS[1]),
    "end_at": ([*INSTANTS[0][:2], None], INSTANTS[1]),
    "start": (["2026-01-01T00:00:00Z", "2026-01-01T12:30:00.250+02:00"], INSTANTS[1]),
    "end": (["2026-01-02T00:00:00Z", "2026-01-01T02:00:00+01:00"], INSTANTS[1]),
    "after": (INSTANTS[0][:2] + ["9998-12-31T23:59:59Z"],
              INSTANTS[1][:4] + ["9999-06-01T00:00:00Z"]),
    "since": INSTANTS,
    "until": INSTANTS,
    "target": ([{"shell": "echo hi"}, {"http": {"url": "https://ex.test/h"}}],
               [{}, {"shell": "x", "http": {"url": "https://ex.test"}}, {"exec": "x"},
                "true", None]),
    "shell": (["true", "echo 'a  b'"], ["", "  \n ", "a\x00b", "x" * 16_385, 5, None]),
    "http": ([{"url": "http://ex.test"}], [{"url": "https://ex.test", "verb": "GET"},
                                           {"method": "GET"}, "https://ex.test", None]),
    "url": (["https://ex.test/h?x=1", "HTTP://10.0.0.1:8080"],
            ["ftp://ex.test", "https://", "http://[", "https://ex.test/" + "x" * 2048,
             "ex.test", 5, None]),
    "method": (["GET", "post", "Delete"], ["TRACE", "", 5]),
    "headers": ([{"X-A": "1"}, {"X-Key": {"secret": "api-key"}}, {}, None],
                [{"X-A": "a\nb"}, {"X\r": "1"}, {"X-A": 5}, {"X-A": {"secret": "a b"}},
                 {f"h{i}": "v" for i in range(51)}, "", []]),
    "body": (["{}", {"secret": "payload"}, None], [5, {"secret": ""}, {"other": "x"}]),
    "notify": ([["https://hooks.test/a"], []], [["ftp://x"], ["https://"], ["http://["],
                                                ["https://h.test"] * 11, "https://h.test",
                                                [{"channel": "a b"}], [{"chan": "x"}],
                                                None]),
    # A valid name of no channel passes the schema and is refused by the state (400 too,
    # naming notify.N.channel): only invalid names are sent here.
    "channel": ([], ["a b", "", 5, None]),
    # Channels (PUT /v1/channels/{name}).
    "slack": ([{"webhook_url": "https://hooks.test/T/B/x"}],
              [{}, {"webhook_url": "ftp://x"}, {"url": "https://h.test"}, "x", None]),
    "webhook_url": (["https://hooks.test/T/B/x"], ["ftp://x", "https://", "", 5, None]),
    "email": ([{"host": "smtp.ex.test", "from": "a@ex.test", "to": ["b@ex.test"]}],
              [{}, {"host": "smtp.ex.test"}, "x", None]),
    "host": (["smtp.ex.test", "10.0.0.1"], ["a b", "", "h" * 254, 5, None]),
    "from": (["cron@ex.test"], ["cron", "A <a@ex.test>", "", 5, None]),
    "to": ([["a@ex.test"], ["a@ex.test", "b@ex.test"]],
           [[], ["x"], ["a@ex.test"] * 21, "a@ex.test", None]),
    "username": (["cron"], ["a b", "", 5, None]),
    "password": ([{"secret": "pw"}], [{"secret": ""}, {"name": "x"}, "pw", None]),
    "webhook": ([{"url": "https://ex.test/h"}], [{}, {"url": "ftp://x"}, "x", None]),
    "note": (["why", "n" * 1000], ["", "   ", "n" * 1001, 5, None]),
    "worker_id": (["w", "host-12 ~!", "w" * 128], ["", "w" * 129, "w\u00e9", "w\n", 5]),
    "attempt_id": (["a-1", "a" * 512], ["", "a" * 513, 5]),
    "receiver": (["https://hooks.test/a"], ["", "x" * 2049, 5]),
    "queues": ([["agree-q", "q2"]], [[], ["a b"], [f"q{i}" for i in range(51)], "q"]),
    "version": ([1, None, "anything"], []),  # ignored: every value is valid
    "raft_addr": ([], ["127.0.0.1", "host:port", "", 5]),
    "http_url": ([], ["ftp://x", "http://", 5]),
    "job_id": (["agree", "absent.job-1"], ["a b", "x" * 129]),
    "occurrence_id": (["absent"], []),
    "member_id": (["absent"], []),
    "mark": (["digest-mark-" + "0" * 32], ["x", "digest-mark-" + "G" * 32,
                                          "digest-mark-" + "0" * 33]),
    "tenant_query": (["acme", "any thing"], []),
    "consistent": (["true", "FALSE", "1", "no", ""], ["maybe", "truth"]),
    "alert_id": (["missed:x", "a/b"], ["", "x" * 601]),
    "secret": (["api-key"], ["", "a b", 5]),
    "jobs": ([[{"id": "agree-batch", "schedule": "0 9 * * *", "target": {"shell": "true"}}]],
             [[], "x", [{"id": "agree-batch", "schedule": "0 9 * * *",
                         "target": {"shell": "true"}}] * 1001]),
    "attempts": ([[PAIR]], [[], "x", [PAIR] * 1001]),
    # jobs:apply (its base is a dry run without prune, so a non-empty selector is refused).
    "selector": ([{}], [{"team": "billing"}, {"a b": "x"}, {"team": "a b"}, "x", None]),
    "expect": ([{}, {"agree-x": 3}], [{"a": -1}, {"a": "1"}, {"a": True}, "x", None]),
    "completions": ([[{**PAIR, "outcome": "failed"}]], [[], "x"]),
    "output": (["", "log"], [5, ["x"]]),
    "http_hosts": ([["ex.test", "*.ex.test", "10.0.0.1", "Ex.Test."], []],
                   [["bad host"], ["*.test"], ["-x.test"], "ex.test"]),
    "targets": ([["shell"], ["shell", "http"], []], [["exec"], "shell"]),
    "schedules": ([[{"cron": "0 9 * * *"}, {"cron": "0 12 * * 6", "name": "sat"}],
                   ["0 9 * * *"], [{"cron": "0 9 * * *", "timezone": "Europe/Berlin"}]],
                  [[], [{"cron": "61 * * * *"}], [{"cron": "0 9 * * *", "name": "a b"}],
                   [{"cron": "0 9 * * *", "every": 2}], [{"cron": "0 9 * * *"}] * 17,
                   "0 9 * * *", None]),
    # A valid name of no calendar passes validation and is refused by the state (404).
    "calendars": ([[], ["no-such-cal"]], [["a b"], ["a", "a"], [f"c{i}" for i in range(9)],
                                          "c", None]),
    "labels": ([{"team": "billing"}, {}, {"empty": ""}],
               [{"team": "a b"}, {"a b": "x"}, {"t": 5}, {f"k{i}": "v" for i in range(17)},
                [], "x", None]),
    "exclude": ([[], [{"date": "2026-12-25"}],
                 [{"cron": "* * 24-26 12 *"},
                  {"start": "2026-12-24T00:00:00Z", "end": "2026-12-27T00:00:00+01:00"}]],
                [[{"date": "2026-02-30"}], [{"date": "25.12.2026"}], [{"cron": "61 * * * *"}],
                 [{"day": "x"}], [{"date": "2026-12-25", "cron": "* * * * *"}],
                 [{"start": "2026-12-24T00:00:00Z"}], [{"date": "2026-12-25"}] * 201, "x",
                 None]),
    "label": (["team=billing", "team="], ["team", "=x", "a b=c", "t=a b", 5]),
}
# Bulk pause takes exactly one selector: a case varying one removes the base's queue.
BULK_PATHS = {"/v1/jobs:pause", "/v1/jobs:resume"}
# A channel is exactly one kind: a case varying one removes the base's webhook.
CHANNEL_KINDS = {"slack": {"webhook_url": "https://ex.test/s"},
                 "email": {"host": "smtp.ex.test", "from": "a@ex.test", "to": ["b@ex.test"]},
                 "webhook": {"url": "https://ex.test/h"}}
SELECTORS = {"tenant", "queue", "label"}
# Query cursors differ per listing: (valid, invalid).
CURSORS = {
    "/v1/jobs": (["", "agree"], ["a b"]),
    "/v1/alerts": (["", "1767225600000|missed:x"], ["x", "1|" + "x" * 600]),
    "/v1/outbox": (["", "12|https://h.test"], ["x", "9999999999999999999|x"]),
    "/v1/occurrences": (["1767225600000:agree:x"], ["", "x:y", "1:"]),
}
LONG_POLL_MAX_SENT_S = 0.5  # a long poll's upper bound is checked by the schema only


# --- the cases -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    method: str
    path: str
    where: str  # body, query or path
    field: Path_
    value: Any
    valid: bool

    def label(self) -> str:
        shown = repr(self.value)
        return f"{self.method} {self.path} {self.where}:{'.'.join(map(str, self.field))}=" \
               f"{shown[:60]}{'...' if len(shown) > 60 else ''}"


def _types(schema: dict[str, Any]) -> list[str]:
    t = schema.get("type", [])
    return [t] if isinstance(t, str) else list(t)


def generated(schema: dict[str, Any], *, in_query: bool = False) -> tuple[list[Any], list[Any]]:
    """Values on both sides of what `schema` declares (its bounds, enum, type, sizes)."""
    valid: list[Any] = []
    invalid: list[Any] = []
    types = _types(schema)
    if "enum" in schema:
        valid += [schema["enum"][0], schema["enum"][-1]]
        invalid += ["no-such-choice"]
    if "integer" in types or "number" in types:
        lo, hi = schema.get("minimum"), schema.get("maximum")
        step = 1 if "integer" in types else 0.5
        valid += [b for b in (lo, hi) if b is not None]
        invalid += [lo - step] if lo is not None else []
        invalid += [hi + step] if hi is not None else []
        invalid += ["x"] if in_query else ["1", True]
        if "integer" in types:
            invalid.append("1.5" if in_query else 1.5)
            if not in_query and lo is not None:
                valid.append(float(lo))  # JSON Schema: 3.0 is an integer
    if "boolean" in types:
        valid += [True, False]
        invalid += ["yes", 1]
    if "string" in types and "maxLength" in schema and "pattern" not in schema:
        invalid.append("x" * (schema["maxLength"] + 1))
        if in_query and "format" not in schema:
            valid.append("x" * schema["maxLength"])  # a free text, as long as allowed
    if "array" in types:
        invalid.append({})
        if schema.get("minItems"):
            invalid.append([])
    if "null" in types:
        valid.append(None)
    elif not in_query and types and "enum" not in schema:
        invalid.append(None)
    if not in_query and types == ["string"]:
        invalid.append(5)
    return valid, invalid


def resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def declared_fields(spec: dict[str, Any], method: str, path: str, schema: dict[str, Any],
                    prefix: Path_ = ()) -> Iterator[tuple[Path_, dict[str, Any]]]:
    """Every property path of a body schema, through nested objects, array items and the
    object branches of anyOf/oneOf."""
    yield from _fields(spec, method, path, schema, prefix, emit=bool(prefix))


def _fields(spec: dict[str, Any], method: str, path: str, schema: dict[str, Any],
            prefix: Path_, *, emit: bool) -> Iterator[tuple[Path_, dict[str, Any]]]:
    """A branch of anyOf/oneOf is not a field of its own (a value one branch refuses,
    another may take): only its properties are."""
    schema = resolve(spec, schema)
    if emit:
        yield prefix, schema
    if (method, path, prefix) in NOT_DESCENDED:
        return
    for branch in schema.get("anyOf", []) + schema.get("oneOf", []):
        yield from _fields(spec, method, path, branch, prefix, emit=False)
    for name, sub in schema.get("properties", {}).items():
        yield from _fields(spec, method, path, sub, (*prefix, name), emit=True)
    items = schema.get("items")
    if isinstance(items, dict) and resolve(spec, items).get("properties") \
            and (method, path, (*prefix, 0)) not in NOT_DESCENDED:
        for name, sub in resolve(spec, items)["properties"].items():
            yield from _fields(spec, method, path, sub, (*prefix, 0, name), emit=True)


# Where one name means another field: (path, name) -> (valid, invalid).
EXAMPLES_BY_PATH: dict[tuple[str, str], tuple[list[Any], list[Any]]] = {
    # A PUT body may repeat its URL's job id (the description says so), and only that id.
    ("/v1/jobs/{job_id}", "id"): (["agree"], ["", "x" * 129, "a b", 7, None]),
    ("/v1/concurrency-groups/{name}", "tenant"): (["acme", "t" * 64], ["a b", "t" * 65]),
    # An e-mail channel's password is the secret itself (any text), not a secret's name.
    ("/v1/channels/{name}", "secret"): (["pw", "a b"], ["", "x" * 1025, 5, None]),
    # A valid name of no calendar is refused by the state (400 invalid_reference).
    ("/v1/channels/{name}", "mute"): ([None], ["a b", "x" * 65, 5, []]),
    ("/v1/tenants/{name}", "queues"): ([[], ["q1", "q1"]],
                                       [["a b"], [f"q{i}" for i in range(101)], "q"]),
}


def _examples(method: str, path: str, where: str, field: Path_) -> tuple[list[Any], list[Any]]:
    leaf = str(field[-1])
    if (path, leaf) in EXAMPLES_BY_PATH:
        return EXAMPLES_BY_PATH[path, leaf]
    if where == "body" and tuple(field) == ("after",):
        return JOB_AFTER
    if where == "body" and tuple(field) == ("after", "job"):
        return JOB_AFTER_JOB
    if leaf == "cursor":
        return CURSORS[path]
    if leaf == "tenant" and where == "query":
        return EXAMPLES["tenant_query"]
    if leaf == "job_id" and where == "query":
        return (["agree"], ["a b"]) if path == "/v1/alerts" else (["agree", "a b"], [])
    return EXAMPLES.get(leaf, ([], []))


def cases(spec: dict[str, Any]) -> Iterator[Case]:
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            m = method.upper()
            fields: list[tuple[str, Path_, dict[str, Any]]] = []
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None:
                fields += [("body", f, s) for f, s in declared_fields(spec, m, path,
                                                                      body["schema"])]
            for p in op.get("parameters", []):
                fields.append((p["in"], (p["name"],), p["schema"]))
            for where, field, schema in fields:
                valid, invalid = generated(resolve(spec, schema), in_query=where != "body")
                more_valid, more_invalid = _examples(m, path, where, field)
                if where != "body":  # text on the wire: a JSON type means nothing there
                    more_invalid = [v for v in more_invalid if isinstance(v, str)]
                long_poll = op.get("x-long-poll", {}).get("parameter") == field[-1]
                valid = [v for v in valid + more_valid
                         if not (long_poll and isinstance(v, float | int)
                                 and v > LONG_POLL_MAX_SENT_S)]
                if (m, path) in INVALID_ONLY:
                    valid = []
                for key in dict.fromkeys(map(_key, valid)):
                    yield Case(m, path, where, field, _unkey(key), True)
                for key in dict.fromkeys(map(_key, invalid + more_invalid)):
                    yield Case(m, path, where, field, _unkey(key), False)


def _key(value: Any) -> tuple[str, str]:
    """A hashable, type-preserving key (1, 1.0 and True stay three values)."""
    return type(value).__name__, json.dumps(value, sort_keys=True)


def _unkey(key: tuple[str, str]) -> Any:
    value = json.loads(key[1])
    return float(value) if key[0] == "float" else value


# --- classification by the schema, and the request -----------------------------------------

def _set(container: Any, field: Path_, value: Any) -> None:
    """Put `value` at `field`, making the parents on the way the shape it needs (a
    target of the branch named next, an object where a string or nothing was)."""
    for i, key in enumerate(field[:-1]):
        nxt = field[i + 1]
        if key == "target" and isinstance(nxt, str) and nxt in JOB_TARGET_BASES:
            container[key] = copy.deepcopy(JOB_TARGET_BASES[nxt])
        elif key == "schedule" and isinstance(nxt, str) and nxt in SCHEDULE_KIND_BASES:
            container[key] = copy.deepcopy(SCHEDULE_KIND_BASES[nxt])
        elif key == "schedule" and not isinstance(container.get(key), dict):
            container[key] = {"cron": "0 9 * * *"}
        elif isinstance(key, str) and not isinstance(container.get(key), dict | list):
            container[key] = {}
        container = container[key]
    container[field[-1]] = value


def _op_validator(spec: dict[str, Any], schema: dict[str, Any]) -> jsonschema_rs.Validator:
    return jsonschema_rs.validator_for({**schema, "components": spec["components"]},
                                       formats={"cron": is_cron,
                                                "local-date-time": is_local_date_time,
                                                "interval": is_interval},
                                       validate_formats=True)


def _query_value(schema: dict[str, Any], value: Any) -> Any:
    """A query or path value as the schema reads it (the wire carries text)."""
    if "integer" in _types(schema) and isinstance(value, str) and re.fullmatch(r"-?\d+",
                                                                               value):
        return int(value)
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def request_of(spec: dict[str, Any], case: Case) -> tuple[bool, dict[str, Any], str]:
    """(schema says valid, httpx request arguments, url path)."""
    op = spec["paths"][case.path][case.method.lower()]
    path_values, make_body = BASES.get((case.method, case.path), ({}, None))
    params = {p["name"]: path_values.get(p["name"], PATH_VALUES.get(p["name"]))
              for p in op.get("parameters", []) if p["in"] == "path"}
    query: dict[str, str] = dict(BASE_QUERY.get((case.method, case.path), {}))
    kwargs: dict[str, Any] = {}
    body_schema = op.get("requestBody", {}).get("content", {}).get("application/json")
    body = make_body() if make_body is not None else None
    if case.path == "/v1/channels/{name}" and case.field[0] in CHANNEL_KINDS:
        body.pop("webhook")
        if len(case.field) > 1:
            body[case.field[0]] = copy.deepcopy(CHANNEL_KINDS[str(case.field[0])])
        if case.field[1:2] in (("username",), ("password",)):  # they go together
            body["email"].update(username="u", password={"secret": "pw"})
    if case.path in BULK_PATHS and case.field[0] in SELECTORS:
        body.pop("queue")
    if case.field[0] == "schedules" and isinstance(body, dict):
        body.pop("schedule", None)  # one form or the other
    if case.where == "body" and case.field[0] == "after" and isinstance(body, dict):
        body.pop("schedule", None)  # a chained job has none
        if len(case.field) > 1:
            body["after"] = {"job": CHAIN_UPSTREAM}
    if case.where == "body":
        _set(body, case.field, case.value)
        schema_valid = _op_validator(spec, body_schema["schema"]).is_valid(body)
    else:
        param = next(p for p in op["parameters"] if p["name"] == case.field[0])
        schema_valid = _op_validator(spec, param["schema"]).is_valid(
            _query_value(resolve(spec, param["schema"]), case.value))
        if case.where == "path":
            params[case.field[0]] = _text(case.value)
        else:
            query[str(case.field[0])] = _text(case.value)
    if body is not None:
        kwargs["json"] = body
    url_path = case.path
    for name, value in params.items():
        url_path = url_path.replace("{" + name + "}", quote(value, safe=""))
    if query:
        kwargs["params"] = query
    return schema_valid, kwargs, url_path


def _normal(field: str) -> str:
    return re.sub(r"\[(\d+)\]", r".\1", field).removeprefix("body.")


@pytest.fixture(scope="module")
def all_cases(spec: dict[str, Any]) -> list[Case]:
    return list(cases(spec))


def _sides(method: str, path: str, where: str, field: Path_) -> list[bool]:
    """Which cases a field needs: a valid and an invalid one, except where one side
    cannot exist (any value or text is valid) or must not be sent (INVALID_ONLY)."""
    if field == ("version",) or field[-1] in ("occurrence_id", "member_id") or (
            where == "query" and field[-1] in ("tenant", "job_id") and path != "/v1/alerts"):
        return [True]
    if (method, path) in INVALID_ONLY:
        return [False]
    return [True, False]


def test_every_declared_field_has_a_valid_and_an_invalid_case(
        spec: dict[str, Any], all_cases: list[Case]) -> None:
    seen = {(c.method, c.path, c.where, c.field, c.valid) for c in all_cases}
    missing = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            m = method.upper()
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            fields = [("body", f) for f, _ in declared_fields(spec, m, path, body["schema"])] \
                if body else []
            fields += [(p["in"], (p["name"],)) for p in op.get("parameters", [])]
            for where, field in fields:
                sides = _sides(m, path, where, field)
                for valid in sides:
                    if (m, path, where, field, valid) not in seen:
                        missing.append(f"{m} {path} {where}:{'.'.join(map(str, field))} "
                                       f"({'valid' if valid else 'invalid'})")
    assert not missing, "fields without cases:\n" + "\n".join(missing)


def test_schema_and_validators_agree_on_every_field(node: LocalCluster, spec: dict[str, Any],
                                                    all_cases: list[Case]) -> None:
    assert len(all_cases) > 400
    disagreements: list[str] = []
    http = node.http
    base = node.urls["n1"]
    for case in all_cases:
        schema_valid, kwargs, url_path = request_of(spec, case)
        if schema_valid != case.valid:
            disagreements.append(f"{case.label()}: the schema says "
                                 f"{'valid' if schema_valid else 'invalid'}")
            continue
        resp = http.request(case.method, base + url_path, **kwargs)
        if resp.status_code >= 500:
            disagreements.append(f"{case.label()}: {resp.status_code} {resp.text[:200]}")
        elif case.valid and resp.status_code in (400, 413, 422):
            disagreements.append(f"{case.label()}: schema-valid, refused "
                                 f"{resp.status_code} {resp.text[:200]}")
        elif not case.valid:
            expected = ERROR_FIELD.get(str(case.field[-1]), ".".join(map(str, case.field))) \
                if case.where == "path" else ".".join(map(str, case.field))
            field = resp.json().get("error", {}).get("field", "") \
                if resp.status_code == 400 else ""
            got = _normal(field)
            # The field itself, a part of it, or the field that holds it (a bad secret
            # reference is named by the header or body it stands for).
            named = got == expected or got.startswith(expected + ".") \
                or (got != "" and expected.startswith(got + "."))
            if resp.status_code != 400 or not named:
                disagreements.append(f"{case.label()}: schema-invalid, answered "
                                     f"{resp.status_code} {resp.text[:200]}")
    assert not disagreements, f"{len(disagreements)} of {len(all_cases)} cases disagree:\n" \
        + "\n".join(disagreements)
