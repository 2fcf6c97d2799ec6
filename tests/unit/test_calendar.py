"""Calendars: validation naming the field, and which instants each form excludes."""

from __future__ import annotations

import pytest

from raftcron.core.calendar import MAX_EXCLUSIONS, Calendar, excluding_calendar, parse_calendar
from raftcron.core.errors import ValidationError
from raftcron.core.timefmt import parse_iso_ms


def ms(text: str) -> int:
    return parse_iso_ms(text, "t")


def cal(name: str = "holidays", **kw: object) -> Calendar:
    return parse_calendar({"timezone": "Europe/Berlin", "exclude": [], **kw}, name)


def test_a_date_excludes_the_whole_local_day() -> None:
    c = cal(exclude=[{"date": "2026-12-25"}]).compiled()
    assert c.excludes(ms("2026-12-24T23:00:00Z"))  # 00:00 in Berlin
    assert c.excludes(ms("2026-12-25T22:59:59Z"))
    assert not c.excludes(ms("2026-12-24T22:59:59Z"))
    assert not c.excludes(ms("2026-12-25T23:00:00Z"))


def test_a_cron_excludes_the_minutes_it_names_in_the_zone() -> None:
    c = cal(exclude=[{"cron": "* * 24-26 12 *"}]).compiled()
    assert c.excludes(ms("2026-12-23T23:30:00Z"))  # 00:30 on the 24th in Berlin
    assert c.excludes(ms("2026-12-26T22:59:30Z"))
    assert not c.excludes(ms("2026-12-26T23:00:00Z"))
    weekend = cal(exclude=[{"cron": "* * * * 0,6"}]).compiled()
    assert weekend.excludes(ms("2026-01-03T12:00:00Z"))  # Saturday
    assert not weekend.excludes(ms("2026-01-05T12:00:00Z"))


def test_a_window_is_half_open() -> None:
    c = cal(exclude=[{"start": "2026-03-01T00:00:00Z", "end": "2026-03-02T00:00:00Z"}])
    cc = c.compiled()
    assert cc.excludes(ms("2026-03-01T00:00:00Z"))
    assert cc.excludes(ms("2026-03-01T23:59:59Z"))
    assert not cc.excludes(ms("2026-03-02T00:00:00Z"))
    assert c.to_api()["exclude"] == [{"start": "2026-03-01T00:00:00Z",
                                      "end": "2026-03-02T00:00:00Z"}]


def test_the_first_excluding_calendar_is_named() -> None:
    a = cal("freeze", exclude=[{"date": "2026-12-25"}]).compiled()
    b = cal("holidays", exclude=[{"date": "2026-12-25"}, {"date": "2026-12-26"}]).compiled()
    assert excluding_calendar([a, b], ms("2026-12-25T12:00:00Z")) == "freeze"
    assert excluding_calendar([a, b], ms("2026-12-26T12:00:00Z")) == "holidays"
    assert excluding_calendar([a, b], ms("2026-12-27T12:00:00Z")) is None


@pytest.mark.parametrize(("body", "field"), [
    ({"timezone": "Mars/Olympus", "exclude": []}, "timezone"),
    ({"exclude": "x"}, "exclude"),
    ({}, "exclude"),
    ({"exclude": [{"date": "2026-12-25"}] * (MAX_EXCLUSIONS + 1)}, "exclude"),
    ({"exclude": [{"date": "2026-02-30"}]}, "exclude.0.date"),
    ({"exclude": [{"date": "25.12.2026"}]}, "exclude.0.date"),
    ({"exclude": [{"cron": "61 * * * *"}]}, "exclude.0.cron"),
    ({"exclude": [{"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}]},
     "exclude.0.end"),
    ({"exclude": [{"start": "2026-01-02T00:00:00"}]}, "exclude.0.end"),
    ({"exclude": [{"start": "2026-01-01T00:00:00", "end": "2026-01-02T00:00:00Z"}]},
     "exclude.0.start"),
    ({"exclude": [{"date": "2026-12-25", "cron": "* * * * *"}]}, "exclude.0"),
    ({"exclude": [{"day": "x"}]}, "exclude.0.day"),
    ({"exclude": [5]}, "exclude.0"),
    ({"exclude": [], "tenant": "a b"}, "tenant"),
    ({"exclude": [], "colour": "red"}, "colour"),
    ({"exclude": [], "name": "other"}, "name"),
])
def test_bad_calendars_name_the_field(body: dict, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_calendar(body, "holidays")
    assert e.value.field == field


def test_the_canonical_spec_round_trips() -> None:
    c = cal(exclude=[{"cron": "* * 24-26 12 *"}, {"date": "2026-12-31"},
                     {"start": "2026-03-01T00:00:00+01:00", "end": "2026-03-02T00:00:00Z"}])
    assert Calendar.from_spec(c.to_spec()) == c
