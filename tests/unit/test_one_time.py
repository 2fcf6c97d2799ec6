"""One-time (`at`) and interval (`every`) schedules: their instants, DST, extremes, how a
job spec stores them, the protocol level they need, and the planner claiming them."""

from __future__ import annotations

import json

import pytest

from raftcron.core import commands as c
from raftcron.core import protocol
from raftcron.core.errors import ValidationError
from raftcron.core.model import Job, parse_job
from raftcron.core.one_time import (
    IntervalSchedule,
    compile_once,
    every_text,
    parse_at,
    parse_every,
)
from raftcron.core.schedule import ScheduleError, to_utc_iso
from raftcron.core.schedule_set import FleetSchedules
from raftcron.leader.planner import JobRecord, TickPlanner


def instants(at: str | list[str], tz: str, gap: str = "auto", fold: str = "auto") -> list[str]:
    return [to_utc_iso(t) for t in compile_once(parse_at(at, "schedule.at"), tz, gap,
                                                fold).instants]


@pytest.mark.parametrize(("at", "tz", "gap", "fold", "expected"), [
    ("2026-12-24T09:00:00", "Europe/Berlin", "auto", "auto", ["2026-12-24T08:00:00Z"]),
    ("2026-12-24T09:00", "Europe/Berlin", "auto", "auto", ["2026-12-24T08:00:00Z"]),
    ("2026-07-24T09:00:00", "Europe/Berlin", "auto", "auto", ["2026-07-24T07:00:00Z"]),
    # With an offset, that instant whatever the zone.
    ("2026-12-25T09:00:00Z", "Europe/Berlin", "auto", "auto", ["2026-12-25T09:00:00Z"]),
    # New York's spring gap: 02:30 does not exist; shifted to the clocks' jump (03:00 EDT).
    ("2026-03-08T02:30:00", "America/New_York", "auto", "auto", ["2026-03-08T07:00:00Z"]),
    ("2026-03-08T02:30:00", "America/New_York", "shift", "auto", ["2026-03-08T07:00:00Z"]),
    # The fall-back fold: 01:30 happens twice.
    ("2026-11-01T01:30:00", "America/New_York", "auto", "auto", ["2026-11-01T05:30:00Z"]),
    ("2026-11-01T01:30:00", "America/New_York", "auto", "once", ["2026-11-01T05:30:00Z"]),
    ("2026-11-01T01:30:00", "America/New_York", "auto", "both",
     ["2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"]),
    # Lord Howe moves by 30 minutes.
    ("2026-04-05T01:45:00", "Australia/Lord_Howe", "auto", "both",
     ["2026-04-04T14:45:00Z", "2026-04-04T15:15:00Z"]),
    # The last day that fits in UTC.
    ("9999-12-31T23:59:59", "Pacific/Kiritimati", "auto", "auto", ["9999-12-31T09:59:59Z"]),
    ("9999-12-31T23:59:59Z", "UTC", "auto", "auto", ["9999-12-31T23:59:59Z"]),
    (["2026-12-24T09:00:00", "2026-12-24T09:00:00", "2026-12-23T09:00:00"], "UTC", "auto",
     "auto", ["2026-12-23T09:00:00Z", "2026-12-24T09:00:00Z"]),
])
def test_one_time_instants(at, tz, gap, fold, expected) -> None:
    assert instants(at, tz, gap, fold) == expected


