"""Unit tests for raftcron.core.schedule (parsing, calendar rules, H, jitter, helpers)."""

from __future__ import annotations

import hashlib
from collections import Counter
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftcron.core.schedule import (
    CronSchedule,
    ScheduleError,
    compile_schedule,
    jitter_offset_ms,
    parse_instant,
    to_local_iso,
    to_utc_iso,
)


def z(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


def first_n(s: CronSchedule, after: str, n: int) -> list[int]:
    out: list[int] = []
    t: int | None = z(after)
    for _ in range(n):
        t = s.next_after(t)  # type: ignore[arg-type]
        assert t is not None
        out.append(t)
    return out


def days(*texts: str) -> list[int]:
    return [z(t + "T00:00:00Z") for t in texts]


# ------------------------------------------------------------------ basics


def test_every_five_minutes_utc() -> None:
    s = compile_schedule("*/5 * * * *")
    assert s.next_after(z("2026-01-01T00:00:00Z")) == z("2026-01-01T00:05:00Z")
    assert s.next_after(z("2026-01-01T00:04:59Z")) == z("2026-01-01T00:05:00Z")
    assert s.next_after(z("2026-12-31T23:59:00Z")) == z("2027-01-01T00:00:00Z")
    assert (s.has_seconds, s.is_fixed_time, s.dst_gap, s.dst_fold) == (
        False, False, "skip", "both")


def test_next_after_is_strictly_greater() -> None:
    s = compile_schedule("0 9 * * *", "UTC")
    assert s.next_after(z("2026-05-01T09:00:00Z")) == z("2026-05-02T09:00:00Z")
    assert s.next_after(z("2026-05-01T08:59:59Z")) == z("2026-05-01T09:00:00Z")


def test_weekdays_berlin() -> None:
    # 2026-03-06 is a Friday. 09:00 CET = 08:00Z.
    s = compile_schedule("0 9 * * 1-5", "Europe/Berlin")
    assert first_n(s, "2026-03-06T09:00:00Z", 3) == [
        z("2026-03-09T08:00:00Z"), z("2026-03-10T08:00:00Z"), z("2026-03-11T08:00:00Z")]
    assert s.describe() == "at 09:00 on Monday–Friday (Europe/Berlin)"


def test_fixed_offset_zone() -> None:
    # Etc/GMT-5 is UTC+05:00 (POSIX sign convention).
    s = compile_schedule("0 0 * * *", "Etc/GMT-5")
    assert s.next_after(z("2026-06-01T00:00:00Z")) == z("2026-06-01T19:00:00Z")


def test_leap_day() -> None:
    s = compile_schedule("0 0 29 2 *")
    out = list(s.iter_between(z("2023-01-01T00:00:00Z"), z("2033-01-01T00:00:00Z")))
    assert out == days("2024-02-29", "2028-02-29", "2032-02-29")
    # 2100 is not a leap year.
    assert s.next_after(z("2096-03-01T00:00:00Z")) == z("2104-02-29T00:00:00Z")


def test_none_when_nothing_within_horizon() -> None:
    # Feb 29 that is also a Sunday ('*/7' starts with '*', so DOM AND DOW): 2004, 2032, ...
    s = compile_schedule("0 0 29 2 */7")
    assert s.next_after(z("2000-01-01T00:00:00Z")) == z("2004-02-29T00:00:00Z")
    assert s.next_after(z("2005-01-01T00:00:00Z")) is None
    assert list(s.iter_between(z("2005-01-01T00:00:00Z"), z("2030-01-01T00:00:00Z"))) == []


def test_iter_between_bounds() -> None:
    s = compile_schedule("0 * * * *")
    a, b = z("2026-01-01T00:00:00Z"), z("2026-01-01T03:00:00Z")
    assert list(s.iter_between(a, b)) == [a + 3600, a + 7200, b]
    assert list(s.iter_between(b, a)) == []


# ------------------------------------------------------------------ seconds and macros


def test_seconds_field() -> None:
    s = compile_schedule("*/20 * * * * *")
    assert s.has_seconds and not s.is_fixed_time
    assert first_n(s, "2026-01-01T00:00:00Z", 4) == [
        z("2026-01-01T00:00:20Z"), z("2026-01-01T00:00:40Z"),
        z("2026-01-01T00:01:00Z"), z("2026-01-01T00:01:20Z")]
    s = compile_schedule("30 0 12 * * *")
    assert s.has_seconds and s.is_fixed_time
    assert s.next_after(z("2026-01-01T12:00:30Z")) == z("2026-01-02T12:00:30Z")
    assert not compile_schedule("*/30 0 12 * * *").is_fixed_time


@pytest.mark.parametrize("macro,equivalent", [
    ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *"), ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"), ("@DAILY", "0 0 * * *"),
])
def test_macros(macro: str, equivalent: str) -> None:
    a, b = z("2025-01-01T00:00:00Z"), z("2027-01-01T00:00:00Z")
    m, e = compile_schedule(macro, "Europe/Berlin"), compile_schedule(equivalent, "Europe/Berlin")
    assert list(m.iter_between(a, b)) == list(e.iter_between(a, b))
    assert (m.is_fixed_time, m.dst_gap, m.dst_fold) == (e.is_fixed_time, e.dst_gap, e.dst_fold)


