import copy

import pytest

from raftcron.core.errors import ValidationError
from raftcron.core.model import Job, Schedule, parse_job, parse_target

BASE = {"id": "backup.db-1", "schedule": {"cron": "0 3 * * *"}, "target": {"shell": "echo hi"}}


def job_with(**changes):
    d = copy.deepcopy(BASE)
    d.update(changes)
    return d


def field_of(data, **kw):
    with pytest.raises(ValidationError) as ei:
        parse_job(data, **kw)
    err = ei.value
    assert err.field in str(err)
    assert err.message
    return err.field


def test_defaults():
    job = parse_job(BASE)
    assert job.id == "backup.db-1"
    assert job.version == 1
    assert job.tenant == "default"
    assert job.queue == "default"
    assert job.misfire_policy == "run_once"
    assert job.misfire_grace_s == 60
    assert job.catch_up_max == 100
    assert job.overlap_policy == "allow"
    assert job.max_runtime_s is None
    assert job.max_attempts == 3
    assert job.retry_backoff_s == 10
    assert job.heartbeat_timeout_s == 30
    assert job.deadline_s is None
    assert job.paused is False
    assert job.notify == ()
    assert job.schedule == Schedule(cron="0 3 * * *")
    assert job.schedule.timezone == "UTC"
    assert job.target == {"shell": "echo hi"}


def test_schedule_string_shorthand():
    assert parse_job(job_with(schedule="0 3 * * *")).schedule == parse_job(BASE).schedule


def test_all_fields_accepted():
    job = parse_job({
        "id": "j", "tenant": "acme", "schedule": {
            "cron": "*/5 * * * *", "timezone": "Europe/Berlin", "dst_gap": "skip",
            "dst_fold": "once", "jitter_s": 30, "start_at": "2026-01-01T00:00:00Z",
            "end_at": "2026-01-02T00:00:00+01:00"},
        "misfire_policy": "catch_up", "misfire_grace_s": 0, "catch_up_max": 5,
        "overlap_policy": "buffer_one", "max_runtime_s": 60, "max_attempts": 1,
        "retry_backoff_s": 0, "heartbeat_timeout_s": 2, "deadline_s": 10,
        "target": {"http": {"url": "https://h.example/x", "method": "put",
                            "headers": {"X-A": "1"}, "body": "{}"}},
        "queue": "gpu", "paused": True, "notify": ["https://hooks.example/a"],
        "version": 7,
    })
    assert job.tenant == "acme" and job.queue == "gpu" and job.paused is True
    assert job.schedule.start_at_ms == 1_767_225_600_000
    assert job.schedule.end_at_ms == 1_767_225_600_000 + 23 * 3_600_000
    assert job.schedule.jitter_s == 30
    assert job.misfire_grace_s == 0 and job.catch_up_max == 5 and job.max_attempts == 1
    assert job.retry_backoff_s == 0 and job.heartbeat_timeout_s == 2
    assert job.target["http"]["method"] == "PUT"
    assert job.notify == ("https://hooks.example/a",)
    assert job.version == 1  # the client cannot choose the version


def test_http_target_defaults():
    t = parse_target({"http": {"url": "http://h.example"}})
    assert t == {"http": {"url": "http://h.example", "method": "POST", "headers": {},
                          "body": None}}


@pytest.mark.parametrize("url", ["http://a.example/x", "https://a.example:8443/p?q=1",
                                 "HTTPS://A.EXAMPLE/"])
def test_http_target_accepts_http_and_https(url):
    assert parse_target({"http": {"url": url}})["http"]["url"] == url