@pytest.mark.parametrize(("at", "tz", "gap", "field", "words"), [
    ("2026-03-08T02:30:00", "America/New_York", "skip", "schedule.at", "DST gap"),
    ("9999-12-31T23:59:59-23:59", "UTC", "auto", "schedule.at", "end of 9999"),
    ("9999-12-31T23:59:59", "America/New_York", "auto", "schedule.at", "end of 9999"),
    ("1970-01-01T00:00:00", "Asia/Tokyo", "auto", "schedule.at", "1970"),
    ("1969-12-31T23:59:59Z", "UTC", "auto", "schedule.at", "1970"),
    ("2026-02-29T09:00:00", "UTC", "auto", "schedule.at", "not a date-time"),
    ("tomorrow", "UTC", "auto", "schedule.at", "date-time"),
    ("2026-12-24", "UTC", "auto", "schedule.at", "date-time"),
    ("2026-12-24T09:00:00.5", "UTC", "auto", "schedule.at", "to the second"),
    ("", "UTC", "auto", "schedule.at", "date-time"),
    ([], "UTC", "auto", "schedule.at", "list of 1 to 100"),
    (["2026-12-24T09:00:00"] * 101, "UTC", "auto", "schedule.at", "list of 1 to 100"),
    ("2026-12-24T09:00:00", "Mars/Base", "auto", "schedule.timezone", "unknown"),
    ("2026-12-24T09:00:00", "UTC", "sideways", "schedule.dst_gap", "must be one of"),
])
def test_one_time_refusals_name_the_field(at, tz, gap, field, words) -> None:
    with pytest.raises(ScheduleError) as refused:
        compile_once(parse_at(at, "schedule.at"), tz, gap, "auto")
    assert refused.value.field == field and words in refused.value.message


def test_an_interval_fires_at_anchor_plus_k_times_every() -> None:
    every = IntervalSchedule(5400, 900, "UTC")  # every 90 min from 00:15 on 1970-01-01
    assert [to_utc_iso(t) for t in every.iter_between(0, 3 * 5400)] == [
        "1970-01-01T00:15:00Z", "1970-01-01T01:45:00Z", "1970-01-01T03:15:00Z"]
    anchor = 1_767_226_500  # 2026-01-01T00:15:00Z; k runs both ways from the anchor
    every = IntervalSchedule(5400, anchor, "Europe/Berlin")
    assert every.next_after(anchor - 1) == anchor
    assert every.next_after(anchor) == anchor + 5400
    assert every.next_after(anchor - 5400) == anchor
    assert every.next_after(anchor - 5401) == anchor - 5400
    # Absolute: the DST change of 2026-03-29 in Berlin does not move the series.
    march = [t for t in every.iter_between(1_774_740_000, 1_774_760_000)]
    assert all((t - anchor) % 5400 == 0 for t in march) and len(march) >= 3
    assert IntervalSchedule(1, 0, "UTC").next_after(253_402_300_799) is None


@pytest.mark.parametrize(("text", "seconds"), [
    ("45s", 45), ("90m", 5400), ("1h30m", 5400), ("2d", 172_800), ("1w", 604_800),
    ("366d", 366 * 86_400), (1, 1), (60.0, 60), ("1W2D", 777_600)])
def test_every_spellings(text, seconds) -> None:
    assert parse_every(text, "schedule.every") == seconds


@pytest.mark.parametrize("text", ["0s", "367d", "", "90", "m90", "1.5h", "30m1h", -5, 0,
                                  True, None, 1.5, "9" * 400 + "s", [60]])
def test_every_refusals(text) -> None:
    with pytest.raises(ScheduleError) as refused:
        parse_every(text, "schedule.every")
    assert refused.value.field == "schedule.every"


def test_every_is_shown_as_given() -> None:
    assert [every_text(s) for s in (45, 5400, 90_000, 604_800 + 1)] == [
        "45s", "1h30m", "1d1h", "1w1s"]


def job(**schedule) -> dict:
    return {"id": "j", "schedule": schedule, "target": {"shell": "true"}}


def test_a_one_time_job_stores_its_times_and_reads_back() -> None:
    parsed = parse_job(job(at="2026-12-24T09:00", timezone="Europe/Berlin"))
    spec = parsed.to_spec()
    assert "cron" not in spec["schedule"] and spec["schedule"]["at"] == ["2026-12-24T09:00:00"]
    again = Job.from_spec(json.loads(json.dumps(spec)))
    assert again == parsed
    assert again.to_api()["schedule"]["at"] == ["2026-12-24T09:00:00"]
    assert [t for t in again.fire_times().iter_after(0)] == [1_798_099_200_000]
    assert again.compiled().describe() == "once at 2026-12-24T09:00:00+01:00 (Europe/Berlin)"
    # What the API gives back parses to the same job.
    assert parse_job({**again.to_api(), "id": "j"}) == parsed


