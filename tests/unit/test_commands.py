import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftcron.core import commands as c

JOB_SPEC = {
    "id": "j1",
    "schedule": {"cron": "*/5 * * * *", "timezone": "Europe/Paris", "dst_gap": "auto",
                 "dst_fold": "auto", "jitter_s": 0, "start_at_ms": None, "end_at_ms": None},
    "target": {"http": {"url": "https://example.com/x", "method": "POST",
                        "headers": {"a": "ü"}, "body": None}},
    "notify": [],
}

SAMPLES: list[c.Command] = [
    c.PutJob(request_id="r1", now_ms=1, job=JOB_SPEC, create=True),
    c.PutJob(request_id="r2", now_ms=2, job=JOB_SPEC, create=False, expected_version=4),
    c.PutJob(request_id="r2b", now_ms=2, job=JOB_SPEC, create=False, who="ops#k1"),
    c.CreateJobs(request_id="r3", now_ms=3, jobs=[JOB_SPEC, {**JOB_SPEC, "id": "other"}]),
    c.DeleteJob(request_id="r3", now_ms=3, job_id="j1", expected_version=2),
    c.DeleteJob(request_id="r3b", now_ms=3, job_id="j1"),
    c.DeleteJob(request_id="r3c", now_ms=3, job_id="j1", who="ops#k1"),
    c.PauseJob(request_id="r4", now_ms=4, job_id="j1"),
    c.ResumeJob(request_id="r5", now_ms=5, job_id="j1"),
    c.TriggerManual(request_id="r6", now_ms=6, job_id="j1", idempotency_key="k",
                    override_overlap=True),
    c.Backfill(request_id="r7", now_ms=7, job_id="j1", request_key="bk",
               instants_ms=[60_000, 120_000]),
    c.Barrier(request_id="r8"),
    c.PutCalendar("rc1", 1, {"name": "h", "tenant": "t", "timezone": "UTC",
                             "exclude": [{"date": "2026-12-25"}]}),
    c.DeleteCalendar("rc2", 1, "h", tenants=["t"]),
    c.PutChannel("rch1", 1, {"name": "ops", "tenant": "t",
                             "slack": {"webhook_url": "https://hooks.example/x"}}),
    c.DeleteChannel("rch2", 1, "ops", tenants=["t"]),
    c.BulkPause("rc3", 1, {"label": ["team", "billing"]}, True, "alice", "freeze",
                tenants=None),
    c.ApplyJobs("rc4", 1, puts=[[{"id": "j1"}, 0]], deletes=[["j2", 3]],
                unchanged=[["j3", 1]], request_hash="h", who="alice"),
    c.Prune(request_id="r9", now_ms=9, before_ms=5, limit=7),
    c.PutTenant(request_id="r10", now_ms=10, name="acme", max_jobs=5, max_concurrent_runs=2,
                max_fires_per_minute=60),
    c.RetryOutbox(request_id="r11", now_ms=10, outbox_id=9, receiver="http://h/x"),
    c.RetryOutbox(request_id="r12", now_ms=10, outbox_id=9),
    c.SetWebhookKey(request_id="r13", now_ms=10, owner="tenant:acme", key="k" * 43,
                    replace=True),
    c.AlertAction(request_id="r14", now_ms=10, alert_id="deadline:x", action="ack",
                  who="ops", note="on it", tenants=["acme"], request_hash="h"),
    c.CancelOccurrence(request_id="r15", now_ms=10, occurrence_id="j1@manual-x", who="ops",
                       note="wrong month", tenants=["acme"], request_hash="h"),
    c.PutConcurrencyGroup(request_id="r16", now_ms=10, tenant="acme", name="db-heavy",
                          limit=2),
    c.BeginEpoch(term=3, node_id="n1", now_ms=10),
    c.Claim(epoch=3, now_ms=11, items=[["j1", 1, 60_000, 60_500, "fire"],
                                      ["j2", 2, 60_000, 60_000, "misfire"]]),
    c.Lease(epoch=3, now_ms=12, worker_id="w", attempt_ids=["a~1", "b~1"]),
    c.Sweep(epoch=3, now_ms=13, attempt_ids=["a~1"]),
    c.RaiseAlert(epoch=3, now_ms=14, alert_id="al", kind="skew", job_id="j1",
                 occurrence_id=None, reason="clock"),
    c.RaiseAlert(epoch=3, now_ms=14, alert_id="deadline:j1@x", kind="deadline", job_id="j1",
                 occurrence_id="j1@x", reason="missed", scheduled_for_ms=5,
                 deadline_ms=10),
    c.ResolveAlert(epoch=3, now_ms=15, alert_id="al"),
    c.ConfirmClock(epoch=3, now_ms=15, max_gap_ms=2500),
    c.SetClusterLevel(epoch=3, now_ms=15, level=2),
    c.AckOutbox(epoch=3, now_ms=16, outbox_id=9, delivered=False, error="503"),
    c.RouteOutbox(epoch=3, now_ms=16, routes=[[9, [["http://h/x", "cluster"],
                                                   ["http://t/y", "tenant:acme"]]], [10, []]]),
    c.AckDeliveries(epoch=3, now_ms=16, give_up_ms=86_400_000, max_attempts=None,
                    results=[[9, "http://h/x", True, ""], [9, "http://t/y", False, "HTTP 500"]]),
    c.Heartbeat(now_ms=17, worker_id="w", attempts=[["a~1", 3_000_000_001]]),
    c.Complete(now_ms=18, worker_id="w",
               completions=[["a~1", 3_000_000_001, "succeeded", 0, "out\n\u00e9"],
                            ["b~1", 3_000_000_002, "failed", None, None]]),
    c.Release(now_ms=19, worker_id="w", attempts=[["a~1", 3_000_000_001]]),
]