def test_macro_values() -> None:
    assert compile_schedule("@weekly").next_after(z("2026-03-04T00:00:00Z")) == z(
        "2026-03-08T00:00:00Z")  # Sunday
    assert compile_schedule("@yearly").next_after(z("2026-03-04T00:00:00Z")) == z(
        "2027-01-01T00:00:00Z")
    assert not compile_schedule("@hourly").is_fixed_time
    assert compile_schedule("@daily").is_fixed_time


def test_names_and_sunday_seven() -> None:
    a, b = z("2026-01-01T00:00:00Z"), z("2026-03-01T00:00:00Z")
    ref = list(compile_schedule("0 0 * * 0").iter_between(a, b))
    assert ref[0] == z("2026-01-04T00:00:00Z")
    for expr in ("0 0 * * 7", "0 0 * * SUN", "0 0 * * sun"):
        assert list(compile_schedule(expr).iter_between(a, b)) == ref
    s = compile_schedule("0 0 1 JAN,jul *")
    assert list(s.iter_between(a, z("2026-12-31T00:00:00Z"))) == days("2026-07-01")
    s = compile_schedule("0 0 * * MON-FRI")
    assert first_n(s, "2026-01-02T00:00:00Z", 2) == days("2026-01-05", "2026-01-06")
    # 5-7: Friday, Saturday, Sunday.
    s = compile_schedule("0 0 * * 5-7")
    assert first_n(s, "2026-01-01T00:00:00Z", 4) == days(
        "2026-01-02", "2026-01-03", "2026-01-04", "2026-01-09")


def test_ranges_steps_lists() -> None:
    s = compile_schedule("10-40/15 1,3 * * *")
    assert first_n(s, "2026-01-01T00:00:00Z", 7) == [
        z("2026-01-01T01:10:00Z"), z("2026-01-01T01:25:00Z"), z("2026-01-01T01:40:00Z"),
        z("2026-01-01T03:10:00Z"), z("2026-01-01T03:25:00Z"), z("2026-01-01T03:40:00Z"),
        z("2026-01-02T01:10:00Z")]
    # a/n means a, a+n, ... up to the field maximum.
    s = compile_schedule("50/5 0 * * *")
    assert first_n(s, "2026-01-01T00:00:00Z", 3) == [
        z("2026-01-01T00:50:00Z"), z("2026-01-01T00:55:00Z"), z("2026-01-02T00:50:00Z")]


# ------------------------------------------------------------------ day-of-month / day-of-week


