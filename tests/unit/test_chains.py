"""core.chains and a chained job's definition: parsing, the spec, what the API shows."""

from __future__ import annotations

import pytest

from raftcron.core.chains import After, parse_after, upstream_env, upstream_headers
from raftcron.core.errors import ValidationError
from raftcron.core.model import Job, parse_job
from raftcron.core.protocol import JOB_FIELD_LEVELS

SHELL = {"shell": "true"}


def test_a_chained_job_round_trips_and_fires_at_no_instant_of_its_own() -> None:
    job = parse_job({"id": "b", "after": {"job": "a", "on": "finish"}, "target": SHELL})
    assert job.after == After("a", "finish")
    assert Job.from_spec(job.to_spec()) == job
    api = job.to_api()
    assert api["after"] == {"job": "a", "on": "finish"} and "schedule" not in api
    assert parse_job(api) == job  # read back and put as it is
    assert job.fire_times().next_after(0) is None
    assert list(job.fire_times().iter_between(0, 10**10)) == []


def test_a_scheduled_job_spec_has_no_after_key() -> None:
    job = parse_job({"id": "a", "schedule": "0 9 * * *", "target": SHELL})
    assert "after" not in job.to_spec() and "after" not in job.to_api()


def test_on_defaults_to_success() -> None:
    assert parse_after({"job": "a"}, "b") == After("a", "success")


@pytest.mark.parametrize(("value", "field"), [
    ([], "after"), ("a", "after"), (None, "after"), ({}, "after.job"),
    ({"job": ""}, "after.job"), ({"job": "x" * 129}, "after.job"),
    ({"job": "a/b"}, "after.job"), ({"job": 7}, "after.job"), ({"job": "b"}, "after.job"),
    ({"job": "a", "on": "sometimes"}, "after.on"), ({"job": "a", "on": None}, "after.on"),
    ({"job": "a", "when": "x"}, "after.when"),
])
def test_a_bad_after_names_its_field(value: object, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_job({"id": "b", "after": value, "target": SHELL})
    assert e.value.field == field


def test_after_and_a_schedule_are_refused_together() -> None:
    for key, value in (("schedule", "* * * * *"), ("schedules", ["* * * * *"])):
        with pytest.raises(ValidationError) as e:
            parse_job({"id": "b", "after": {"job": "a"}, key: value, "target": SHELL})
        assert e.value.field == "after"


def test_a_job_without_schedule_or_after_is_refused() -> None:
    with pytest.raises(ValidationError, match="or after"):
        parse_job({"id": "b", "target": SHELL})


def test_a_chained_run_is_told_its_upstream() -> None:
    up = {"job_id": "a", "occurrence_id": "a@2026-01-01T00:00:00Z", "outcome": "failed"}
    assert upstream_env(up) == {"RAFTCRON_UPSTREAM_JOB_ID": "a",
                                "RAFTCRON_UPSTREAM_OCCURRENCE_ID": "a@2026-01-01T00:00:00Z",
                                "RAFTCRON_UPSTREAM_OUTCOME": "failed"}
    assert upstream_headers(up)["X-Raftcron-Upstream-Outcome"] == "failed"
    assert upstream_env(None) == {} and upstream_headers(None) == {}


def test_chains_are_a_level_2_field() -> None:
    assert JOB_FIELD_LEVELS["after"].level == 2


def test_a_chained_job_takes_no_calendars() -> None:
    with pytest.raises(ValidationError) as e:
        parse_job({"id": "b", "after": {"job": "a"}, "calendars": ["c"], "target": SHELL})
    assert e.value.field == "calendars"


def test_apply_orders_a_plan_upstream_first_in_linear_time() -> None:
    import time

    from raftcron.api.apply import upstream_first
    n = 5000
    chain = [[{"id": f"j{i}", **({"after": {"job": f"j{i - 1}"}} if i else {})}, 0]
             for i in range(n)][::-1]
    started = time.perf_counter()
    ordered = [p[0]["id"] for p in upstream_first(chain)]
    assert ordered == [f"j{i}" for i in range(n)]
    assert time.perf_counter() - started < 5  # generous: quadratic took minutes
    loop = [[{"id": "a", "after": {"job": "b"}}, 0], [{"id": "b", "after": {"job": "a"}}, 0]]
    assert sorted(p[0]["id"] for p in upstream_first(loop)) == ["a", "b"]
