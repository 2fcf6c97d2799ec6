"""api/schema_gate.py: the schema /openapi.json serves is what the server checks a body
against, and a refusal names the precise field and the reason in the API's words."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest
from starlette.routing import Route

from raftcron.api import schema_gate
from raftcron.api.app import PAGE_PATHS, ROUTES
from raftcron.api.openapi import openapi_spec
from raftcron.api.schema_gate import check_body, document_path
from raftcron.core.errors import ValidationError
from raftcron.core.model import parse_job

SHELL = {"shell": "echo hi"}


def job(**fields: Any) -> dict[str, Any]:
    return {"id": "report", "schedule": "0 9 * * *", "target": SHELL, **fields}


REFUSED = [
    # (method, path, body, field, words of the reason)
    ("POST", "/v1/jobs", [], "body", "must be an object"),
    ("POST", "/v1/jobs", job(id="a b"), "id", "must match ^[A-Za-z0-9._-]{1,128}$"),
    ("POST", "/v1/jobs", job(target={"http": {"url": "ftp://x"}}), "target.http.url",
     "must match"),
    ("POST", "/v1/jobs", job(target={"shell": ""}), "target.shell", "must not be empty"),
    ("POST", "/v1/jobs", job(target={"sh": "x"}), "target", "exactly one of shell, http"),
    ("POST", "/v1/jobs", job(target={"http": {"url": "http://x", "body": 5}}),
     "target.http.body", "must be a string or an object or null"),
    ("POST", "/v1/jobs", job(target={"http": {"url": "http://x", "headers": {"a": 5}}}),
     "target.http.headers.a", "must be a string or an object"),
    ("POST", "/v1/jobs", job(schedule={"cron": "* * * * *", "timezone": "Mars/Base"}),
     "schedule.timezone", "must be an IANA time zone name"),
    ("POST", "/v1/jobs", job(schedule={"cron": "* * * * *", "jitter_s": 99_999}),
     "schedule.jitter_s", "must be between 0 and 3600"),
    ("POST", "/v1/jobs", {"id": "a", "target": SHELL, "schedules": ["* * * * *", 5]},
     "schedules.1", "must be an object or a string"),
    ("POST", "/v1/jobs", {"id": "a", "target": SHELL,
                          "schedules": ["* * * * *", {"cron": "x", "bogus": 1}]},
     "schedules.1.bogus", "unknown field"),
    ("POST", "/v1/jobs", {"id": "a", "target": SHELL, "schedule": "* * * * *",
                          "schedules": ["* * * * *"]},
     "body", "needs exactly one of schedule, schedules"),
    ("POST", "/v1/jobs", {"id": "a", "target": SHELL}, "body",
     "needs exactly one of schedule, schedules"),
    ("POST", "/v1/jobs", job(max_attempts=0), "max_attempts", "must be between 1 and 100"),
    ("POST", "/v1/jobs", job(misfire_policy="x"), "misfire_policy",
     "must be one of skip, run_once, catch_up"),
    ("POST", "/v1/jobs", job(paused="yes"), "paused", "must be true or false"),
    ("POST", "/v1/jobs", job(colour="red"), "colour", "unknown field"),
    ("POST", "/v1/jobs", job(target="x" * 20), "target", "must be an object"),
    ("POST", "/v1/jobs:batchCreate", {"jobs": [job(), job(id="b", paused="yes")]},
     "jobs.1.paused", "must be true or false"),
    ("POST", "/v1/jobs:batchCreate", {"jobs": []}, "jobs", "at least 1"),
    ("POST", "/v1/jobs:apply", {"jobs": [job()]}, "body", "needs dry_run or expect"),
    ("POST", "/v1/jobs:pause", {"note": "x"}, "body",
     "needs exactly one of tenant, queue, label"),
    ("POST", "/v1/jobs:pause", {"note": "x", "tenant": "a", "queue": "b"}, "body",
     "needs exactly one of tenant, queue, label"),
    ("POST", "/v1/leases", {"worker_id": "w", "max": 0}, "max", "must be between 1 and"),
    ("PUT", "/v1/calendars/{name}", {"exclude": [{"start": "yesterday"}]},
     "exclude.0.start", "must match"),
    ("PUT", "/v1/tenants/{name}", {"max_jobs": 0}, "max_jobs", "must be between 1 and"),
    ("POST", "/v1/alerts/{alert_id:path}/ack", {"note": 7}, "note", "must be a string"),
]


@pytest.mark.parametrize(("method", "path", "body", "field", "reason"), REFUSED)
def test_a_refusal_names_the_field_and_the_reason(method: str, path: str, body: Any,
                                                  field: str, reason: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The schema's own words (no core parser asked)."""
    monkeypatch.setattr(schema_gate, "EXPLAINERS", {})
    with pytest.raises(ValidationError) as refused:
        check_body(method, path, body)
    assert refused.value.field == field
    assert reason in refused.value.message