def test_vixie_or_when_both_restricted() -> None:
    # March 2026: the 1st is a Sunday, Mondays are 2, 9, 16, 23, 30.
    s = compile_schedule("0 0 1 * 1")
    out = list(s.iter_between(z("2026-02-28T00:00:00Z"), z("2026-03-31T00:00:00Z")))
    assert out == days("2026-03-01", "2026-03-02", "2026-03-09", "2026-03-16",
                       "2026-03-23", "2026-03-30")


def test_vixie_and_when_a_field_starts_with_star() -> None:
    # Days 1, 11, 21, 31 that are also Mondays: first are 2026-05-11 and 2026-06-01.
    s = compile_schedule("0 0 */10 * 1")
    assert first_n(s, "2026-03-01T00:00:00Z", 2) == days("2026-05-11", "2026-06-01")
    # '*' in one field: only the other restriction applies.
    assert first_n(compile_schedule("0 0 * * 1"), "2026-03-01T00:00:00Z", 2) == days(
        "2026-03-02", "2026-03-09")
    assert first_n(compile_schedule("0 0 1 * *"), "2026-03-01T00:00:00Z", 2) == days(
        "2026-04-01", "2026-05-01")
    assert first_n(compile_schedule("0 0 1 * ?"), "2026-03-01T00:00:00Z", 1) == days(
        "2026-04-01")


def test_last_day_of_month() -> None:
    s = compile_schedule("0 0 L * *")
    assert first_n(s, "2026-01-01T00:00:00Z", 4) == days(
        "2026-01-31", "2026-02-28", "2026-03-31", "2026-04-30")
    assert s.next_after(z("2024-02-01T00:00:00Z")) == z("2024-02-29T00:00:00Z")
    assert compile_schedule("0 0 L-2 2 *").next_after(z("2026-01-01T00:00:00Z")) == z(
        "2026-02-26T00:00:00Z")


def test_last_and_nth_weekday() -> None:
    # Jan 2026 Fridays: 2, 9, 16, 23, 30; Feb: 6, 13, 20, 27; Mar: 6, 13, 20, 27.
    assert first_n(compile_schedule("0 0 * * 5L"), "2026-01-01T00:00:00Z", 3) == days(
        "2026-01-30", "2026-02-27", "2026-03-27")
    assert first_n(compile_schedule("0 0 * * FRI#2"), "2026-01-01T00:00:00Z", 3) == days(
        "2026-01-09", "2026-02-13", "2026-03-13")
    # Fifth Monday: none in Jan (5..26) or Feb (2..23) 2026; Mar 30.
    assert compile_schedule("0 0 * * 1#5").next_after(z("2026-01-01T00:00:00Z")) == z(
        "2026-03-30T00:00:00Z")


def test_nearest_weekday() -> None:
    s = compile_schedule("0 0 15W * *")
    # Jan 15 2026 Thu; Feb 15 Sun -> Mon 16; Mar 15 Sun -> Mon 16.
    assert first_n(s, "2026-01-01T00:00:00Z", 3) == days("2026-01-15", "2026-02-16",
                                                          "2026-03-16")
    # Aug 15 2026 is a Saturday -> Friday 14.
    assert s.next_after(z("2026-08-01T00:00:00Z")) == z("2026-08-14T00:00:00Z")
    # 1W never leaves the month: Aug 1 2026 (Sat) -> Mon Aug 3.
    assert compile_schedule("0 0 1W 8 *").next_after(z("2026-01-01T00:00:00Z")) == z(
        "2026-08-03T00:00:00Z")
    # LW: Jan 31 2026 Sat -> Fri 30; May 31 Sun -> Fri 29.
    s = compile_schedule("0 0 LW * *")
    assert s.next_after(z("2026-01-01T00:00:00Z")) == z("2026-01-30T00:00:00Z")
    assert s.next_after(z("2026-05-01T00:00:00Z")) == z("2026-05-29T00:00:00Z")


# ------------------------------------------------------------------ H


