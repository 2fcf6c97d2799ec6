"""The ticker's planner: due instants, misfire decisions, herd lookahead."""

from __future__ import annotations

from raftcron.core.model import parse_job
from raftcron.leader.planner import HERD_LOOKAHEAD_MS, HERD_SIZE, JobRecord, TickPlanner

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def rec(job_id: str, cron: str, watermark: int, **extra: object) -> JobRecord:
    spec = parse_job({"id": job_id, "schedule": cron, "target": {"shell": "true"},
                      **extra}).to_spec()
    return JobRecord(job_id, 1, bool(extra.get("paused", False)), watermark, spec)


def test_claims_within_the_lookahead_and_not_beyond() -> None:
    p = TickPlanner()
    p.upsert(rec("a", "* * * * * *", T0))
    items = p.due(T0 + 500)
    assert [i[2] for i in items] == [T0 + 1000]  # T0+1000 is within 1 s; T0+2000 is not
    assert p.due(T0 + 500) == []  # nothing twice
    assert p.next_wakeup_ms() == T0 + 2000 - 1000


def test_misfire_policies_after_a_gap() -> None:
    gap = 10 * 60_000
    for policy, fired in (("skip", 0), ("run_once", 1), ("catch_up", 3)):
        p = TickPlanner()
        p.upsert(rec("m", "* * * * *", T0, misfire_policy=policy, catch_up_max=3))
        items = p.due(T0 + gap)
        late = [i for i in items if i[2] < T0 + gap - 60_000]
        assert sum(1 for i in late if i[4] == "fire") == fired, policy
        assert all(i[4] in ("fire", "misfire") for i in items)
        instants = [i[2] for i in items]
        assert instants == sorted(set(instants)) and len(instants) == 10  # every minute


def test_paused_jobs_record_paused_instants() -> None:
    p = TickPlanner()
    p.upsert(rec("p", "* * * * * *", T0, paused=True))
    assert [i[4] for i in p.due(T0 + 3000)] == ["paused"] * 4


def test_a_herd_is_claimed_up_to_ten_seconds_ahead_but_a_lone_job_is_not() -> None:
    p = TickPlanner()
    midnight = T0 + 86_400_000
    for i in range(HERD_SIZE):
        p.upsert(rec(f"h{i}", "0 0 * * *", T0 + 1000))
    p.upsert(rec("lone", "5 0 0 * * *", T0 + 10_000))  # 5 s after the herd
    assert p.next_wakeup_ms() == midnight - HERD_LOOKAHEAD_MS
    assert p.due(midnight - HERD_LOOKAHEAD_MS - 1) == []
    items = p.due(midnight - HERD_LOOKAHEAD_MS + 1)
    assert len(items) == HERD_SIZE and {i[2] for i in items} == {midnight}
    assert p.per_instant.get(midnight) is None  # the herd's next instants moved on


def test_edits_replace_the_old_schedule_in_the_heap() -> None:
    p = TickPlanner()
    p.upsert(rec("e", "* * * * * *", T0))
    p.upsert(rec("e", "*/10 * * * * *", T0))
    assert [i[2] for i in p.due(T0 + 9_500)] == [T0 + 10_000]
    assert sum(p.per_instant.values()) == 1
    p.remove("e")
    assert p.due(T0 + 30_000) == [] and not p.per_instant
