"""DST behaviour of raftcron.core.schedule, checked against hand-derived tables.

Each expected instant below was worked out from the zone's published rules (transition
date, local wall time and offsets), not from the module's output.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from raftcron.core.schedule import compile_schedule


def z(text: str) -> int:
    """ISO UTC text -> epoch seconds (independent of the module's parse_instant)."""
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


def fires(cron: str, tz: str, after: str, until: str, gap: str = "auto",
          fold: str = "auto") -> list[int]:
    s = compile_schedule(cron, tz, gap, fold)
    return list(s.iter_between(z(after), z(until)))


def zs(*texts: str) -> list[int]:
    return [z(t) for t in texts]


# (zone, cron, after, until, {policy: expected}) where policy is "gap/fold".
# A fixed-time job around a gap: local 02:30 does not exist on the transition day.
GAP_FIXED = [
    # New York, 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z).
    ("America/New_York", "30 2 * * *", "2026-03-07T00:00:00Z", "2026-03-09T12:00:00Z",
     ["2026-03-07T07:30:00Z", "2026-03-09T06:30:00Z"], "2026-03-08T07:00:00Z"),
    # Berlin, 2026-03-29 02:00 CET -> 03:00 CEST (01:00Z).
    ("Europe/Berlin", "30 2 * * *", "2026-03-28T00:00:00Z", "2026-03-30T12:00:00Z",
     ["2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z"], "2026-03-29T01:00:00Z"),
    # Sydney, 2026-10-04 02:00 AEST -> 03:00 AEDT (2026-10-03 16:00Z).
    ("Australia/Sydney", "30 2 * * *", "2026-10-02T00:00:00Z", "2026-10-05T00:00:00Z",
     ["2026-10-02T16:30:00Z", "2026-10-04T15:30:00Z"], "2026-10-03T16:00:00Z"),
    # Lord Howe, 2026-10-04 02:00 +10:30 -> 02:30 +11 (2026-10-03 15:30Z).
    ("Australia/Lord_Howe", "15 2 * * *", "2026-10-02T00:00:00Z", "2026-10-05T00:00:00Z",
     ["2026-10-02T15:45:00Z", "2026-10-04T15:15:00Z"], "2026-10-03T15:30:00Z"),
    # Santiago, 2026-09-06 00:00 -04 -> 01:00 -03 (04:00Z): midnight does not exist.
    ("America/Santiago", "0 0 * * *", "2026-09-05T00:00:00Z", "2026-09-07T12:00:00Z",
     ["2026-09-05T04:00:00Z", "2026-09-07T03:00:00Z"], "2026-09-06T04:00:00Z"),
]


@pytest.mark.parametrize("zone,cron,after,until,normal,shifted", GAP_FIXED)
@pytest.mark.parametrize("fold", ["once", "both", "auto"])
def test_gap_fixed_time(zone: str, cron: str, after: str, until: str, normal: list[str],
                        shifted: str, fold: str) -> None:
    with_shift = sorted(zs(*normal, shifted))
    assert fires(cron, zone, after, until, "shift", fold) == with_shift
    assert fires(cron, zone, after, until, "auto", fold) == with_shift
    assert fires(cron, zone, after, until, "skip", fold) == zs(*normal)


# A fixed-time job around a fold: local time occurs twice on the transition day.
FOLD_FIXED = [
    # New York, 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z).
    ("America/New_York", "30 1 * * *", "2026-10-31T00:00:00Z", "2026-11-02T12:00:00Z",
     ["2026-10-31T05:30:00Z", "2026-11-02T06:30:00Z"],
     "2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z"),
    # Berlin, 2026-10-25 03:00 CEST -> 02:00 CET (01:00Z).
    ("Europe/Berlin", "30 2 * * *", "2026-10-24T00:00:00Z", "2026-10-26T12:00:00Z",
     ["2026-10-24T00:30:00Z", "2026-10-26T01:30:00Z"],
     "2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z"),
    # Sydney, 2026-04-05 03:00 AEDT -> 02:00 AEST (2026-04-04 16:00Z).
    ("Australia/Sydney", "30 2 * * *", "2026-04-03T00:00:00Z", "2026-04-06T00:00:00Z",
     ["2026-04-03T15:30:00Z", "2026-04-05T16:30:00Z"],
     "2026-04-04T15:30:00Z", "2026-04-04T16:30:00Z"),
    # Lord Howe, 2026-04-05 02:00 +11 -> 01:30 +10:30 (2026-04-04 15:00Z).
    ("Australia/Lord_Howe", "45 1 * * *", "2026-04-03T00:00:00Z", "2026-04-06T00:00:00Z",
     ["2026-04-03T14:45:00Z", "2026-04-05T15:15:00Z"],
     "2026-04-04T14:45:00Z", "2026-04-04T15:15:00Z"),
    # Santiago, 2026-04-05 00:00 -03 -> 2026-04-04 23:00 -04 (03:00Z).
    ("America/Santiago", "30 23 * * *", "2026-04-03T12:00:00Z", "2026-04-06T12:00:00Z",
     ["2026-04-04T02:30:00Z", "2026-04-06T03:30:00Z"],
     "2026-04-05T02:30:00Z", "2026-04-05T03:30:00Z"),
    # Moscow's last transition, 2014-10-26 02:00 +04 -> 01:00 +03 (2014-10-25 22:00Z).
    ("Europe/Moscow", "30 1 * * *", "2014-10-24T00:00:00Z", "2014-10-27T00:00:00Z",
     ["2014-10-24T21:30:00Z", "2014-10-26T22:30:00Z"],
     "2014-10-25T21:30:00Z", "2014-10-25T22:30:00Z"),
]


@pytest.mark.parametrize("zone,cron,after,until,normal,first,second", FOLD_FIXED)
@pytest.mark.parametrize("gap", ["shift", "skip", "auto"])
def test_fold_fixed_time(zone: str, cron: str, after: str, until: str, normal: list[str],
                         first: str, second: str, gap: str) -> None:
    assert fires(cron, zone, after, until, gap, "once") == sorted(zs(*normal, first))
    assert fires(cron, zone, after, until, gap, "auto") == sorted(zs(*normal, first))
    assert fires(cron, zone, after, until, gap, "both") == sorted(zs(*normal, first, second))


def test_required_example_new_york() -> None:
    s = compile_schedule("30 2 * * *", "America/New_York")
    assert (s.dst_gap, s.dst_fold, s.is_fixed_time) == ("shift", "once", True)
    out = list(s.iter_between(z("2026-03-07T00:00:00Z"), z("2026-03-09T23:59:59Z")))
    assert out == zs("2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z")
    assert s.next_after(z("2026-03-07T07:30:00Z")) == z("2026-03-08T07:00:00Z")
    assert s.next_after(z("2026-03-08T06:59:59Z")) == z("2026-03-08T07:00:00Z")
    assert s.next_after(z("2026-03-08T07:00:00Z")) == z("2026-03-09T06:30:00Z")


# ------------------------------------------------------------------ non-fixed jobs


def test_every_30_minutes_new_york_gap() -> None:
    # Local 00:30 EST=05:30Z, 01:00=06:00Z, 01:30=06:30Z, [02:00 and 02:30 missing],
    # 03:00 EDT=07:00Z, 03:30=07:30Z, 04:00=08:00Z.
    expected = zs("2026-03-08T05:30:00Z", "2026-03-08T06:00:00Z", "2026-03-08T06:30:00Z",
                  "2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z", "2026-03-08T08:00:00Z")
    args = ("*/30 * * * *", "America/New_York", "2026-03-08T05:00:00Z", "2026-03-08T08:00:00Z")
    s = compile_schedule("*/30 * * * *", "America/New_York")
    assert (s.dst_gap, s.dst_fold, s.is_fixed_time) == ("skip", "both", False)
    assert fires(*args) == expected
    assert fires(*args, gap="skip") == expected
    # Under shift 02:00 and 02:30 both map to 07:00Z, which 03:00 already occupies: one fire.
    assert fires(*args, gap="shift") == expected
    assert fires(*args, gap="shift", fold="once") == expected


def test_every_30_minutes_new_york_fold() -> None:
    # 00:30 EDT=04:30Z, 01:00 EDT=05:00Z, 01:30 EDT=05:30Z, 01:00 EST=06:00Z,
    # 01:30 EST=06:30Z, 02:00 EST=07:00Z.
    args = ("*/30 * * * *", "America/New_York", "2026-11-01T04:00:00Z", "2026-11-01T07:00:00Z")
    both = zs("2026-11-01T04:30:00Z", "2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z",
              "2026-11-01T06:00:00Z", "2026-11-01T06:30:00Z", "2026-11-01T07:00:00Z")
    once = zs("2026-11-01T04:30:00Z", "2026-11-01T05:00:00Z", "2026-11-01T05:30:00Z",
              "2026-11-01T07:00:00Z")
    assert fires(*args) == both
    assert fires(*args, fold="both") == both
    assert fires(*args, gap="shift", fold="both") == both
    assert fires(*args, fold="once") == once
    assert fires(*args, gap="shift", fold="once") == once


def test_hourly_follows_real_time_across_both_transitions() -> None:
    # Hourly jobs fire every real hour: 23 fires on the spring day, 25 on the fall day.
    s = compile_schedule("0 * * * *", "America/New_York")
    spring = list(s.iter_between(z("2026-03-08T04:59:59Z"), z("2026-03-09T03:59:59Z")))
    assert len(spring) == 23
    assert all(b - a == 3600 for a, b in zip(spring, spring[1:], strict=False))
    fall = list(s.iter_between(z("2026-11-01T03:59:59Z"), z("2026-11-02T04:59:59Z")))
    assert len(fall) == 25
    assert all(b - a == 3600 for a, b in zip(fall, fall[1:], strict=False))


def test_quarter_hours_in_the_gap_hour() -> None:
    # */15 2 * * *: 02:00-02:45 local. Mar 7 EST: 07:00-07:45Z. Mar 8: all missing.
    # Mar 9 EDT: 06:00-06:45Z.
    after, until = "2026-03-07T00:00:00Z", "2026-03-09T23:00:00Z"
    mar7 = zs("2026-03-07T07:00:00Z", "2026-03-07T07:15:00Z", "2026-03-07T07:30:00Z",
              "2026-03-07T07:45:00Z")
    mar9 = zs("2026-03-09T06:00:00Z", "2026-03-09T06:15:00Z", "2026-03-09T06:30:00Z",
              "2026-03-09T06:45:00Z")
    tz = "America/New_York"
    assert not compile_schedule("*/15 2 * * *", tz).is_fixed_time
    assert fires("*/15 2 * * *", tz, after, until) == mar7 + mar9
    # Under shift the four missing times collapse into one fire at 03:00 EDT (07:00Z).
    shifted = fires("*/15 2 * * *", tz, after, until, "shift", "once")
    assert shifted == mar7 + [z("2026-03-08T07:00:00Z")] + mar9


def test_lord_howe_quarter_hours_gap_and_fold() -> None:
    tz = "Australia/Lord_Howe"
    # Gap: local 01:45 (+10:30)=15:15Z, [02:00, 02:15 missing], 02:30 (+11)=15:30Z, 02:45=15:45Z
    args = ("*/15 * * * *", tz, "2026-10-03T15:00:00Z", "2026-10-03T15:45:00Z")
    expected = zs("2026-10-03T15:15:00Z", "2026-10-03T15:30:00Z", "2026-10-03T15:45:00Z")
    for gap in ("auto", "skip", "shift"):
        assert fires(*args, gap=gap) == expected
    # Fold (30 min): 01:30 +11=14:30Z, 01:45 +11=14:45Z, then 01:30 +10:30=15:00Z,
    # 01:45 +10:30=15:15Z, 02:00 +10:30=15:30Z.
    args = ("*/15 * * * *", tz, "2026-04-04T14:15:00Z", "2026-04-04T15:30:00Z")
    assert fires(*args) == zs("2026-04-04T14:30:00Z", "2026-04-04T14:45:00Z",
                              "2026-04-04T15:00:00Z", "2026-04-04T15:15:00Z",
                              "2026-04-04T15:30:00Z")
    assert fires(*args, fold="once") == zs("2026-04-04T14:30:00Z", "2026-04-04T14:45:00Z",
                                           "2026-04-04T15:30:00Z")


def test_santiago_midnight_fold_is_not_ambiguous() -> None:
    # At 03:00Z on 2026-04-05 clocks go from 00:00 -03 back to 23:00 -04, so local midnight
    # of Apr 5 happens once, at 04:00Z.
    expected = zs("2026-04-04T03:00:00Z", "2026-04-05T04:00:00Z", "2026-04-06T04:00:00Z")
    for fold in ("once", "both", "auto"):
        got = fires("0 0 * * *", "America/Santiago", "2026-04-03T12:00:00Z",
                    "2026-04-06T12:00:00Z", fold=fold)
        assert got == expected


@pytest.mark.parametrize("zone,transition_days", [
    ("America/New_York", ("2026-03-08", "2026-11-01")),
    ("Europe/Berlin", ("2026-03-29", "2026-10-25")),
    ("Australia/Sydney", ("2026-04-04", "2026-10-03")),
    ("Australia/Lord_Howe", ("2026-04-04", "2026-10-03")),
    ("America/Santiago", ("2026-04-05", "2026-09-06")),
])
def test_every_minute_is_every_real_minute(zone: str, transition_days: tuple[str, ...]) -> None:
    s = compile_schedule("* * * * *", zone)
    for day in transition_days:
        a = z(day + "T00:00:00Z") - 2 * 86400
        out = list(s.iter_between(a, a + 4 * 86400))
        assert out == list(range(a + 60, a + 4 * 86400 + 1, 60))


# ------------------------------------------------------------------ abolished DST


def _iso(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_moscow_no_spurious_shifts_after_2014() -> None:
    # Moscow is +03 all year since 2014-10-26; 02:30 local is always 23:30Z the day before,
    # including the old last-Sunday-of-March/October transition days.
    for start in ("2026-03-27T00:00:00Z", "2026-10-23T00:00:00Z"):
        for gap, fold in (("auto", "auto"), ("shift", "both"), ("skip", "once")):
            out = fires("30 2 * * *", "Europe/Moscow", start, _iso(z(start) + 4 * 86400),
                        gap, fold)
            assert [t % 86400 for t in out] == [23 * 3600 + 1800] * 4


@pytest.mark.parametrize("zone,start,local_midnight_utc_hour", [
    # Sao Paulo (-03 since 2019): former DST start (first Sunday of Nov) and end (Feb).
    ("America/Sao_Paulo", "2026-10-30T12:00:00Z", 3),
    ("America/Sao_Paulo", "2026-02-13T12:00:00Z", 3),
    # Tehran (+03:30 since 2022): former transitions around 21/22 March and September.
    ("Asia/Tehran", "2026-03-19T12:00:00Z", 20.5),
    ("Asia/Tehran", "2026-09-19T12:00:00Z", 20.5),
])
def test_abolished_dst_daily_midnight(zone: str, start: str,
                                      local_midnight_utc_hour: float) -> None:
    out = fires("0 0 * * *", zone, start, _iso(z(start) + 5 * 86400))
    assert len(out) == 5
    assert all(t % 86400 == int(local_midnight_utc_hour * 3600) for t in out)
    assert all(b - a == 86400 for a, b in zip(out, out[1:], strict=False))


def test_tehran_every_15_minutes_uniform_in_2026() -> None:
    s = compile_schedule("*/15 * * * *", "Asia/Tehran")
    a = z("2026-03-20T00:00:00Z")
    out = list(s.iter_between(a, a + 4 * 86400))
    assert out == list(range(a + 900, a + 4 * 86400 + 1, 900))