@pytest.mark.parametrize("url", [
    "ftp://a.example/x", "file:///etc/passwd", "javascript:alert(1)", "gopher://h/",
    "a.example/x", "//a.example/x", "http://", "https:///path", "", 5, None,
    "http://a.example/" + "x" * 2100,
])
def test_http_target_rejects_other_schemes(url):
    with pytest.raises(ValidationError) as ei:
        parse_target({"http": {"url": url}})
    assert ei.value.field == "target.http.url"


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"id": ""}, "id"),
        ({"id": "has space"}, "id"),
        ({"id": "x" * 129}, "id"),
        ({"id": 5}, "id"),
        ({"id": "trailing-newline\n"}, "id"),
        ({"tenant": "acme\n"}, "tenant"),
        ({"queue": "q\n"}, "queue"),
        ({"bogus": 1}, "bogus"),
        ({"tenant": "a/b"}, "tenant"),
        ({"tenant": ""}, "tenant"),
        ({"queue": 3}, "queue"),
        ({"misfire_policy": "later"}, "misfire_policy"),
        ({"overlap_policy": "queue"}, "overlap_policy"),
        ({"overlap_policy": ["allow"]}, "overlap_policy"),
        ({"misfire_grace_s": -1}, "misfire_grace_s"),
        ({"misfire_grace_s": "60"}, "misfire_grace_s"),
        ({"misfire_grace_s": 1.5}, "misfire_grace_s"),
        ({"catch_up_max": 0}, "catch_up_max"),
        ({"max_runtime_s": 0}, "max_runtime_s"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 101}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"retry_backoff_s": -5}, "retry_backoff_s"),
        ({"heartbeat_timeout_s": 1}, "heartbeat_timeout_s"),
        ({"ack_timeout_s": 0}, "ack_timeout_s"),
        ({"ack_timeout_s": 601}, "ack_timeout_s"),
        ({"ack_timeout_s": "3"}, "ack_timeout_s"),
        ({"ack_timeout_s": 2.5}, "ack_timeout_s"),
        ({"ack_timeout_s": False}, "ack_timeout_s"),
        ({"deadline_s": 0}, "deadline_s"),
        ({"paused": "yes"}, "paused"),
        ({"paused": 1}, "paused"),
        ({"notify": "http://x.example"}, "notify"),
        ({"notify": ["http://a.example"] * 11}, "notify"),
        ({"notify": ["ftp://x.example"]}, "notify.0"),
        ({"notify": ["https://ok.example", 3]}, "notify.1"),
        ({"target": {"shell": ""}}, "target.shell"),
        ({"target": {"shell": "   "}}, "target.shell"),
        ({"target": {"shell": 3}}, "target.shell"),
        ({"target": {"shell": "a\x00b"}}, "target.shell"),
        ({"target": {"shell": "x" * 16_385}}, "target.shell"),
        ({"target": {}}, "target"),
        ({"target": "echo"}, "target"),
        ({"target": {"shell": "a", "http": {"url": "http://h"}}}, "target"),
        ({"target": {"exec": "a"}}, "target"),
        ({"target": {"http": "http://h"}}, "target.http"),
        ({"target": {"http": {"url": "http://h", "timeout": 3}}}, "target.http.timeout"),
        ({"target": {"http": {"url": "http://h", "method": "TRACE"}}}, "target.http.method"),
        ({"target": {"http": {"url": "http://h", "headers": {"a": 1}}}},
         "target.http.headers"),
        ({"target": {"http": {"url": "http://h", "headers": {"a": "x\r\nb: c"}}}},
         "target.http.headers"),
        ({"target": {"http": {"url": "http://h", "body": {"a": 1}}}}, "target.http.body"),
        ({"schedule": 5}, "schedule"),
        ({"schedule": {}}, "schedule.cron"),
        ({"schedule": {"cron": 5}}, "schedule.cron"),
        ({"schedule": {"cron": "not a cron"}}, "schedule.cron"),
        ({"schedule": {"cron": "61 * * * *"}}, "schedule.cron"),
        ({"schedule": {"cron": "* * * * *", "every": 3}}, "schedule.every"),
        ({"schedule": {"cron": "* * * * *", "timezone": "Mars/Olympus"}}, "schedule.timezone"),
        ({"schedule": {"cron": "* * * * *", "timezone": 1}}, "schedule.timezone"),
        ({"schedule": {"cron": "* * * * *", "dst_gap": "maybe"}}, "schedule.dst_gap"),
        ({"schedule": {"cron": "* * * * *", "dst_fold": "maybe"}}, "schedule.dst_fold"),
        ({"schedule": {"cron": "* * * * *", "jitter_s": 3601}}, "schedule.jitter_s"),
        ({"schedule": {"cron": "* * * * *", "jitter_s": "1"}}, "schedule.jitter_s"),
        ({"schedule": {"cron": "* * * * *", "start_at": "2026-01-01T00:00:00"}},
         "schedule.start_at"),
        ({"schedule": {"cron": "* * * * *", "start_at": "yesterday"}}, "schedule.start_at"),
        ({"schedule": {"cron": "* * * * *", "end_at": 5}}, "schedule.end_at"),
        ({"schedule": {"cron": "* * * * *", "start_at": "2026-01-02T00:00:00Z",
                       "end_at": "2026-01-02T00:00:00Z"}}, "schedule.end_at"),
    ],
)
def test_every_error_names_the_field(changes, field):
    assert field_of(job_with(**changes)) == field


