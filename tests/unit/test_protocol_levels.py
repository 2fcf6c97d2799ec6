"""Protocol levels (core.protocol): what a build of level 1 can read of what this one writes.

`tests/fixtures/protocol_level1.json` is the codec of the level-1 build (commit 4aaeeff),
read from it: `decodes_at_level_1` answers as that build's `decode` and `Job.from_spec`
would (a kind it lacks, or a keyword its dataclass lacks, is a TypeError there: exit 70).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from raftcron.core import commands as c
from raftcron.core import protocol
from raftcron.core.model import Job
from tests.unit.test_commands import JOB_SPEC, SAMPLES

LEVEL_1 = json.loads((Path(__file__).parents[1] / "fixtures" / "protocol_level1.json")
                     .read_text())


def decodes_at_level_1(data: bytes) -> bool:
    """Whether the level-1 build reads this entry without stopping."""
    obj = json.loads(data)
    fields = LEVEL_1["commands"].get(obj["t"])
    if fields is None or not set(obj["a"]) <= set(fields):
        return False
    args = obj["a"]
    specs = [args["job"]] if obj["t"] == "put_job" else args.get("jobs", []) \
        if obj["t"] == "create_jobs" else []
    for spec in specs:
        if not set(spec) <= set(LEVEL_1["job_fields"]):
            return False
        if not set(spec["schedule"]) <= set(LEVEL_1["schedule_fields"]):
            return False
    if obj["t"] == "claim":
        return all(len(item) == LEVEL_1["claim_item_length"] for item in args["items"])
    return True


MULTI = {**JOB_SPEC, "schedules": [dict(JOB_SPEC["schedule"], name="a")]}

NEW_FEATURES: list[c.Command] = [
    c.Lease(epoch=3, now_ms=12, worker_id="w", attempt_ids=["a~1"], ahead_ms=2000),
    c.Heartbeat(now_ms=17, worker_id="w", attempts=[["a~1", 1]], before_start=True),
    c.Claim(epoch=3, now_ms=11, items=[["j1", 1, 60_000, 60_000, "fire", ["a"]]]),
    c.PutJob(request_id="r", now_ms=1, job={**JOB_SPEC, "calendars": ["h"]}, create=True),
    c.PutJob(request_id="r", now_ms=1, job=MULTI, create=False),
    c.CreateJobs(request_id="r", now_ms=1, jobs=[JOB_SPEC, {**JOB_SPEC, "labels": {"a": "b"}}]),
    *[c.PutJob(request_id="r", now_ms=1, job={**JOB_SPEC, name: 5}, create=True)
      for name in ("start_deadline_s", "min_duration_s", "max_duration_s",
                   "alert_after_failures")],
    c.PutJob(request_id="r", now_ms=1, job={**JOB_SPEC, "concurrency_group": "g"},
             create=True),
    c.SetClusterLevel(epoch=3, now_ms=1, level=2),
]


@pytest.mark.parametrize("cmd", [s for s in SAMPLES + NEW_FEATURES
                                 if protocol.required(s) is None],
                         ids=lambda s: type(s).__name__)
def test_an_entry_using_no_new_feature_is_read_by_the_level_1_build(cmd: c.Command) -> None:
    """A lease not ahead and a heartbeat not before a start were written with their new
    fields at the default (`ahead_ms: 0`, `before_start: false`): the level-1 build
    stopped on every lease and every heartbeat of an upgraded node."""
    assert decodes_at_level_1(c.encode(cmd))


@pytest.mark.parametrize("cmd", SAMPLES + NEW_FEATURES, ids=lambda s: type(s).__name__)
def test_the_tags_name_exactly_what_the_level_1_build_cannot_read(cmd: c.Command) -> None:
    req = protocol.required(cmd)
    assert decodes_at_level_1(c.encode(cmd)) == (req is None), req
    if req is not None:
        assert req.level == 2 and req.feature


def test_every_kind_and_field_newer_than_level_1_is_tagged() -> None:
    """A command kind or field added later without a tag fails here (it would stop the
    nodes of the previous build during a rolling upgrade)."""
    for kind, cls in c.COMMAND_TYPES.items():
        old = LEVEL_1["commands"].get(kind)
        if old is None:
            assert cls in protocol.COMMAND_LEVELS or cls is c.SetClusterLevel, kind
            continue
        for f in dataclasses.fields(cls):
            if f.name not in old:
                assert (cls, f.name) in protocol.FIELD_LEVELS, f"{kind}.{f.name}"
    for f in dataclasses.fields(Job):
        if f.name not in LEVEL_1["job_fields"]:
            assert f.name in protocol.JOB_FIELD_LEVELS, f"job field {f.name}"


@pytest.mark.parametrize(("cmd", "feature", "field"), [
    (c.PutCalendar("r", 1, {"name": "h"}), "calendars", None),
    (c.DeleteCalendar("r", 1, "h"), "calendars", None),
    (c.BulkPause("r", 1, {"tenant": "t"}, True, "ops", ""), "bulk pause", None),
    (c.CancelOccurrence("r", 1, "j@x", "ops", ""), "cancel", None),
    (c.PutConcurrencyGroup("r", 1, "t", "g", 2), "concurrency groups", None),
    (c.ConfirmClock(1, 1, 2500), "clock confirmations", None),
    (NEW_FEATURES[0], "dispatch ahead", "ahead_ms"),
    (NEW_FEATURES[1], "dispatch ahead", "before_start"),
    (c.RaiseAlert(1, 1, "a", "deadline", deadline_ms=5), "cluster_unavailable cause",
     "deadline_ms"),
    (NEW_FEATURES[2], "several schedules", "items"),
    (NEW_FEATURES[3], "calendars", "calendars"),
    (NEW_FEATURES[5], "labels", "labels"),
])
def test_each_feature_names_itself(cmd: c.Command, feature: str, field: str | None) -> None:
    req = protocol.required(cmd)
    assert req is not None and (req.level, req.feature, req.field) == (2, feature, field)
    assert protocol.unmet(cmd, 1) == req
    assert protocol.unmet(cmd, 2) is None


def test_set_cluster_level_needs_the_level_it_sets() -> None:
    assert protocol.required(c.SetClusterLevel(1, 1, 2)).level == 2  # type: ignore[union-attr]
    assert protocol.required(c.SetClusterLevel(1, 1, 3)).level == 3  # type: ignore[union-attr]


def test_the_refusal_names_the_feature_and_both_levels() -> None:
    req = protocol.Requirement(2, "calendars")
    assert protocol.not_upgraded_message(req, 1) == (
        "calendars needs protocol level 2: cluster not fully upgraded (level 1 of 2)")
    assert protocol.refusal_details(req, 1) == {
        "feature": "calendars", "cluster_level": 1, "required_level": 2}


def test_a_default_valued_tagged_field_is_left_out_and_decodes_back() -> None:
    for cmd in (c.Lease(1, 2, "w", ["a"]), c.Heartbeat(1, "w", [["a", 1]])):
        args: dict[str, Any] = json.loads(c.encode(cmd))["a"]
        assert "ahead_ms" not in args and "before_start" not in args
        assert c.decode(c.encode(cmd)) == cmd


# An entry as the build before this fix wrote every lease and heartbeat: the new fields
# at their default, written all the same.
LEASE_WITH_DEFAULT = (b'{"v":1,"t":"lease","a":{"epoch":3,"now_ms":12,"worker_id":"w",'
                      b'"attempt_ids":["a~1"],"acknowledge":false,"ahead_ms":0}}')
HEARTBEAT_WITH_DEFAULT = (b'{"v":1,"t":"heartbeat","a":{"now_ms":17,"worker_id":"w",'
                          b'"attempts":[["a~1",1]],"queues":null,"before_start":false}}')


@pytest.mark.parametrize("data", [LEASE_WITH_DEFAULT, HEARTBEAT_WITH_DEFAULT])
def test_an_entry_holding_a_newer_field_at_its_default_needs_its_level(data: bytes) -> None:
    """The level-1 build refuses the keyword whatever its value; this build reads it and
    would write it without the field."""
    assert not decodes_at_level_1(data)
    req = protocol.unmet_entry(data, 1)
    assert req is not None and (req.level, req.feature) == (2, "dispatch ahead")
    assert protocol.unmet_entry(data, 2) is None
    cmd = c.decode(data)
    assert protocol.required(cmd) is None
    assert decodes_at_level_1(c.encode(cmd))
