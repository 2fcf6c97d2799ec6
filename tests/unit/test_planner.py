"""The ticker's planner: due instants, misfire decisions, herd lookahead."""

from __future__ import annotations

from raftcron.core.ahead import MAX_HERD_LEAD_S, herd_claim_lead_ms
from raftcron.core.model import parse_job
from raftcron.leader.planner import HERD_LOOKAHEAD_MS, HERD_SIZE, JobRecord, TickPlanner

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def rec(job_id: str, cron: str, watermark: int, **extra: object) -> JobRecord:
    spec = parse_job({"id": job_id, "schedule": cron, "target": {"shell": "true"},
                      **extra}).to_spec()
    return JobRecord.from_spec(job_id, 1, bool(extra.get("paused", False)), watermark, spec)


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
    lead = HERD_LOOKAHEAD_MS
    assert p.next_wakeup_ms() == midnight - lead
    assert p.due(midnight - lead - 1) == []
    items = p.due(midnight - lead)
    assert len(items) == HERD_SIZE and {i[2] for i in items} == {midnight}
    assert p.per_instant.get(midnight) is None  # the herd's next instants moved on


def test_a_herd_too_large_to_lease_in_ten_seconds_is_claimed_as_far_ahead_as_it_needs() -> None:
    """Where the node lets a herd lease up to 60 s ahead (lease_ahead_herd_max_s): 100,000
    runs lease in 40 s at HERD_LEASES_PER_S and claim in 10 s more, so the herd is claimed
    50 s ahead. By default it is claimed 10 s ahead, as any herd. Neither part goes past
    MAX_HERD_LEAD_S."""
    midnight = T0 + 86_400_000
    wide, default = TickPlanner(herd_max_ms=60_000), TickPlanner()
    for p in (wide, default):
        for i in range(100_000):
            p.upsert(rec(f"h{i}", "0 0 * * *", T0 + 1000))
    assert wide.next_wakeup_ms() == midnight - 50_000
    assert wide.due(midnight - 50_001) == []
    assert len(wide.due(midnight - 50_000)) == 100_000
    assert default.next_wakeup_ms() == midnight - HERD_LOOKAHEAD_MS
    assert default.due(midnight - HERD_LOOKAHEAD_MS - 1) == []
    limit = int(MAX_HERD_LEAD_S * 1000)
    assert herd_claim_lead_ms(10_000_000, HERD_LOOKAHEAD_MS, 10**9) == 2 * limit


def test_edits_replace_the_old_schedule_in_the_heap() -> None:
    p = TickPlanner()
    p.upsert(rec("e", "* * * * * *", T0))
    p.upsert(rec("e", "*/10 * * * * *", T0))
    assert [i[2] for i in p.due(T0 + 9_500)] == [T0 + 10_000]
    assert sum(p.per_instant.values()) == 1
    p.remove("e")
    assert p.due(T0 + 30_000) == [] and not p.per_instant


# --- several schedules and calendars ---------------------------------------------------------

def _calendar(name: str, exclude: list[dict]) -> object:
    from raftcron.core.calendar import parse_calendar
    return parse_calendar({"timezone": "UTC", "exclude": exclude}, name).compiled()


