"""Several schedules on one job: the union, the matched names, and their validation."""

from __future__ import annotations

import pytest

from raftcron.core.errors import ValidationError
from raftcron.core.model import MAX_SCHEDULES, Job, parse_job
from raftcron.core.timefmt import parse_iso_ms

T0 = parse_iso_ms("2026-01-05T00:00:00Z", "t")  # a Monday


def job(**kw: object) -> Job:
    return parse_job({"id": "multi", "target": {"shell": "true"}, **kw})


def test_the_union_fires_a_shared_instant_once_and_names_both_schedules() -> None:
    j = job(schedules=[{"cron": "0 */6 * * *", "name": "six-hourly"},
                       {"cron": "0 12 * * *", "name": "noon"}])
    fires = j.fire_times()
    day = list(fires.iter_after(T0 - 1, T0 + 86_400_000 - 1))
    hours = [(t - T0) // 3_600_000 for t in day]
    assert hours == [0, 6, 12, 18]  # 12:00 is named by both and listed once
    assert fires.matched_names(T0 + 12 * 3_600_000) == ["six-hourly", "noon"]
    assert fires.matched_names(T0 + 6 * 3_600_000) == ["six-hourly"]


def test_each_schedule_keeps_its_zone_and_bounds() -> None:
    j = job(schedules=[
        {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
        {"cron": "0 12 * * 6", "timezone": "UTC", "start_at": "2026-01-10T00:00:00Z"}])
    week = list(j.fire_times().iter_after(T0 - 1, T0 + 14 * 86_400_000))
    berlin_9 = [t for t in week if (t - T0) % 86_400_000 == 8 * 3_600_000]
    saturdays = [t for t in week if (t - T0) % 86_400_000 == 12 * 3_600_000]
    assert len(berlin_9) == 10  # two working weeks, 08:00 UTC in winter
    # 2026-01-10 is the first Saturday on or after start_at; then 2026-01-17.
    assert saturdays == [T0 + 5 * 86_400_000 + 12 * 3_600_000,
                         T0 + 12 * 86_400_000 + 12 * 3_600_000]
    assert j.fire_times().matched_names(saturdays[0]) == ["1"]  # default names: positions


def test_a_single_schedule_keeps_its_old_spec_and_api_shape() -> None:
    old = job(schedule={"cron": "0 9 * * *"}).to_spec()
    assert "schedules" not in old and "calendars" not in old and "labels" not in old
    listed = job(schedules=[{"cron": "0 9 * * *"}])
    assert listed.to_spec() == old  # a list of one is the single form
    shown = Job.from_spec(old).to_api()
    assert "schedule" in shown and "schedules" not in shown
    assert shown["calendars"] == [] and shown["labels"] == {}


def test_a_spec_stored_before_the_new_fields_decodes() -> None:
    spec = job(schedule="*/5 * * * *").to_spec()
    for key in ("schedules", "calendars", "labels"):
        spec.pop(key, None)
    j = Job.from_spec(spec)
    assert j.schedules == () and j.calendars == () and j.labels == {}
    assert j.fire_times().is_single


def test_multi_schedule_api_shape_is_accepted_back() -> None:
    j = job(schedules=[{"cron": "0 9 * * *"}, {"cron": "0 12 * * 6", "name": "sat"}])
    shown = j.to_api()
    assert "schedule" not in shown
    again = parse_job({k: shown[k] for k in ("id", "schedules", "target", "calendars",
                                            "labels")})
    assert again.to_spec() == j.to_spec()


@pytest.mark.parametrize(("body", "field"), [
    ({"schedules": []}, "schedules"),
    ({"schedules": [{"cron": "0 9 * * *"}] * (MAX_SCHEDULES + 1)}, "schedules"),
    ({"schedules": "0 9 * * *"}, "schedules"),
    ({"schedules": [{"cron": "0 9 * * *"}, {"cron": "61 * * * *"}]}, "schedules.1.cron"),
    ({"schedules": [{"cron": "0 9 * * *"}, {"cron": "0 9 * * *", "timezone": "Mars/X"}]},
     "schedules.1.timezone"),
    ({"schedules": [{"cron": "0 9 * * *", "name": "a"}, {"cron": "0 1 * * *", "name": "a"}]},
     "schedules.1.name"),
    ({"schedules": [{"cron": "0 9 * * *", "name": "a b"}]}, "schedules.0.name"),
    ({"schedules": [{"cron": "0 9 * * *", "every": 1}]}, "schedules.0.every"),
    ({"schedules": [{"cron": "0 9 * * *"}], "schedule": "0 9 * * *"}, "schedules"),
    ({"schedule": {"cron": "0 9 * * *", "name": "x"}}, "schedule.name"),
    ({"schedule": "0 9 * * *", "labels": {"team": "a b"}}, "labels.team"),
    ({"schedule": "0 9 * * *", "labels": {"a b": "x"}}, "labels"),
    ({"schedule": "0 9 * * *", "labels": []}, "labels"),
    ({"schedule": "0 9 * * *", "calendars": ["ok", "bad name"]}, "calendars.1"),
    ({"schedule": "0 9 * * *", "calendars": ["a", "a"]}, "calendars"),
    ({"schedule": "0 9 * * *", "calendars": "a"}, "calendars"),
    ({}, "schedule"),
])
def test_bad_schedules_labels_and_calendars_name_the_field(body: dict, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        job(**body)
    assert e.value.field == field


def _two_second_schedules() -> Job:
    return job(schedules=[{"cron": "*/2 * * * * *"}, {"cron": "*/3 * * * * *"}])


def test_the_herd_chart_counts_the_union() -> None:
    import json

    from raftcron.api.status import compute_herd

    spec = json.dumps(_two_second_schedules().to_spec())
    herd = compute_herd([spec], T0, 1, 60)
    assert herd["counts"] == [40] * 60  # 30 even + 20 multiples of 3 - 10 shared, a minute


def test_deadlines_look_for_unclaimed_instants_of_the_union() -> None:
    from raftcron.leader.deadlines import Deadlines

    got = Deadlines._unclaimed(object(), _two_second_schedules().to_spec(),  # type: ignore[arg-type]
                               T0, T0 + 6000)
    assert got == [T0 + 2000, T0 + 3000, T0 + 4000, T0 + 6000]


def test_a_backfill_lists_the_union_once() -> None:
    from raftcron.core.backfill import backfill_instants

    got = backfill_instants(_two_second_schedules().fire_times(), T0, T0 + 6000)
    assert got == [T0, T0 + 2000, T0 + 3000, T0 + 4000, T0 + 6000]