def _expected_hash(job: str, field: str) -> int:
    digest = hashlib.sha256(f"raftcron-H\x00{job}\x00{field}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def test_h_is_stable_and_pinned() -> None:
    a = compile_schedule("H H * * *", hash_key="job-42")
    b = compile_schedule("H H * * *", hash_key="job-42")
    t = z("2026-01-01T00:00:00Z")
    assert list(a.iter_between(t, t + 5 * 86400)) == list(b.iter_between(t, t + 5 * 86400))
    # The value is a pure function of sha256(job id, field), the same in every process.
    minute = _expected_hash("job-42", "minute") % 60
    hour = _expected_hash("job-42", "hour") % 24
    assert a.next_after(t - 1) == t + hour * 3600 + minute * 60


def test_h_spreads_over_the_hour() -> None:
    t = z("2026-01-01T00:00:00Z")
    minutes = Counter(
        (compile_schedule("H * * * *", hash_key=f"job-{i}").next_after(t) - t) // 60  # type: ignore[operator]
        for i in range(1000)
    )
    assert len(minutes) >= 50
    assert max(minutes.values()) < 40  # expectation is ~16.7 per minute


def test_h_range_and_step() -> None:
    t = z("2026-01-01T00:00:00Z")
    for i in range(200):
        s = compile_schedule("H(10-20) H(2-4) * * *", hash_key=f"j{i}")
        fire = datetime.fromtimestamp(s.next_after(t), UTC)  # type: ignore[arg-type]
        assert 10 <= fire.minute <= 20 and 2 <= fire.hour <= 4
        s = compile_schedule("H/15 * * * *", hash_key=f"j{i}")
        mins = [datetime.fromtimestamp(x, UTC).minute for x in s.iter_between(t - 1, t + 3599)]
        assert len(mins) == 4
        assert 0 <= mins[0] < 15 and mins == [mins[0] + 15 * k for k in range(4)]
        s = compile_schedule("H(0-29)/10 * * * *", hash_key=f"j{i}")
        mins = [datetime.fromtimestamp(x, UTC).minute for x in s.iter_between(t - 1, t + 3599)]
        assert len(mins) == 3 and 0 <= mins[0] < 10 and max(mins) <= 29
        s = compile_schedule("0 0 H * *", hash_key=f"j{i}")
        assert 1 <= datetime.fromtimestamp(s.next_after(t), UTC).day <= 28  # type: ignore[arg-type]


def test_h_differs_by_key_and_field_only() -> None:
    t = z("2026-01-01T00:00:00Z")
    a = compile_schedule("H * * * *", hash_key="a")
    assert a == compile_schedule("H * * * *", hash_key="a")
    values = {compile_schedule("H * * * *", hash_key=k).next_after(t) for k in "abcdefgh"}
    assert len(values) > 1


def test_h_fixed_time_classification() -> None:
    assert compile_schedule("H H * * *", hash_key="x").is_fixed_time
    assert not compile_schedule("H/15 H * * *", hash_key="x").is_fixed_time
    assert not compile_schedule("H * * * *", hash_key="x").is_fixed_time


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize("expr", [
    "", "   ", "* * * *", "* * * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *",
    "* * 32 * *", "* * * 13 *", "* * * 0 *", "* * * * 8", "* * * FOO *", "* * * * MONDAY",
    "*/0 * * * *", "*/61 * * * *", "5-1 * * * *", "1,,2 * * * *", "- * * * *", "1- * * * *",
    "@reboot", "@every 5m", "H(50-10) * * * *", "H(0-99) * * * *", "* * * * 5#6",
    "* * * * 5#0", "? * * * *", "* * L-31 * *", "* * * * L", "x" * 300,
    "1.5 * * * *", "-1 * * * *", "* * * * * 60",
])
def test_bad_cron(expr: str) -> None:
    with pytest.raises(ScheduleError) as e:
        compile_schedule(expr)
    assert e.value.field == "schedule.cron"
    assert e.value.message and "\n" not in e.value.message


@pytest.mark.parametrize("expr", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 L-30 2 *"])
def test_never_fires(expr: str) -> None:
    with pytest.raises(ScheduleError) as e:
        compile_schedule(expr)
    assert (e.value.field, e.value.message) == ("schedule.cron", "never fires")


def test_long_and_non_string_input() -> None:
    with pytest.raises(ScheduleError) as e:
        compile_schedule("0 " * 200)
    assert e.value.field == "schedule.cron"
    with pytest.raises(ScheduleError) as e:
        compile_schedule(5)  # type: ignore[arg-type]
    assert e.value.field == "schedule.cron"
    with pytest.raises(ScheduleError) as e:
        compile_schedule(["0 0 * * *"])  # type: ignore[arg-type]
    assert e.value.field == "schedule.cron"
    with pytest.raises(ScheduleError) as e:
        compile_schedule("0 0 * * *", None)  # type: ignore[arg-type]
    assert e.value.field == "schedule.timezone"


@pytest.mark.parametrize("tz", ["Mars/Olympus", "", "America", "../etc/passwd", "/etc/x",
                                "localtime", "utc", "America/New_York "])
def test_bad_timezone(tz: str) -> None:
    with pytest.raises(ScheduleError) as e:
        compile_schedule("0 0 * * *", tz)
    assert e.value.field == "schedule.timezone"


def test_bad_policies() -> None:
    with pytest.raises(ScheduleError) as e:
        compile_schedule("0 0 * * *", "UTC", "later")
    assert e.value.field == "schedule.dst_gap"
    with pytest.raises(ScheduleError) as e:
        compile_schedule("0 0 * * *", "UTC", "auto", "twice")
    assert e.value.field == "schedule.dst_fold"
    assert isinstance(e.value, ValueError)


def test_explicit_policies_are_kept() -> None:
    s = compile_schedule("*/5 * * * *", "Europe/Berlin", "shift", "once")
    assert (s.dst_gap, s.dst_fold) == ("shift", "once")
    s = compile_schedule("0 3 * * *", "Europe/Berlin", "skip", "both")
    assert (s.dst_gap, s.dst_fold) == ("skip", "both")


def test_whitespace_tolerated() -> None:
    s = compile_schedule("  0\t9  * * 1-5 ")
    assert s.cron == "  0\t9  * * 1-5 "
    assert s.next_after(z("2026-03-06T09:00:00Z")) == z("2026-03-09T09:00:00Z")


# ------------------------------------------------------------------ jitter


def test_jitter_deterministic_and_bounded() -> None:
    assert jitter_offset_ms("job", 1_700_000_000, 0) == 0
    values = [jitter_offset_ms("job", 1_700_000_000 + 60 * i, 30) for i in range(2000)]
    assert all(0 <= v < 30_000 for v in values)
    assert values == [jitter_offset_ms("job", 1_700_000_000 + 60 * i, 30) for i in range(2000)]
    assert len(set(values)) > 1500
    assert min(values) < 3000 and max(values) > 27_000
    assert jitter_offset_ms("a", 1_700_000_000, 30) != jitter_offset_ms("b", 1_700_000_000, 30)
    assert all(jitter_offset_ms(f"j{i}", 0, 1) < 1000 for i in range(100))
    with pytest.raises(ValueError):
        jitter_offset_ms("job", 0, -1)


def test_jitter_pinned_formula() -> None:
    digest = hashlib.sha256(b"raftcron-jitter\x00job-1\x001772953200").digest()
    assert jitter_offset_ms("job-1", 1772953200, 60) == int.from_bytes(digest[:8], "big") % 60000


# ------------------------------------------------------------------ helpers and describe


def test_datetime_helpers() -> None:
    t = z("2026-03-08T07:00:00Z")
    assert to_utc_iso(t) == "2026-03-08T07:00:00Z"
    assert to_local_iso(t, "America/New_York") == "2026-03-08T03:00:00-04:00"
    assert to_local_iso(t - 1, "America/New_York") == "2026-03-08T01:59:59-05:00"
    assert parse_instant("2026-03-08T07:00:00Z") == t
    assert parse_instant("2026-03-08T03:00:00-04:00") == t
    assert parse_instant("2026-03-08T07:00:00.999+00:00") == t
    assert parse_instant("1969-12-31T23:59:59.5Z") == -1
    for bad in ("2026-03-08T07:00:00", "2026-03-08", "yesterday", "", "2026-13-01T00:00:00Z"):
        with pytest.raises(ValueError):
            parse_instant(bad)
    with pytest.raises(ScheduleError):
        to_local_iso(t, "Nowhere/City")


@pytest.mark.parametrize("expr,tz,text", [
    ("0 9 * * 1-5", "Europe/Berlin", "at 09:00 on Monday–Friday (Europe/Berlin)"),
    ("*/5 * * * *", "UTC", "every 5 minutes (UTC)"),
    ("* * * * *", "UTC", "every minute (UTC)"),
    ("0 9,17 * * *", "UTC", "at 09:00 and 17:00 (UTC)"),
    ("0 0 L * *", "UTC", "at 00:00 on the last day of the month (UTC)"),
    ("0 0 1 1 *", "UTC", "at 00:00 on day 1 of the month in January (UTC)"),
    ("30 12 * * 5#2", "UTC", "at 12:30 on the second Friday (UTC)"),
])
def test_describe(expr: str, tz: str, text: str) -> None:
    assert compile_schedule(expr, tz).describe() == text


def test_describe_never_raises() -> None:
    for expr in ("*/7 */3 */2 */2 */2", "H/5 H * * *", "0 0 1,15 * 1", "*/10 * 9-17 * * 1-5"):
        assert compile_schedule(expr, "Asia/Tokyo", hash_key="k").describe().endswith(
            "(Asia/Tokyo)")


# ------------------------------------------------------------------ property tests

ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Sydney",
         "Australia/Lord_Howe", "America/Santiago", "Asia/Tehran", "Asia/Kolkata",
         "Pacific/Chatham", "Europe/London"]

# Windows that contain DST transitions in 2024-2027 for the zones above, plus arbitrary ones.
WINDOW_STARTS = [z(t) for t in (
    "2026-03-07T00:00:00Z", "2026-03-28T00:00:00Z", "2026-04-03T00:00:00Z",
    "2026-09-05T00:00:00Z", "2026-09-26T00:00:00Z", "2026-10-02T00:00:00Z",
    "2026-10-24T00:00:00Z", "2026-10-31T00:00:00Z", "2025-03-29T00:00:00Z",
    "2027-01-01T00:00:00Z", "2024-02-28T00:00:00Z",
)]


def _field(values: list[int] | None) -> str:
    return "*" if values is None else ",".join(str(v) for v in values)


@st.composite
def simple_schedules(draw: st.DrawFn) -> tuple[str, dict[str, set[int] | None]]:
    mins = draw(st.one_of(st.none(), st.lists(st.integers(0, 59), min_size=1, max_size=4,
                                              unique=True)))
    hours = draw(st.one_of(st.none(), st.lists(st.integers(0, 23), min_size=1, max_size=4,
                                               unique=True)))
    doms = draw(st.one_of(st.none(), st.lists(st.integers(1, 31), min_size=1, max_size=6,
                                              unique=True)))
    dows = draw(st.one_of(st.none(), st.lists(st.integers(0, 6), min_size=1, max_size=4,
                                              unique=True)))
    expr = f"{_field(mins)} {_field(hours)} {_field(doms)} * {_field(dows)}"
    sets = {"min": mins, "hour": hours, "dom": doms, "dow": dows}
    return expr, {k: (None if v is None else set(v)) for k, v in sets.items()}


def _matches(local: datetime, sets: dict[str, set[int] | None]) -> bool:
    def ok(key: str, value: int) -> bool:
        allowed = sets[key]
        return allowed is None or value in allowed

    if not (ok("min", local.minute) and ok("hour", local.hour)):
        return False
    dom_ok, dow_ok = ok("dom", local.day), ok("dow", local.isoweekday() % 7)
    if sets["dom"] is not None and sets["dow"] is not None:
        return dom_ok or dow_ok
    return dom_ok and dow_ok


def _oracle(sets: dict[str, set[int] | None], tz: str, after: int, until: int,
            gap: str, fold: str) -> list[int]:
    """Brute force over every UTC minute: what a literal reading of the policies says."""
    zone = ZoneInfo(tz)
    out: set[int] = set()
    start = after - after % 60
    prev_local: datetime | None = None
    for u in range(start, until + 1, 60):
        local_aware = datetime.fromtimestamp(u, zone)
        local = local_aware.replace(tzinfo=None)
        if prev_local is not None and local - prev_local > timedelta(minutes=1):
            # A gap: local wall times strictly between prev_local and local never happened.
            if gap == "shift":
                missing = prev_local + timedelta(minutes=1)
                while missing < local:
                    if _matches(missing, sets):
                        out.add(u)
                        break
                    missing += timedelta(minutes=1)
        prev_local = local
        if u <= after or not _matches(local, sets):
            continue
        second_pass = local_aware.fold == 1 and (
            local_aware.replace(fold=0).utcoffset() != local_aware.utcoffset())
        if fold == "once" and second_pass:
            continue
        out.add(u)
    return sorted(t for t in out if after < t <= until)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=simple_schedules(),
    tz=st.sampled_from(ZONES),
    start=st.sampled_from(WINDOW_STARTS),
    offset=st.integers(0, 86400),
    length=st.integers(0, 3 * 86400),
    gap=st.sampled_from(["shift", "skip"]),
    fold=st.sampled_from(["once", "both"]),
)
def test_property_matches_brute_force(spec: tuple[str, dict[str, set[int] | None]], tz: str,
                                      start: int, offset: int, length: int, gap: str,
                                      fold: str) -> None:
    expr, sets = spec
    try:
        s = compile_schedule(expr, tz, gap, fold)
    except ScheduleError as e:
        assert e.message == "never fires"
        return
    after = start + offset
    until = after + length
    got = list(s.iter_between(after, until))
    assert all(after < t <= until for t in got)
    assert all(a < b for a, b in zip(got, got[1:], strict=False))
    chained: list[int] = []
    t = s.next_after(after)
    while t is not None and t <= until:
        chained.append(t)
        t = s.next_after(t)
    assert got == chained
    assert got == _oracle(sets, tz, after, until, gap, fold)


