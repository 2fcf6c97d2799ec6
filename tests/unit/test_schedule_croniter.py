"""How raftcron.core.schedule uses croniter: what it hands over, what it corrects, and what
happens when croniter refuses (mocks only here; the differential tests use the real one)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from croniter import CroniterBadCronError, croniter

from raftcron.core import schedule
from raftcron.core.schedule import ScheduleError, compile_schedule


@pytest.fixture
def cold_caches() -> Iterator[None]:
    """Every cached parse is dropped before and after, so croniter is asked afresh."""
    def clear() -> None:
        for cached in (schedule._shape, schedule._expand, schedule._compile,
                       schedule._croniter_values, schedule._fires_ever):
            cached.cache_clear()

    clear()
    yield
    clear()


def test_croniter_expands_the_plain_items(cold_caches: None,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    real = croniter.expand

    def spy(expr: str, *args: object, **kwargs: object) -> object:
        asked.append(expr)
        return real(expr, *args, **kwargs)

    monkeypatch.setattr(croniter, "expand", spy)
    s = compile_schedule("10-40/15 9,17 * JAN-MAR MON-FRI")
    # One six-field question per field, croniter's order (seconds last); names are ours.
    assert {"10-40/15 * * * * *", "* 9,17 * * * *", "* * * 1-3 * *", "* * * * 1-5 *",
            "* * * * * 0"} <= set(asked)
    assert s._fields.minutes == (10, 25, 40) and s._fields.months == (1, 2, 3)
    assert s._fields.dow_values == frozenset({1, 2, 3, 4, 5})


def test_croniter_sees_only_digits_and_operators(cold_caches: None,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Names are numbers and H is resolved before croniter: its random R never runs."""
    asked: list[str] = []
    real = croniter.expand
    monkeypatch.setattr(croniter, "expand",
                        lambda expr, *a, **k: asked.append(expr) or real(expr, *a, **k))
    for cron in ("H H(1-5) H * SUN-SAT", "*/5 * * JAN,jul MON#2,5L", "@daily", "0 0 L,3W * *",
                 "H/20 */2 * * * ?", "0 0 1-1/3 DEC/3 7/2"):
        compile_schedule(cron, hash_key="job-r")
    assert asked and all(re.fullmatch(r"[0-9*/,\- ]+", e) for e in asked), asked
    for cron in ("R * * * *", "R(0-5) * * * *", "0 0 * * R"):
        with pytest.raises(ScheduleError) as e:
            compile_schedule(cron)
        assert e.value.field == "schedule.cron"


def test_a_croniter_refusal_is_a_schedule_error_without_its_text(
        cold_caches: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(expr: str, *args: object, **kwargs: object) -> object:
        raise CroniterBadCronError("Traceback (most recent call last):\n  File ...")

    monkeypatch.setattr(croniter, "expand", refuse)
    with pytest.raises(ScheduleError) as e:
        compile_schedule("10-40/15 9 1 * *")
    assert e.value.field == "schedule.cron"
    assert e.value.message == "bad day-of-month field '1'"  # the first field croniter sees


def test_any_other_croniter_failure_is_a_schedule_error_too(
        cold_caches: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(expr: str, *args: object, **kwargs: object) -> object:
        raise TypeError("unexpected")

    monkeypatch.setattr(croniter, "expand", broken)
    with pytest.raises(ScheduleError) as e:
        compile_schedule("0 9 * * *")
    assert e.value.field == "schedule.cron"


def test_what_croniter_reads_differently_is_respelled() -> None:
    """If croniter ever agrees with cron on these, the respelling in spell() can go."""
    # An equal range: croniter widens it to the whole field; cron means the one value.
    assert croniter.expand("5-5 * * * *")[0][0] == ["*"]
    assert compile_schedule("5-5 * * * *")._fields.minutes == (5,)
    assert croniter.expand("0 0 1 JAN-JAN *")[0][3] == ["*"]
    assert compile_schedule("0 0 1 JAN-JAN *")._fields.months == (1,)
    # 7/n in day-of-week: croniter reads 0,2,4,6; cron: 7 (Sunday), nothing after it.
    assert croniter.expand("0 0 * * 7/2")[0][4] == [0, 2, 4, 6]
    assert compile_schedule("0 0 * * 7/2")._fields.dow_values == frozenset({0})


@pytest.mark.parametrize("cron", ["5-1 * * * *", "*/61 * * * *", "0005 * * * *"])
def test_what_croniter_accepts_and_cron_refuses_stays_refused(cron: str) -> None:
    croniter.expand(cron)  # croniter takes it
    with pytest.raises(ScheduleError) as e:
        compile_schedule(cron)
    assert e.value.field == "schedule.cron"