def test_samples_cover_every_command_type():
    assert {type(s) for s in SAMPLES} == set(c.COMMAND_TYPES.values())
    assert len(c.COMMAND_TYPES) == len(set(c.COMMAND_TYPES))


@pytest.mark.parametrize("cmd", SAMPLES, ids=lambda s: type(s).__name__)
def test_round_trip(cmd):
    data = c.encode(cmd)
    assert isinstance(data, bytes)
    back = c.decode(data)
    assert type(back) is type(cmd)
    assert back == cmd
    assert c.encode(back) == data


@pytest.mark.parametrize("cmd", SAMPLES, ids=lambda s: type(s).__name__)
def test_envelope(cmd):
    obj = json.loads(c.encode(cmd))
    assert obj["v"] == c.CODEC_VERSION
    assert obj["t"] == cmd.TYPE
    # Every field, except newer optional ones a command leaves out while at their default
    # (so that the previous version can still decode it: PutTenant's policy fields and
    # newer quotas, core.protocol's tagged fields, the `who` of the job commands).
    omitted = {f.name for f in dataclasses.fields(cmd)} - set(obj["a"])
    assert all(getattr(cmd, name) == c.field_default(type(cmd), name) for name in omitted)
    assert omitted <= {"queues", "targets", "http_hosts", "deadline_ms", "ahead_ms",
                       "before_start", "who", "max_schedules", "max_pending_runs"}


def test_raise_alert_written_before_deadline_ms_decodes_without_it():
    old = (b'{"v":1,"t":"raise_alert","a":{"epoch":3,"now_ms":14,"alert_id":"deadline:j@x",'
           b'"kind":"deadline","job_id":"j","occurrence_id":"j@x","reason":"missed",'
           b'"scheduled_for_ms":5,"message":""}}')
    cmd = c.decode(old)
    assert isinstance(cmd, c.RaiseAlert) and cmd.deadline_ms is None
    assert c.encode(cmd) == old, "an alert without a deadline is written as before"


def test_defaults_survive_round_trip():
    cmd = c.Claim(epoch=1, now_ms=2)
    assert c.decode(c.encode(cmd)).items == []
    assert c.decode(c.encode(c.Prune(request_id="x", now_ms=1, before_ms=0))).limit == 10_000


def test_commands_are_frozen():
    cmd = c.BeginEpoch(term=1, node_id="n", now_ms=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cmd.term = 2  # type: ignore[misc]


def test_leader_only_flags():
    leader_only = {t for t, cls in c.COMMAND_TYPES.items() if cls.LEADER_ONLY}
    assert leader_only == {"claim", "lease", "sweep", "raise_alert", "resolve_alert",
                           "confirm_clock", "set_cluster_level", "ack_outbox", "route_outbox",
                           "ack_deliveries"}
    for t in leader_only:
        assert "epoch" in {f.name for f in dataclasses.fields(c.COMMAND_TYPES[t])}


def _env(t="barrier", a=None, v=c.CODEC_VERSION):
    return json.dumps({"v": v, "t": t, "a": {"request_id": "x"} if a is None else a}).encode()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"\xff\xfe\x00",
        b"null",
        b"[]",
        b"42",
        b'{"t": "barrier", "a": {"request_id": "x"}}',  # no version
        _env(v=2),
        _env(v=0),
        _env(t="no_such_command"),
        _env(t="barrier", a={}),  # missing required field
        _env(t="barrier", a={"request_id": "x", "extra": 1}),  # unknown field
        _env(t="barrier", a=["x"]),
        b'{"v": 1, "t": "barrier"}',
        b'{"v": 1, "a": {"request_id": "x"}}',
    ],
)
def test_undecodable_input_raises(data):
    with pytest.raises(c.UndecodableCommand):
        c.decode(data)


def test_future_version_message_names_version():
    with pytest.raises(c.UndecodableCommand, match="99"):
        c.decode(_env(v=99))


_json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**62), 2**62),
                         st.text(max_size=20))


@settings(max_examples=100, deadline=None)
@given(
    st.text(max_size=30),
    st.integers(0, 2**53),
    st.lists(st.tuples(st.text(max_size=10), st.integers(0, 2**40), st.sampled_from(
        ["succeeded", "failed"]), st.one_of(st.none(), st.integers(-255, 255)),
        st.one_of(st.none(), st.text(max_size=50))).map(list), max_size=5),
)
def test_complete_round_trip_arbitrary_text(worker, now, completions):
    cmd = c.Complete(now_ms=now, worker_id=worker, completions=completions)
    assert c.decode(c.encode(cmd)) == cmd


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.one_of(
    _json_scalar, st.lists(_json_scalar, max_size=3)), max_size=6))
def test_put_job_round_trip_arbitrary_spec(job):
    cmd = c.PutJob(request_id="r", now_ms=1, job=job, create=False, expected_version=None)
    assert c.decode(c.encode(cmd)) == cmd


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_decode_never_raises_anything_else(data):
    try:
        c.decode(data)
    except c.UndecodableCommand:
        pass
