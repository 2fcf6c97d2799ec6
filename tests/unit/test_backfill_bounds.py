"""The cost of listing a backfill is bounded before and while it is listed: a range over
ten years is refused without computing one instant, and a dense range stops after
`max_instants + 1` instants. Counted with a wrapper around the real schedule."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from raftcron.core.backfill import (
    MAX_BACKFILL_SPAN_MS,
    backfill_instants,
    check_backfill_span,
)
from raftcron.core.errors import ValidationError
from raftcron.core.schedule import CronSchedule, compile_schedule
from raftcron.core.timefmt import parse_iso_ms


class CountingSchedule:
    """The real schedule, counting the instants asked of it."""

    def __init__(self, sched: CronSchedule) -> None:
        self.sched = sched
        self.asked = 0

    def iter_between(self, after: int, until: int) -> Iterator[int]:
        for t in self.sched.iter_between(after, until):
            self.asked += 1
            yield t


def ms(text: str) -> int:
    return parse_iso_ms(text, "t")


def test_a_range_over_ten_years_is_refused_before_listing_anything() -> None:
    sched = CountingSchedule(compile_schedule("0 0 1 1 *", "Europe/Berlin"))
    with pytest.raises(ValidationError) as e:
        backfill_instants(sched, ms("1970-01-01T00:00:00Z"),  # type: ignore[arg-type]
                          ms("9999-12-31T23:59:59Z"))
    assert e.value.field == "end" and "ten years" in e.value.message
    assert sched.asked == 0


def test_a_dense_range_stops_one_past_the_cap() -> None:
    sched = CountingSchedule(compile_schedule("* * * * * *", "UTC"))
    with pytest.raises(ValidationError) as e:
        backfill_instants(sched, ms("2020-01-01T00:00:00Z"),  # type: ignore[arg-type]
                          ms("2029-12-31T00:00:00Z"), max_instants=500)
    assert "more than 500 instants" in e.value.message
    assert sched.asked == 501


def test_a_range_of_ten_years_is_listed_whole() -> None:
    sched = compile_schedule("0 0 1 1 *", "Europe/Berlin")
    start = ms("2010-01-01T00:00:00Z")
    got = backfill_instants(sched, start, start + MAX_BACKFILL_SPAN_MS)
    assert len(got) == 10 and got == sorted(got)


def test_span_edges() -> None:
    check_backfill_span(0, MAX_BACKFILL_SPAN_MS)
    with pytest.raises(ValidationError):
        check_backfill_span(0, MAX_BACKFILL_SPAN_MS + 1)
    with pytest.raises(ValidationError) as e:
        check_backfill_span(10, 9, "--end")
    assert e.value.field == "--end"