def test_an_interval_job_stores_seconds_and_shows_its_spelling() -> None:
    parsed = parse_job(job(every="90m", anchor="2026-01-01T00:15:00Z"))
    spec = parsed.to_spec()["schedule"]
    assert (spec["every_s"], spec["anchor_ms"]) == (5400, 1_767_226_500_000)
    shown = parsed.to_api()["schedule"]
    assert (shown["every"], shown["anchor"]) == ("1h30m", "2026-01-01T00:15:00Z")
    assert parse_job({**parsed.to_api(), "id": "j"}) == parsed
    assert parse_job(job(every=60)).to_spec()["schedule"]["anchor_ms"] == 0


def test_a_cron_jobs_spec_is_what_it_was() -> None:
    spec = parse_job(job(cron="0 9 * * *")).to_spec()["schedule"]
    assert list(spec) == ["cron", "timezone", "dst_gap", "dst_fold", "jitter_s",
                          "start_at_ms", "end_at_ms"]


@pytest.mark.parametrize(("schedule", "field"), [
    ({"cron": "* * * * *", "at": "2026-12-24T09:00:00"}, "schedule.at"),
    ({"at": "2026-12-24T09:00:00", "every": "1m"}, "schedule.every"),
    ({"timezone": "UTC"}, "schedule.cron"),
    ({"anchor": "2026-01-01T00:00:00Z", "cron": "* * * * *"}, "schedule.anchor"),
    ({"every": "1m", "anchor": "2026-01-01T00:00:00.500Z"}, "schedule.anchor"),
    ({"every": "1m", "anchor": "yesterday"}, "schedule.anchor"),
    ({"every": "0s"}, "schedule.every"),
    ({"at": "2026-03-08T02:30:00", "timezone": "America/New_York", "dst_gap": "skip"},
     "schedule.at"),
])
def test_job_refusals_name_the_field(schedule, field) -> None:
    with pytest.raises(ValidationError) as refused:
        parse_job(job(**schedule))
    assert refused.value.field == field


def test_listed_beside_cron_each_instant_once() -> None:
    parsed = parse_job({"id": "j", "target": {"shell": "true"}, "schedules": [
        "*/30 * * * * *", {"every": "20s", "name": "fast"},
        {"at": "1970-01-01T00:01:05Z", "name": "once"}]})
    got = list(parsed.fire_times().iter_after(-1, 90_000))
    assert [t // 1000 for t in got] == [0, 20, 30, 40, 60, 65, 80, 90]
    assert parsed.fire_times().matched_names(60_000) == ["0", "fast"]


def test_the_new_kinds_need_protocol_level_2() -> None:
    for schedule in ({"at": "2026-12-24T09:00:00"}, {"every": "90m"}):
        cmd = c.PutJob("r", 1, parse_job(job(**schedule)).to_spec(), True)
        assert protocol.unmet(cmd, 1) == protocol.SCHEDULE_KINDS
        assert protocol.unmet(cmd, 2) is None
    assert protocol.unmet(c.PutJob("r", 1, parse_job(job(cron="* * * * *")).to_spec(), True),
                          1) is None


def record(spec: dict, watermark: int) -> JobRecord:
    def text(value: object) -> str | None:
        return None if value is None else json.dumps(value)

    row = ("j", 1, False, watermark, text(spec["schedule"]), spec["misfire_policy"],
           spec["misfire_grace_s"], spec["catch_up_max"], text(spec.get("schedules")),
           text(spec.get("calendars")))
    return JobRecord.from_row(row, FleetSchedules())


def test_the_planner_claims_a_one_time_instant_once_and_then_nothing() -> None:
    at = 1_798_099_200_000  # 2026-12-24T08:00:00Z
    spec = parse_job(job(at="2026-12-24T09:00:00", timezone="Europe/Berlin")).to_spec()
    planner = TickPlanner()
    planner.upsert(record(spec, at - 3_600_000))
    assert planner.due(at - 5_000) == []
    [item] = planner.due(at)
    assert item[2] == at and item[4] == "fire"
    assert planner.due(at + 86_400_000) == []
    assert planner.next_wakeup_ms() is None
