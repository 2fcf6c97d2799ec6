"""Calendar and several-schedule jobs are judged instant by instant through the whole
checker (issue 37, item 4): their skip reasons and misfire decisions like every other
job's, and a run that never showed them at work is no evidence (coverage kinds)."""

from __future__ import annotations

import copy
from typing import Any

from chaos.checks_calendar import CALENDAR, CALENDAR_JOB, MULTI_JOB, calendar_body, job_specs
from tests.chaos.test_checker import (
    END,
    T0,
    check,
    check_run,
    clean_run,
    hist_op,
    nodes_occ,
    occ,
    ts_of,
)

SPECS = {s["id"]: s for s in job_specs({"shell": "true"})}


def _occurrences(job: str, lo: int, hi: int) -> list[dict[str, Any]]:
    out = []
    for t in range(lo, hi):
        if job == CALENDAR_JOB:
            excluded = 10 <= t % 60 <= 19
            out.append({**occ(t, job=job, status="skipped" if excluded else "succeeded",
                              reason=f"calendar:{CALENDAR}" if excluded else None),
                        "schedules": None})
        elif t % 2 == 0 or t % 3 == 0:
            out.append({**occ(t, job=job), "schedules": [
                n for n, step in (("two", 2), ("three", 3)) if t % step == 0]})
    return out


def with_special_jobs(*, created: tuple[str, ...] = (CALENDAR_JOB, MULTI_JOB)
                      ) -> dict[str, Any]:
    """The clean run plus the workload's calendar job and several-schedule job, created
    before the run and claimed at every instant on every node."""
    run = clean_run()
    run["history"] += hist_op(40, "calendar", "ok", T0 - 10, calendar=CALENDAR,
                              body=calendar_body())
    for i, job in enumerate(created):
        run["history"] += hist_op(41 + i, "create", "ok", T0 - 5, job=job, spec=SPECS[job])
    extra = [o for job in created for o in _occurrences(job, T0 - 4, END + 4)]
    for node in [*run["final"]["nodes"].values(), run["departed"]["n0"]]:
        node["jobs"] += [{**SPECS[job], "version": 1} for job in created]
    for occs in nodes_occ(run):
        occs += copy.deepcopy(extra)
    cut = run["departed"]["n0"]["checked_until"]  # the removed node holds what came before
    run["departed"]["n0"]["occurrences"] += copy.deepcopy(
        [o for o in extra if ts_of(o) <= cut])
    return run


def special(run: dict[str, Any], job: str) -> list[dict[str, Any]]:
    """The job's occurrences on every node, the removed one too."""
    return [o for occs in [*nodes_occ(run), run["departed"]["n0"]["occurrences"]]
            for o in occs if o["job_id"] == job]


def test_the_special_jobs_at_work_are_valid_and_counted() -> None:
    summary = check(with_special_jobs())
    assert summary["violations"] == {}
    cov = summary["stats"]["coverage"]
    assert cov["calendars"] > 0 and cov["several_schedules"] > 0


def test_a_calendar_job_whose_every_instant_was_skipped_as_bogus_is_flagged() -> None:
    run = with_special_jobs()
    for o in special(run, CALENDAR_JOB):
        o.update(status="skipped", reason="bogus")
    v = check(run)["violations"]
    assert "unexplained_skip" in v
    assert {x["job"] for x in v["unexplained_skip"]} == {CALENDAR_JOB}


def test_a_calendar_job_that_never_fired_on_time_instants_is_flagged() -> None:
    """Every instant the calendar does not exclude was skipped as a misfire, although it
    was claimed half a second ahead (its policy is catch_up with an hour's grace)."""
    run = with_special_jobs()
    for o in special(run, CALENDAR_JOB):
        if o["status"] == "succeeded":
            o.update(status="skipped", reason="misfire")
    v = check(run)["violations"]
    assert set(v) == {"misfire_policy"}
    assert {x["job"] for x in v["misfire_policy"]} == {CALENDAR_JOB}


def test_a_union_instant_skipped_as_overlap_by_an_allow_job_is_flagged() -> None:
    run = with_special_jobs()
    for o in special(run, MULTI_JOB):
        if o["scheduled_for"] == special(run, MULTI_JOB)[4]["scheduled_for"]:
            o.update(status="skipped", reason="overlap")
    assert set(check(run)["violations"]) == {"skip_reason_wrong"}


def test_a_run_without_the_calendar_job_at_work_misses_coverage() -> None:
    kinds = ("calendars", "several_schedules", "groups")
    run = with_special_jobs(created=(MULTI_JOB,))
    missing = {x["kind"] for x in check_run(run, required_coverage=kinds)["violations"][
        "coverage_missing"]}
    assert missing == {"calendars", "groups"}
    run = with_special_jobs()
    for o in special(run, CALENDAR_JOB):
        if o["status"] == "succeeded":
            o.update(status="pending")  # claimed, never ran
    missing = {x["kind"] for x in check_run(run, required_coverage=kinds)["violations"][
        "coverage_missing"]}
    assert "calendars" in missing
