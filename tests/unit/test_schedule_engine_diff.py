"""The croniter-based engine against the hand-written one it replaced: behaviour did not move.

``tests/unit/schedule_v1.py`` loads the engine as it was before croniter parsed the
fields, byte for byte, from the frozen level-1 build (tests/fixtures/level1; its git blob
id is pinned below, so an edit to the reference fails here first). Every comparison is
of the whole observable outcome: for a valid expression the expanded fields, the derived
policies and the fire instants; for an invalid one the error's field and message, word
for word.
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftcron.core import schedule as new
from tests.unit import schedule_v1 as old

# `git rev-parse 5da59e1:raftcron/core/schedule.py`: the engine before this change.
OLD_ENGINE_BLOB = "b0801a917915a3cc1349aff376cf6b30bd96693e"


def z(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


def outcome(engine: Any, cron: str, tz: str = "UTC", gap: str = "auto", fold: str = "auto",
            hash_key: str = "job-1") -> tuple[Any, ...]:
    """Everything a caller can observe of compiling ``cron`` with one engine."""
    try:
        s = engine.compile_schedule(cron, tz, gap, fold, hash_key=hash_key)
    except engine.ScheduleError as e:
        return ("error", e.field, e.message)
    return ("ok", dataclasses.astuple(s._fields), s.has_seconds, s.is_fixed_time, s.dst_gap,
            s.dst_fold, s.describe())


def first_fires(engine: Any, cron: str, tz: str, after: int, n: int, gap: str = "auto",
                fold: str = "auto", hash_key: str = "job-1") -> list[int | None]:
    s = engine.compile_schedule(cron, tz, gap, fold, hash_key=hash_key)
    out: list[int | None] = []
    t: int | None = after
    while len(out) < n and t is not None:
        t = s.next_after(t)
        out.append(t)
    return out


def test_the_reference_is_the_old_engine_unchanged() -> None:
    raw = Path(old.__file__).read_bytes()
    blob = hashlib.sha1(b"blob %d\0" % len(raw) + raw).hexdigest()
    assert blob == OLD_ENGINE_BLOB


# ------------------------------------------------------------------ every item of small fields

def _items(values: list[str], steps: list[int]) -> list[str]:
    """Every single-item shape cron knows, over the given values and steps."""
    out = ["*", "?", *(f"*/{n}" for n in steps), *(f"?/{n}" for n in steps)]
    for a in values:
        out.append(a)
        out += [f"{a}/{n}" for n in steps]
        for b in values:
            out.append(f"{a}-{b}")
            out += [f"{a}-{b}/{n}" for n in steps]
    return out


DOW_ITEMS = _items([str(v) for v in range(9)] + ["SUN", "mon", "Fri", "SAT"], list(range(10)))
MONTH_ITEMS = _items([str(v) for v in range(14)] + ["JAN", "jun", "Dec"], [0, 1, 2, 3, 5, 11,
                                                                           12, 13])


def test_every_day_of_week_item_expands_as_before() -> None:
    for item in DOW_ITEMS:
        for cron in (f"0 0 * * {item}", f"0 0 1 * {item}", f"0 0 * * 1,{item}"):
            assert outcome(new, cron) == outcome(old, cron), cron


def test_every_month_item_expands_as_before() -> None:
    for item in MONTH_ITEMS:
        cron = f"0 0 1 {item} *"
        assert outcome(new, cron) == outcome(old, cron), cron


@pytest.mark.parametrize("field", range(6))
def test_every_bound_and_step_of_a_wide_field_expands_as_before(field: int) -> None:
    """All a-b/n, a/n and */n near the edges of each field (0-60 and 1-32 wide)."""
    hi = {0: 59, 1: 59, 2: 23, 3: 31, 4: 12, 5: 7}[field]
    edges = sorted({0, 1, 2, hi - 2, hi - 1, hi, hi + 1, hi // 2})
    steps = sorted({0, 1, 2, 7, hi // 2, hi - 1, hi, hi + 1, hi + 2, 99, 100, 999})
    for item in _items([str(v) for v in edges], steps):
        parts = ["0", "0", "0", "*", "*", "*"]
        parts[field] = item
        cron = " ".join(parts)
        assert outcome(new, cron) == outcome(old, cron), cron


# ------------------------------------------------------------------ random whole expressions
# Two kinds of draws: `rough` ones (values and steps past the bounds, junk items: mostly
# errors, compared message for message) and `fair` ones (in bounds: mostly valid, compared
# fire for fire).

def _number(lo: int, hi: int, rough: bool) -> st.SearchStrategy[str]:
    if not rough:
        return st.integers(lo, hi).map(str)
    return st.integers(lo - 2, hi + 3).map(str) | st.sampled_from(["00", "007", "0005", "٣"])


def _step(span: int, rough: bool) -> st.SearchStrategy[str]:
    if not rough:
        return st.integers(1, span).map(str)
    return st.integers(0, span + 3).map(str) | st.sampled_from(["999", "٣"])


def _plain(lo: int, hi: int, names: list[str], rough: bool) -> st.SearchStrategy[str]:
    value = _number(lo, hi, rough)
    if names:
        value = value | st.sampled_from(names if rough else names[:-1])
    step = _step(hi - lo + 1, rough)
    star_span = 7 if hi == 7 else hi - lo + 1  # '*' in day-of-week is 0-6
    return st.one_of(
        st.just("*"),
        st.builds(lambda n: f"*/{n}", _step(star_span, rough)),
        value,
        st.tuples(value, step).map("/".join),
        st.tuples(value, value).map(lambda t: "-".join(sorted(t, key=_order)) if not rough
                                    else "-".join(t)),
        st.tuples(value, value, step).map(
            lambda t: f"{'-'.join(sorted(t[:2], key=_order) if not rough else t[:2])}/{t[2]}"),
    )


def _order(value: str) -> int:
    names = {n: i for i, n in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
    names.update({n: i + 1 for i, n in enumerate(["JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                                  "JUL", "AUG", "SEP", "OCT", "NOV",
                                                  "DEC"])})
    return int(value) if value.isdigit() else names.get(value.upper(), 99)


def _hashed(lo: int, hi: int, rough: bool) -> st.SearchStrategy[str]:
    step = _step(hi - lo + 1, rough)
    pair = st.tuples(_number(lo, hi, rough), _number(lo, hi, rough))
    if not rough:
        pair = pair.map(lambda t: tuple(sorted(t, key=int)))
    rng = pair.map(lambda t: f"H({t[0]}-{t[1]})")
    return st.one_of(st.just("H"), st.just("h") if rough else st.just("H"),
                     st.builds(lambda s: f"H/{s}", step), rng,
                     st.tuples(rng, step).map("/".join))


def _special_dom(rough: bool) -> st.SearchStrategy[str]:
    n = _number(1, 31, rough)
    offset = _number(0, 30, rough)
    return st.one_of(st.sampled_from(["L", "l", "LW", "lw"]), offset.map(lambda v: f"L-{v}"),
                     n.map(lambda v: f"{v}W"), n.map(lambda v: f"{v}w"))


def _special_dow(rough: bool) -> st.SearchStrategy[str]:
    day = _number(0, 7, rough) | st.sampled_from(["FRI", "sun", "MON"])
    k = st.integers(-1, 7) if rough else st.integers(1, 5)
    return st.one_of(day.map(lambda v: f"{v}L"), st.tuples(day, k.map(str)).map("#".join))


FIELD_SPECS = [(0, 59, []), (0, 59, []), (0, 23, []), (1, 31, []),
               (1, 12, ["JAN", "feb", "Dec", "FOO"]), (0, 7, ["SUN", "mon", "SAT", "MONDAY"])]


def _field(index: int, rough: bool) -> st.SearchStrategy[str]:
    lo, hi, names = FIELD_SPECS[index]
    item = _plain(lo, hi, names, rough) | _hashed(lo, hi, rough)
    if index == 3:
        item = item | _special_dom(rough) | st.just("?")
    if index == 5:
        item = item | _special_dow(rough) | st.just("?")
    if rough:
        item = item | st.sampled_from(["", "-", "x", "1.5", "*/", "**", "L-", "#", "1,", "H(",
                                       "０", "?"])
    return st.lists(item, min_size=1, max_size=3).map(",".join)


FIELDS = {rough: [_field(i, rough) for i in range(6)] for rough in (False, True)}


@st.composite
def expressions(draw: st.DrawFn, rough: bool) -> str:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.sampled_from(["@yearly", "@Monthly", "@weekly", "@daily", "@midnight",
                                     "@hourly", "@annually", "@reboot", "@every 5m", "",
                                     "   ", "* * * *", "* * * * * * *", "x" * 300]))
    fields = [draw(f) for f in FIELDS[rough]]
    if kind <= 5:
        fields = fields[1:]  # five fields, seconds implied
    sep = draw(st.sampled_from([" ", "  ", "\t", " \u00a0"]))
    return sep.join(fields)


@settings(max_examples=600, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cron=expressions(rough=True), hash_key=st.sampled_from(["job-1", "", "ä-job"]))
def test_random_rough_expressions_are_accepted_or_refused_as_before(cron: str,
                                                                     hash_key: str) -> None:
    assert outcome(new, cron, hash_key=hash_key) == outcome(old, cron, hash_key=hash_key)


ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe",
         "Australia/Sydney", "America/Santiago", "Asia/Tehran", "Pacific/Chatham",
         "Etc/GMT-5"]
# Near DST transitions of the zones above (2026), and two far instants.
STARTS = [z(t) for t in ("2026-03-07T12:00:00Z", "2026-03-28T12:00:00Z",
                         "2026-04-04T06:00:00Z", "2026-09-05T12:00:00Z",
                         "2026-09-26T06:00:00Z", "2026-10-03T06:00:00Z",
                         "2026-10-24T12:00:00Z", "2026-10-31T12:00:00Z",
                         "2099-12-31T12:00:00Z", "8999-06-01T00:00:00Z")]


@settings(max_examples=300, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cron=expressions(rough=False), tz=st.sampled_from(ZONES),
       gap=st.sampled_from(["auto", "shift", "skip"]),
       fold=st.sampled_from(["auto", "once", "both"]),
       hash_key=st.sampled_from(["job-1", "invoices", "", "ä-job"]),
       start=st.sampled_from(STARTS), offset=st.integers(-86_400, 86_400))
def test_random_fair_expressions_compile_and_fire_as_before(cron: str, tz: str, gap: str,
                                                        fold: str, hash_key: str,
                                                        start: int, offset: int) -> None:
    got = outcome(new, cron, tz, gap, fold, hash_key)
    assert got == outcome(old, cron, tz, gap, fold, hash_key)
    if got[0] == "ok":
        after = start + offset
        assert first_fires(new, cron, tz, after, 40, gap, fold, hash_key) == first_fires(
            old, cron, tz, after, 40, gap, fold, hash_key)


# ------------------------------------------------------------------ extremes

@pytest.mark.parametrize("cron", [
    "", " ", "\n", "x" * 200_000, "0 " * 100_000, "*/" + "9" * 5000 + " * * * *",
    "*/999 * * * *", "*/4294967296 * * * *", "0 0 30 2 *", "0 0 31 2,4 *", "0 0 L-30 2 *",
    "０ ０ * * *", "0 0 * * ٣", "*/٣ * * * *", "0 0 * * MON\u200b", "💥 * * * *",
    "\ud800 * * * *", "0\u00a00 * * *", "0 0 1W,L,LW,L-3 * 5L,FRI#2,1",
])
def test_extreme_inputs_behave_as_before(cron: str) -> None:
    got = outcome(new, cron)
    assert got == outcome(old, cron)
    if got[0] == "error":
        _, field, message = got
        assert field == "schedule.cron"
        assert "\n" not in message and "Traceback" not in message and len(message) < 300


def test_near_year_9999_nothing_fires_and_nothing_breaks() -> None:
    for cron in ("* * * * * *", "0 0 29 2 *", "0 0 L * 5L"):
        for tz in ("UTC", "Europe/Berlin"):
            for after in (z("8999-12-31T23:59:59Z"), z("9998-01-01T00:00:00Z"),
                          z("9999-12-31T23:59:00Z")):
                assert first_fires(new, cron, tz, after, 3) == first_fires(
                    old, cron, tz, after, 3)
    s = new.compile_schedule("0 0 1 1 *")
    assert s.next_after(z("9999-12-31T23:59:00Z")) is None
    assert s.next_after(z("8998-06-01T00:00:00Z")) == z("8999-01-01T00:00:00Z")


def test_h_values_did_not_move_for_a_fleet() -> None:
    t = z("2026-03-28T00:00:00Z")
    for i in range(300):
        for cron in ("H H * * *", "H/15 * * * *", "H(0-29)/10 H(1-5) H * *", "H H * * H",
                     "H H H H *", "H * * * * *"):
            key = f"job-{i}"
            assert first_fires(new, cron, "Europe/Berlin", t, 3, hash_key=key) == first_fires(
                old, cron, "Europe/Berlin", t, 3, hash_key=key)