def test_a_multi_schedule_job_claims_the_union_once_with_matched_names() -> None:
    p = TickPlanner()
    spec = parse_job({"id": "m", "target": {"shell": "true"}, "schedules": [
        {"cron": "*/2 * * * * *", "name": "even"},
        {"cron": "*/3 * * * * *", "name": "three"}]}).to_spec()
    p.upsert(JobRecord.from_spec("m", 1, False, T0 - 1, spec))
    items = p.due(T0 + 6000 - 1000)  # claims through T0 + 6 s
    assert [(i[2] - T0) // 1000 for i in items] == [0, 2, 3, 4, 6]
    by_second = {(i[2] - T0) // 1000: i[5] for i in items}
    assert by_second[0] == ["even", "three"] and by_second[6] == ["even", "three"]
    assert by_second[3] == ["three"] and by_second[4] == ["even"]


def test_single_schedule_items_keep_their_five_fields() -> None:
    p = TickPlanner()
    p.upsert(rec("a", "* * * * * *", T0))
    assert all(len(i) == 5 for i in p.due(T0 + 3000))


def test_excluded_instants_are_skipped_with_their_calendar() -> None:
    p = TickPlanner()
    p.calendars = {"quiet": _calendar("quiet", [
        {"start": "2026-01-01T00:00:02Z", "end": "2026-01-01T00:00:04Z"}])}
    p.upsert(rec("c", "* * * * * *", T0, calendars=["quiet"]))
    items = p.due(T0 + 4000)
    assert [(i[2] - T0) // 1000 for i in items] == [1, 2, 3, 4, 5]
    assert [i[4] for i in items] == ["fire", "calendar:quiet", "calendar:quiet", "fire",
                                     "fire"]


def test_run_once_fires_the_latest_missed_instant_the_calendars_allow() -> None:
    p = TickPlanner()
    # Missed: 00:01..00:10; the last two are excluded, so 00:08 is the one to fire.
    p.calendars = {"late": _calendar("late", [
        {"start": "2026-01-01T00:09:00Z", "end": "2026-01-01T00:11:00Z"}])}
    p.upsert(rec("r", "* * * * *", T0, misfire_policy="run_once", calendars=["late"]))
    items = p.due(T0 + 10 * 60_000 + 120_000)
    decisions = {(i[2] - T0) // 60_000: i[4] for i in items}
    assert decisions[9] == decisions[10] == "calendar:late"
    assert decisions[8] == "fire"
    assert [m for m, d in decisions.items() if d == "fire"] == [8, 11, 12]
    assert all(decisions[m] == "misfire" for m in range(1, 8))


def test_a_job_naming_a_calendar_not_loaded_is_held_not_claimed() -> None:
    p = TickPlanner()
    p.upsert(rec("h", "* * * * * *", T0, calendars=["unknown"]))
    assert p.due(T0 + 3000) == [] and p.held == 1
    p.calendars = {"unknown": _calendar("unknown", [])}
    items = p.due(T0 + 3000)
    assert [(i[2] - T0) // 1000 for i in items] == [1, 2, 3, 4] and p.held == 0


def test_a_paused_job_records_paused_even_inside_an_exclusion() -> None:
    p = TickPlanner()
    p.calendars = {"all": _calendar("all", [{"cron": "* * * * *"}])}
    p.upsert(rec("p", "* * * * * *", T0, paused=True, calendars=["all"]))
    assert {i[4] for i in p.due(T0 + 2000)} == {"paused"}


def test_a_start_at_in_the_last_second_of_9999_plans_no_instant() -> None:
    """start_at 9999-12-31T23:59:59.999Z is accepted; the planner asked the schedule for
    an instant after the last second of 9999 and the leader's ticker raised ValueError
    (year 10000) loading the job."""
    r = rec("late", "* * * * * *", T0, schedule={"cron": "* * * * * *",
                                                 "start_at": "9999-12-31T23:59:59.999Z"})
    assert r.next_ms is None
    p = TickPlanner()
    p.upsert(r)
    assert p.due(T0 + 5000) == []


def test_a_smaller_herd_size_makes_fewer_jobs_a_herd() -> None:
    """`herd_size` (a node's config; the chaos suite sets 100): 100 jobs sharing an
    instant are claimed ten seconds ahead with it, and only a second ahead without."""
    midnight = T0 + 86_400_000
    for herd_size, wakeup in ((100, midnight - HERD_LOOKAHEAD_MS), (HERD_SIZE, None)):
        p = TickPlanner(herd_size=herd_size)
        for i in range(100):
            p.upsert(rec(f"h{i}", "0 0 * * *", T0 + 1000))
        woke = p.next_wakeup_ms()
        assert woke == (wakeup if wakeup is not None else midnight - p.lookahead_ms)