@pytest.mark.parametrize("key, value", [("dst_gap", ["skip"]), ("dst_fold", {"a": 1}),
                                        ("dst_gap", 5)])
def test_non_string_dst_policy_is_a_validation_error(key, value):
    sched = {"cron": "* * * * *", key: value}
    assert field_of(job_with(schedule=sched)) == f"schedule.{key}"


@pytest.mark.parametrize("url", ["https://", "http:", "http:/path"])
def test_notify_url_needs_a_host(url):
    assert field_of(job_with(notify=[url])) == "notify.0"


def test_missing_required_fields():
    assert field_of({"schedule": "* * * * *", "target": {"shell": "x"}}) == "id"
    with pytest.raises(ValidationError, match="is required"):
        parse_job({"schedule": "* * * * *", "target": {"shell": "x"}})
    assert field_of({"id": "a", "target": {"shell": "x"}}) == "schedule"
    assert field_of({"id": "a", "schedule": "* * * * *"}) == "target"


@pytest.mark.parametrize("body", [None, [], "job", 3])
def test_body_must_be_an_object(body):
    assert field_of(body) == "body"


def test_url_job_id_wins_and_must_match_body():
    assert parse_job({k: v for k, v in BASE.items() if k != "id"}, job_id="from-url").id == (
        "from-url")
    assert parse_job(job_with(id="same"), job_id="same").id == "same"
    assert field_of(job_with(id="body-id"), job_id="url-id") == "id"
    assert field_of(BASE, job_id="bad id") == "id"


def test_spec_round_trip_and_canonical_form():
    job = parse_job(job_with(notify=["https://h.example/n"], schedule={
        "cron": "0 9 * * 1-5", "timezone": "America/New_York",
        "start_at": "2026-03-01T00:00:00Z"}))
    spec = job.to_spec()
    assert isinstance(spec["notify"], list)
    assert spec["schedule"]["start_at_ms"] == 1_772_323_200_000
    assert Job.from_spec(spec) == job
    assert Job.from_spec(copy.deepcopy(spec)).to_spec() == spec


def test_with_version_and_to_api():
    job = parse_job(job_with(schedule={"cron": "0 9 * * *",
                                       "start_at": "2026-03-01T00:00:00Z"}))
    v5 = job.with_version(5)
    assert v5.version == 5 and job.version == 1
    api = v5.to_api()
    assert api["version"] == 5
    assert api["schedule"]["start_at"] == "2026-03-01T00:00:00Z"
    assert api["schedule"]["end_at"] is None
    assert "start_at_ms" not in api["schedule"]


def test_compiled_schedule_fires_on_cron():
    job = parse_job(job_with(schedule="0 3 * * *"))
    nxt = job.compiled().next_after(0)
    assert nxt == 3 * 3600  # epoch seconds


def test_jobs_are_frozen():
    job = parse_job(BASE)
    with pytest.raises(AttributeError):
        job.id = "other"  # type: ignore[misc]


def test_fields_differing_from_names_each_changed_field_but_never_the_version():
    job = parse_job(BASE)
    assert job.fields_differing_from(job.with_version(7)) == []
    other = parse_job(job_with(schedule={"cron": "0 4 * * *"}, target={"shell": "echo bye"},
                               max_attempts=5))
    assert job.fields_differing_from(other) == ["schedule", "target", "max_attempts"]
    assert other.fields_differing_from(job) == ["schedule", "target", "max_attempts"]


def test_fields_differing_from_compares_paused_only_when_asked():
    job = parse_job(BASE)
    paused = parse_job(job_with(paused=True))
    assert job.fields_differing_from(paused) == ["paused"]
    assert job.fields_differing_from(paused, compare_paused=False) == []


def test_ack_timeout_defaults_to_three_seconds_and_is_kept():
    assert parse_job(job_with()).ack_timeout_s == 3
    assert parse_job(job_with(ack_timeout_s=10)).to_spec()["ack_timeout_s"] == 10


def test_a_spec_stored_before_ack_timeout_existed_gets_the_default():
    stored = parse_job(job_with(ack_timeout_s=9)).to_spec()
    del stored["ack_timeout_s"]
    assert Job.from_spec(stored).ack_timeout_s == 3