# Where the core's parser refuses a body too, its words are used (the schema decided).
EXPLAINED = [
    ("POST", "/v1/jobs", job(id="a b"), "id", "must be 1-128 characters"),
    ("POST", "/v1/jobs", job(target={"http": {"url": "http://x", "headers": {"X-Nul": "a\x00b"}}}),
     "target.http.headers", "'X-Nul' holds the control character U+0000"),
    ("POST", "/v1/jobs", {"id": "a", "target": SHELL}, "schedule", "is required"),
    ("POST", "/v1/jobs", job(schedule={"cron": "* * * * *", "every": "1m"}),
     "schedule.every", "goes alone"),
    ("PUT", "/v1/jobs/{job_id}", {"target": {"sh": 1}, "schedule": "* * * * *"}, "target",
     'must be {"shell"'),
    ("POST", "/v1/jobs:batchCreate", {"jobs": [job(), job(id="b", paused="yes")]},
     "jobs[1].paused", "must be true or false"),
    ("POST", "/v1/jobs:batchCreate", [], "jobs", "must be a list of 1 to 1000"),
    ("POST", "/v1/leases", {"worker_id": "w", "queues": ["a b"]}, "queues", "queue names"),
    ("PUT", "/v1/tenants/{name}", {"max_jobs": 0}, "max_jobs", "must be an integer from 1"),
]


@pytest.mark.parametrize(("method", "path", "body", "field", "reason"), EXPLAINED)
def test_the_cores_words_are_used_where_it_refuses_too(method: str, path: str, body: Any,
                                                       field: str, reason: str) -> None:
    with pytest.raises(ValidationError) as refused:
        check_body(method, path, body)
    assert (refused.value.field, reason in refused.value.message) == (field, True), \
        refused.value.message


def test_where_the_core_accepts_what_the_schema_refuses_the_schema_says_why() -> None:
    """The schema decides: a body the core would take but the schema refuses is refused,
    in the schema's words (a URL with a space in its host, which urlsplit accepts)."""
    body = job(target={"http": {"url": "http://a b/"}})
    parse_job(body)
    with pytest.raises(ValidationError) as refused:
        check_body("POST", "/v1/jobs", body)
    assert refused.value.field == "target.http.url"
    assert refused.value.message.startswith("must match")


def test_extremes_are_refused_in_one_line() -> None:
    """A huge string, a huge list and a year past 9999 are refused, not crashed on."""
    for body, field in [(job(id="x" * 1_000_000), "id"),
                        ({"jobs": [job(id=f"j{i}") for i in range(1_001)]}, "jobs"),
                        (job(schedule={"cron": "* * * * *",
                                       "start_at": "10000-01-01T00:00:00-23:59"}),
                         "schedule.start_at")]:
        path = "/v1/jobs:batchCreate" if "jobs" in body else "/v1/jobs"
        with pytest.raises(ValidationError) as refused:
            check_body("POST", path, body)
        assert refused.value.field == field
        assert "\n" not in refused.value.message


def test_what_the_schema_allows_passes_the_gate_and_the_core() -> None:
    """A job using every field passes both checks; year 9999 at -23:59 is in range."""
    full = job(
        tenant="billing", queue="reports", paused=True, misfire_policy="catch_up",
        overlap_policy="forbid", max_runtime_s=600, min_duration_s=1, max_duration_s=300,
        start_deadline_s=60, alert_after_failures=3, concurrency_group="db",
        notify=["https://hooks.example/x"], calendars=["holidays"], labels={"team": "b"},
        target={"http": {"url": "https://example.org/run", "method": "put",
                         "headers": {"X-Token": {"secret": "tok"}}, "body": "{}"}},
        schedule={"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin", "dst_gap": "skip",
                  "dst_fold": "once", "jitter_s": 30,
                  "start_at": "2026-01-01T00:00:00Z",
                  "end_at": "9999-12-31T00:00:00-23:59"})
    check_body("POST", "/v1/jobs", full)
    parse_job(full)
    # PUT may repeat the id of its URL (an exported job put back as it is).
    check_body("PUT", "/v1/jobs/{job_id}", full)


def test_an_operation_without_a_declared_body_is_not_checked() -> None:
    check_body("GET", "/v1/jobs", {"anything": True})
    check_body("POST", "/v1/jobs/{job_id}/pause", {"anything": True})


def test_every_route_is_in_the_document_and_every_body_it_reads_is_declared() -> None:
    """The gate checks what the document declares: a route that reads a JSON body the
    document does not declare would go unchecked, so there is none."""
    spec = openapi_spec()
    for route in ROUTES:
        if not isinstance(route, Route) or route.path in PAGE_PATHS:
            continue
        reads_body = re.search(r"json_body|_json_object", inspect.getsource(route.endpoint))
        for method in sorted((route.methods or set()) - {"HEAD"}):
            operation = spec["paths"].get(document_path(route.path), {}).get(method.lower())
            assert operation is not None, (method, route.path)
            if reads_body:
                assert "requestBody" in operation, (method, route.path)