@settings(max_examples=100, deadline=None)
@given(
    expr=st.sampled_from(["*/5 * * * *", "0 * * * *", "30 2 * * *", "0 0 * * *",
                          "*/15 1-3 * * *", "0 9 * * 1-5", "0 0 L * *", "H H * * *",
                          "*/30 * * * * *", "0 0 1 * 1", "0 23,0 * * *"]),
    tz=st.sampled_from(ZONES),
    after=st.integers(z("2020-01-01T00:00:00Z"), z("2030-01-01T00:00:00Z")),
    length=st.integers(0, 10 * 86400),
    gap=st.sampled_from(["auto", "shift", "skip"]),
    fold=st.sampled_from(["auto", "once", "both"]),
)
def test_property_ascending_unique_consistent(expr: str, tz: str, after: int, length: int,
                                              gap: str, fold: str) -> None:
    s = compile_schedule(expr, tz, gap, fold, hash_key="prop")
    until = after + length
    got = list(s.iter_between(after, until))
    assert all(after < t <= until for t in got)
    assert all(a < b for a, b in zip(got, got[1:], strict=False))
    for i, t in enumerate(got):
        prev = got[i - 1] if i else after
        assert s.next_after(prev) == t
        if t - prev > 1:
            assert s.next_after(t - 1) == t


def test_a_zone_of_the_wrong_type_is_a_schedule_error_not_a_crash() -> None:
    from raftcron.core.schedule import to_local_iso

    for bad in (["Europe/Berlin"], {"tz": 1}, 5, ""):
        with pytest.raises(ScheduleError) as err:
            to_local_iso(0, bad)  # type: ignore[arg-type]
        assert err.value.field == "schedule.timezone"