@pytest.mark.parametrize("url", ["http://[", "https://[::1", "http://]x["])
def test_a_url_urlsplit_cannot_split_is_a_validation_error(url):
    # urlsplit raises ValueError on these: it escaped as a 500.
    assert field_of(job_with(notify=[url])) == "notify.0"
    assert field_of(job_with(target={"http": {"url": url}})) == "target.http.url"


@pytest.mark.parametrize("headers", ["", 0, False, []])
def test_http_headers_must_be_an_object_or_null(headers):
    # A falsy non-object used to pass as "no headers".
    assert field_of(job_with(target={"http": {"url": "https://x", "headers": headers}})) \
        == "target.http.headers"
    assert parse_job(job_with(target={"http": {"url": "https://x", "headers": None}})) \
        .target["http"]["headers"] == {}


@pytest.mark.parametrize("key", ["misfire_grace_s", "catch_up_max", "max_attempts",
                                 "retry_backoff_s", "heartbeat_timeout_s", "ack_timeout_s"])
def test_null_is_refused_for_an_integer_field_with_a_default(key):
    # null used to become 0 or 1 (misfire_grace_s null: no grace at all, silently).
    assert field_of(job_with(**{key: None})) == key
    assert field_of(job_with(schedule={"cron": "* * * * *", "jitter_s": None})) \
        == "schedule.jitter_s"


@pytest.mark.parametrize("key", ["max_runtime_s", "deadline_s"])
def test_null_is_unset_for_an_optional_integer_field(key):
    assert getattr(parse_job(job_with(**{key: None})), key) is None


def test_an_integral_float_is_an_integer():
    # JSON Schema (and many JSON writers) count 60.0 as the integer 60.
    job = parse_job(job_with(misfire_grace_s=60.0, max_attempts=5.0,
                             schedule={"cron": "* * * * *", "jitter_s": 2.0}))
    assert job.misfire_grace_s == 60 and isinstance(job.misfire_grace_s, int)
    assert job.max_attempts == 5 and job.schedule.jitter_s == 2
    assert field_of(job_with(max_attempts=2.5)) == "max_attempts"


# --- run bounds ------------------------------------------------------------------------------

def test_run_bounds_are_off_by_default_and_accepted_when_they_leave_room():
    job = parse_job(BASE)
    assert (job.start_deadline_s, job.min_duration_s, job.max_duration_s,
            job.alert_after_failures) == (None, None, None, None)
    job = parse_job(job_with(start_deadline_s=60, min_duration_s=10, max_duration_s=10,
                             max_runtime_s=11, alert_after_failures=3))
    assert (job.start_deadline_s, job.min_duration_s, job.max_duration_s,
            job.alert_after_failures) == (60, 10, 10, 3)
    assert Job.from_spec(job.to_spec()) == job


@pytest.mark.parametrize(
    "changes, field, reason",
    [
        ({"min_duration_s": 20, "max_duration_s": 10}, "min_duration_s",
         "must be at most max_duration_s"),
        ({"max_duration_s": 60, "max_runtime_s": 60}, "max_duration_s",
         "must be less than max_runtime_s"),
        ({"min_duration_s": 61, "max_runtime_s": 60}, "min_duration_s",
         "must be less than max_runtime_s"),
        ({"start_deadline_s": 0}, "start_deadline_s", "must be between 1 and 604800"),
        ({"alert_after_failures": 0}, "alert_after_failures", "must be between 1 and 1000"),
        ({"alert_after_failures": "3"}, "alert_after_failures", "must be an integer"),
        ({"max_duration_s": True}, "max_duration_s", "must be an integer"),
    ],
)
def test_run_bound_errors_name_the_field_and_the_reason(changes, field, reason):
    with pytest.raises(ValidationError) as ei:
        parse_job(job_with(**changes))
    assert ei.value.field == field
    assert ei.value.message.startswith(reason), ei.value.message


def test_a_job_without_run_bounds_is_stored_as_before_they_existed():
    """Unset bounds stay out of the stored spec, so its JSON (and the state digest) is
    what a node of the previous version stores; a spec from before them decodes."""
    spec = parse_job(BASE).to_spec()
    assert not {"start_deadline_s", "min_duration_s", "max_duration_s",
                "alert_after_failures"} & set(spec)
    assert Job.from_spec(spec) == parse_job(BASE)
    api = parse_job(BASE).to_api()
    assert api["start_deadline_s"] is None and api["alert_after_failures"] is None
