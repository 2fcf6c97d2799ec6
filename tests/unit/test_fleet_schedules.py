"""A new leader's compiled schedules: shared between equal jobs, and never different from
compiling each job on its own (`FleetSchedules`, and `CronSchedule.next_after`'s last
answer)."""

from __future__ import annotations

import json
import random

import pytest

from raftcron.core.model import parse_job
from raftcron.core.schedule import compile_schedule
from raftcron.core.schedule_set import FleetSchedules, ScheduleSet
from raftcron.leader.planner import JobRecord

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z

SPECS = [
    {"schedule": "H H * * *"},
    {"schedule": "*/5 * * * *"},
    {"schedule": {"cron": "30 2 * * *", "timezone": "Europe/Berlin"}},
    {"schedule": {"cron": "H/15 * * * *", "timezone": "America/New_York", "jitter_s": 30}},
    {"schedules": [{"cron": "H 9 * * 1-5", "timezone": "Europe/Berlin", "name": "week"},
                   {"cron": "0 12 * * 6", "name": "sat"}]},
    {"schedule": {"every": "90m"}},
    {"schedule": {"at": "2026-03-29T02:30:00", "timezone": "Europe/Berlin"}},
    {"schedule": {"cron": "H H * * *", "start_at": "2026-02-01T00:00:00Z",
                  "end_at": "2026-06-01T00:00:00Z"}},
    {"schedule": "@daily"},
    {"after": {"job": "upstream"}},  # chained: no instants of its own
]


def row_of(job_id: str, spec: dict, watermark_ms: int) -> tuple:
    """The row `ticker.JOB_ROW_SQL` reads for this spec."""
    def text(value: object) -> str | None:
        return None if value is None else json.dumps(value, separators=(",", ":"))

    return (job_id, 1, 0, watermark_ms, text(spec["schedule"]), spec["misfire_policy"],
            spec["misfire_grace_s"], spec["catch_up_max"], text(spec.get("schedules")),
            text(spec.get("calendars")))


def instants(s: ScheduleSet, after_ms: int, n: int = 12) -> list[int]:
    out = []
    t: int | None = after_ms
    while len(out) < n and t is not None:
        t = s.next_after(t)
        if t is not None:
            out.append(t)
    return out


@pytest.mark.parametrize("shape", SPECS, ids=lambda s: json.dumps(s)[:40])
def test_a_shared_set_fires_exactly_as_the_job_compiled_alone(shape: dict) -> None:
    fleet = FleetSchedules()
    for i in range(60):
        job_id = f"job-{i}"
        spec = parse_job({"id": job_id, "target": {"shell": "true"}, **shape}).to_spec()
        watermark = (T0 + i * 7_919) * 1000
        shared = JobRecord.from_row(row_of(job_id, spec, watermark), fleet)
        alone = JobRecord.from_spec(job_id, 1, False, watermark, spec)
        assert shared.next_ms == alone.next_ms
        assert instants(shared.schedule, watermark) == instants(alone.schedule, watermark)
        assert [m.name for m in shared.schedule.members] == \
            [m.name for m in alone.schedule.members]
        assert shared.schedule.jitter_s_at(shared.next_ms or 0) == \
            alone.schedule.jitter_s_at(alone.next_ms or 0)


def test_equal_jobs_share_one_set_and_hashed_ones_share_by_their_values() -> None:
    fleet = FleetSchedules()

    def compiled(job_id: str, cron: str) -> ScheduleSet:
        spec = parse_job({"id": job_id, "schedule": cron, "target": {"shell": "true"}}
                         ).to_spec()
        return JobRecord.from_row(row_of(job_id, spec, T0 * 1000), fleet).schedule

    plain = {id(compiled(f"p{i}", "0 * * * *")) for i in range(100)}
    assert len(plain) == 1
    hashed = [compiled(f"h{i}", "H H * * *") for i in range(3000)]
    # 3,000 jobs fall on at most 1,440 (minute, hour) pairs; jobs on one pair share a set,
    # and jobs on different pairs never do.
    by_instant: dict[int | None, set[int]] = {}
    for s in hashed:
        by_instant.setdefault(s.next_after(T0 * 1000), set()).add(id(s))
    assert len(by_instant) <= 1440
    assert all(len(ids) == 1 for ids in by_instant.values())
    assert len({id(s) for s in hashed}) == len(by_instant)


def test_a_full_cache_starts_again_and_stays_right() -> None:
    fleet = FleetSchedules()
    fleet.MAX_ENTRIES = 3
    for i in range(40):
        job_id = f"j{i}"
        spec = parse_job({"id": job_id, "schedule": f"{i % 60} H * * *",
                          "target": {"shell": "true"}}).to_spec()
        shared = JobRecord.from_row(row_of(job_id, spec, T0 * 1000), fleet)
        alone = JobRecord.from_spec(job_id, 1, False, T0 * 1000, spec)
        assert shared.next_ms == alone.next_ms
    assert len(fleet._sets) <= 3 and len(fleet._parsed) <= 3


@pytest.mark.parametrize("cron,zone", [
    ("H H * * *", "UTC"), ("*/7 * * * *", "UTC"), ("30 2 * * *", "Europe/Berlin"),
    ("0 1-3 * * 0", "America/New_York"), ("0 0 29 2 *", "UTC"), ("*/10 * * * * *", "UTC"),
    ("15 2 * * *", "Australia/Lord_Howe"),
])
def test_the_remembered_answer_never_differs_from_a_fresh_one(cron: str, zone: str) -> None:
    """`next_after` answers from its last range when it can; asked in any order (rising,
    falling, repeated, across DST changes and at the range's edges) it must give what the
    search gives."""
    s = compile_schedule(cron, zone, hash_key="job-7")
    rnd = random.Random(20261205)
    asks = [T0 + rnd.randrange(0, 400 * 86_400) for _ in range(400)]
    asks += sorted(asks[:100]) + sorted(asks[100:200], reverse=True)
    t = T0
    for _ in range(300):  # walking the instants asks at each edge: t - 1, t, t + 1
        nxt = s._next_after(t)
        assert nxt is not None
        asks += [nxt - 1, nxt, nxt + 1, t]
        t = nxt
    for ts in asks:
        assert s.next_after(ts) == s._next_after(ts), ts


def test_no_answer_is_not_remembered() -> None:
    s = compile_schedule("0 0 * * *", hash_key="x")
    assert s.next_after(T0) == T0 + 86_400  # T0 is a midnight
    assert s._last_answer[0] == (T0, T0 + 86_400)
    assert s.next_after(253_402_214_400) is None  # 9999-12-31T00:00:00Z: nothing follows
    assert s._last_answer[0] == (T0, T0 + 86_400)
    assert s.next_after(T0 - 1) == T0
