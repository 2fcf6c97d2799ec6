"""checks_calendar on synthetic runs: a clean history passes, and each violation it knows
is flagged (a lost, extra, duplicated or mislabelled instant of the union; an excluded
instant that ran, a skip the calendar does not explain, a lost instant of the calendar
job). The checks also run through check_run on the checker's own clean synthetic run."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from chaos.checker import CHECKS, _client_ops
from chaos.checks_calendar import (
    CALENDAR,
    CALENDAR_JOB,
    MULTI_JOB,
    calendar_body,
    check_calendars,
    job_specs,
)
from chaos.checks_calendar import (
    CHECKS as CALENDAR_CHECKS,
)
from chaos.report_model import Report
from tests.chaos.test_checker import hist_op, iso, occ

T0 = 1_793_512_680  # 2026-11-01T05:58:00Z, second 0 of a minute
END = T0 + 60
SPECS = {s["id"]: s for s in job_specs({"shell": "true"})}


def history() -> list[dict[str, Any]]:
    h = hist_op(1, "calendar", "ok", T0 - 10, calendar=CALENDAR, body=calendar_body())
    h += hist_op(2, "create", "ok", T0 - 5, job=MULTI_JOB, spec=SPECS[MULTI_JOB])
    h += hist_op(3, "create", "ok", T0 - 5, job=CALENDAR_JOB, spec=SPECS[CALENDAR_JOB])
    return h


def multi_occ(t: int) -> dict[str, Any]:
    o = occ(t, job=MULTI_JOB)
    o["schedules"] = [n for n, step in (("two", 2), ("three", 3)) if t % step == 0]
    return o


def calendar_occ(t: int) -> dict[str, Any]:
    if 10 <= t % 60 <= 19:
        return {**occ(t, job=CALENDAR_JOB, status="skipped", reason=f"calendar:{CALENDAR}"),
                "schedules": None}
    return {**occ(t, job=CALENDAR_JOB), "schedules": None}


def clean_nodes() -> dict[str, Any]:
    occs = [multi_occ(t) for t in range(T0 - 4, END + 4) if t % 2 == 0 or t % 3 == 0]
    occs += [calendar_occ(t) for t in range(T0 - 4, END + 4)]
    return {n: {"occurrences": copy.deepcopy(occs)} for n in ("n1", "n2", "n3")}


def run(nodes: dict[str, Any]) -> Report:
    rep = Report()
    check_calendars(rep, nodes, _client_ops(history()), END)
    return rep


def occurrences_of(nodes: dict[str, Any], job: str, t: int) -> list[dict[str, Any]]:
    return [o for o in nodes["n2"]["occurrences"]
            if o["job_id"] == job and o["scheduled_for"] == iso(t)]


def test_a_clean_run_reports_nothing() -> None:
    rep = run(clean_nodes())
    assert dict(rep.violations) == {}


def test_every_check_is_listed_by_the_checker() -> None:
    assert set(CALENDAR_CHECKS) <= set(CHECKS)


def drop(nodes: dict[str, Any], job: str, t: int) -> None:
    nodes["n2"]["occurrences"] = [o for o in nodes["n2"]["occurrences"]
                                  if not (o["job_id"] == job and o["scheduled_for"] == iso(t))]


def test_a_lost_instant_of_the_union_is_flagged() -> None:
    nodes = clean_nodes()
    drop(nodes, MULTI_JOB, T0 + 9)  # named by "three" only
    rep = run(nodes)
    assert [v["scheduled_for"] for v in rep.violations["union_lost"]] == [iso(T0 + 9)]
    assert rep.violations["union_lost"][0]["node"] == "n2"


def test_an_instant_outside_the_union_is_flagged() -> None:
    nodes = clean_nodes()
    nodes["n2"]["occurrences"].append(multi_occ(T0 + 7))
    assert [v["node"] for v in run(nodes).violations["union_extra"]] == ["n2"]


def test_a_shared_instant_fired_twice_is_flagged() -> None:
    nodes = clean_nodes()
    twin = {**occurrences_of(nodes, MULTI_JOB, T0 + 12)[0], "id": "other-id"}
    nodes["n2"]["occurrences"].append(twin)
    assert len(run(nodes).violations["union_duplicate"]) == 1


@pytest.mark.parametrize("recorded", [["two"], ["three", "two"], None])
def test_wrong_matched_schedules_are_flagged(recorded: list[str] | None) -> None:
    nodes = clean_nodes()
    occurrences_of(nodes, MULTI_JOB, T0 + 6)[0]["schedules"] = recorded  # both name it
    found = run(nodes).violations["union_matched"]
    assert [v["expected"] for v in found] == [["two", "three"]]


def test_an_excluded_instant_that_ran_is_flagged() -> None:
    nodes = clean_nodes()
    o = occurrences_of(nodes, CALENDAR_JOB, T0 + 15)[0]
    o.update(status="succeeded", reason=None)
    assert len(run(nodes).violations["calendar_not_skipped"]) == 1


def test_an_excluded_instant_skipped_for_another_reason_is_flagged() -> None:
    nodes = clean_nodes()
    occurrences_of(nodes, CALENDAR_JOB, T0 + 11)[0]["reason"] = "misfire"
    assert len(run(nodes).violations["calendar_not_skipped"]) == 1


def test_a_calendar_skip_the_calendar_does_not_explain_is_flagged() -> None:
    nodes = clean_nodes()
    o = occurrences_of(nodes, CALENDAR_JOB, T0 + 25)[0]
    o.update(status="skipped", reason=f"calendar:{CALENDAR}")
    assert len(run(nodes).violations["calendar_wrong_skip"]) == 1


def test_a_lost_instant_of_the_calendar_job_is_flagged_excluded_or_not() -> None:
    nodes = clean_nodes()
    drop(nodes, CALENDAR_JOB, T0 + 12)
    drop(nodes, CALENDAR_JOB, T0 + 30)
    found = run(nodes).violations["calendar_lost"]
    assert [(v["scheduled_for"], v["excluded"]) for v in found] == [
        (iso(T0 + 12), True), (iso(T0 + 30), False)]


def test_a_node_removed_mid_run_is_checked_up_to_its_cut_off_only() -> None:
    nodes = clean_nodes()
    cut = T0 + 20
    nodes["n2"]["checked_until"] = cut
    nodes["n2"]["occurrences"] = [o for o in nodes["n2"]["occurrences"]
                                  if o["scheduled_for"] <= iso(cut)]
    assert dict(run(nodes).violations) == {}
    drop(nodes, MULTI_JOB, T0 + 9)  # before the cut-off: still owed
    assert [v["scheduled_for"] for v in run(nodes).violations["union_lost"]] == [iso(T0 + 9)]
