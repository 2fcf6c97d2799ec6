"""The herd chart counts a sub-minute schedule one minute at a time: the counts must equal
stepping through every instant, including across DST gaps and folds, zones with
half-hour offsets or half-hour DST, and start/end bounds that fall inside a minute."""

from __future__ import annotations

import json

import pytest

from raftcron.api.status import compute_herd
from raftcron.core.model import Job, parse_job
from raftcron.core.timefmt import parse_iso_ms


def spec(cron: str, tz: str, **schedule: object) -> str:
    return json.dumps(parse_job({"id": "j", "schedule": {"cron": cron, "timezone": tz,
                                                         **schedule},
                                 "target": {"shell": "true"}}).to_spec())


def stepped(spec_text: str, start_ms: int, hours: int, bucket_s: int) -> list[int]:
    """Every instant, one `next_after` at a time (the reference)."""
    job = Job.from_spec(json.loads(spec_text))
    sched = job.compiled()
    counts = [0] * (hours * 3600 // bucket_s)
    start_s = start_ms // 1000
    lo, hi = job.schedule.start_at_ms, job.schedule.end_at_ms
    for t in sched.iter_between(start_s - 1, start_s + hours * 3600 - 1):
        if (lo is None or t * 1000 >= lo) and (hi is None or t * 1000 <= hi):
            counts[(t - start_s) // bucket_s] += 1
    return counts


CASES = [
    ("* * * * * *", "Europe/Berlin", "2026-03-29T00:00:00Z", {}),  # gap 02:00 -> 03:00
    ("*/7 * 2 * * *", "Europe/Berlin", "2026-03-29T00:00:00Z", {"dst_gap": "skip"}),
    ("5-10,50 * 2 * * *", "Europe/Berlin", "2026-10-25T00:00:00Z", {}),  # fold 03:00 -> 02:00
    ("*/3 * 2 * * *", "Europe/Berlin", "2026-10-25T00:00:00Z", {"dst_fold": "once"}),
    ("* * 1-3 * * *", "America/St_Johns", "2026-03-08T00:00:00Z", {}),  # -03:30 -> -02:30
    ("*/5 * * * * *", "Australia/Lord_Howe", "2026-04-04T12:00:00Z", {}),  # 30-min DST
    ("0,30 * * * * *", "UTC", "2026-01-01T00:00:00Z", {}),
    ("* * * * * *", "UTC", "2026-01-01T00:00:00Z",
     {"start_at": "2026-01-01T01:00:17Z", "end_at": "2026-01-01T04:59:41Z"}),
    ("*/2 * * * * *", "Europe/Berlin", "2026-03-29T00:00:00Z",
     {"start_at": "2026-03-29T00:30:31Z", "end_at": "2026-03-29T01:00:09Z"}),
    ("0 */5 * * * *", "Asia/Kathmandu", "2026-01-01T00:00:00Z", {}),  # +05:45, one a minute
]


@pytest.mark.parametrize(("cron", "tz", "start", "schedule"), CASES)
@pytest.mark.parametrize("bucket_s", [60, 300])
def test_counting_a_minute_at_once_equals_stepping_every_instant(
        cron: str, tz: str, start: str, schedule: dict[str, object], bucket_s: int) -> None:
    text = spec(cron, tz, **schedule)
    start_ms = parse_iso_ms(start, "start")
    herd = compute_herd([text], start_ms, 6, bucket_s)
    assert not herd["truncated"]
    assert herd["counts"] == stepped(text, start_ms, 6, bucket_s)


def test_buckets_that_are_not_whole_minutes_step_every_instant() -> None:
    text = spec("* * * * * *", "UTC")
    start_ms = parse_iso_ms("2026-01-01T00:00:00Z", "start")
    herd = compute_herd([text], start_ms, 1, 90)
    assert herd["counts"] == stepped(text, start_ms, 1, 90) == [90] * 40


def test_ten_per_second_jobs_and_a_midnight_herd_are_counted_exactly_within_the_cap() -> None:
    per_second = [json.dumps(parse_job({"id": f"s{i}", "schedule": "* * * * * *",
                                        "target": {"shell": "true"}}).to_spec())
                  for i in range(10)]
    nightly = [json.dumps(parse_job({"id": f"n{i}", "schedule": "0 0 * * *",
                                     "target": {"shell": "true"}}).to_spec())
               for i in range(1000)]
    start_ms = parse_iso_ms("2026-01-01T12:00:00Z", "start")
    herd = compute_herd(per_second + nightly, start_ms, 24, 60)
    assert not herd["truncated"]
    assert herd["total"] == 10 * 86_400 + 1000
    assert herd["peak"] == {"at": "2026-01-02T00:00:00Z", "count": 1600}
    assert sorted(set(herd["counts"])) == [600, 1600]


def test_instants_a_calendar_excludes_are_not_counted_as_due() -> None:
    """A per-minute job under a calendar that excludes 10:00-11:00 and one whole date: the
    chart shows those minutes empty and counts them as excluded; the same job without the
    calendar is counted in full."""
    from raftcron.core.calendar import parse_calendar

    cal = parse_calendar({"timezone": "UTC", "exclude": [
        {"start": "2026-01-01T10:00:00Z", "end": "2026-01-01T11:00:00Z"},
        {"date": "2026-01-02"}]}, "maint")
    job = parse_job({"id": "j", "schedule": "* * * * *", "calendars": ["maint"],
                     "target": {"shell": "true"}})
    text = json.dumps(job.to_spec())
    start_ms = parse_iso_ms("2026-01-01T00:00:00Z", "start")
    herd = compute_herd([text], start_ms, 48, 3600, calendars={"maint": cal.compiled()})
    assert herd["counts"][:10] == [60] * 10 and herd["counts"][10] == 0
    assert herd["counts"][11:24] == [60] * 13 and herd["counts"][24:] == [0] * 24
    assert herd["excluded"] == 60 + 24 * 60 and herd["total"] == 23 * 60
    plain = compute_herd([text], start_ms, 48, 3600)  # no calendar loaded: nothing excluded
    assert plain["total"] == 48 * 60 and plain["excluded"] == 0
