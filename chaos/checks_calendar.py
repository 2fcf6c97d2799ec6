"""Checks of several schedules on one job and of a calendar (issue 21), on every node.

The workload has a job with two schedules that share instants (`MULTI_JOB`: every second
divisible by 2 or by 3, both at multiples of 6) and a per-second job listing a calendar
that excludes seconds 10-19 of every minute (`CALENDAR_JOB`, `CALENDAR`). Their nominal
instants come from the product's own union (core.schedule_set) and calendar
(core.calendar), built from the specs the history shows were acknowledged:

- union_lost: an instant of the union after the job's creation was acknowledged (and
  before the end margin) with no scheduled occurrence on a node;
- union_extra: an occurrence at an instant no schedule of the job names;
- union_duplicate: two scheduled occurrences of one instant (invariant 1);
- union_matched: an occurrence whose `schedules` are not the ones that name its instant;
- calendar_lost: an instant of the calendar job with no occurrence on a node;
- calendar_not_skipped: an excluded instant not recorded `skipped` / `calendar:<name>`;
- calendar_wrong_skip: an instant the calendar does not exclude recorded as skipped by it.

checks_schedule leaves these two jobs' instants to this module (it checks single
schedules and knows no calendar reasons) and checks their misfire decisions as every other
job's; chaos/checks_outcomes.py their skip reasons. `coverage` counts what the run showed
of them (required coverage kinds `calendars` and `several_schedules`: a run whose calendar
job never fired, or was never created, is no evidence).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from chaos.report_model import Report, iso, ts
from raftcron.core.calendar import CompiledCalendar, parse_calendar, skip_reason
from raftcron.core.model import parse_job
from raftcron.core.schedule_set import ScheduleSet

MULTI_JOB = "multi-sched"
CALENDAR_JOB = "calendar-1s"
CALENDAR = "chaos-quiet"
END_MARGIN_S = 2.0
CHECKS = ("union_lost", "union_extra", "union_duplicate", "union_matched", "calendar_lost",
          "calendar_not_skipped", "calendar_wrong_skip")


def calendar_body() -> dict[str, Any]:
    """Seconds 10-19 of every minute are excluded."""
    return {"timezone": "UTC", "exclude": [{"cron": "10-19 * * * * *"}]}


def job_specs(target: dict[str, Any], **fast: Any) -> list[dict[str, Any]]:
    """The two jobs, with the workload's target and retry settings. Missed instants all
    fire (catch_up, a long grace): each instant is recorded once whatever the faults."""
    every = {"misfire_policy": "catch_up", "catch_up_max": 10_000, "misfire_grace_s": 3600,
             "overlap_policy": "allow", "target": target, **fast}
    return [
        {"id": MULTI_JOB, "schedules": [{"cron": "*/2 * * * * *", "name": "two"},
                                        {"cron": "*/3 * * * * *", "name": "three"}], **every},
        {"id": CALENDAR_JOB, "schedule": {"cron": "* * * * * *"}, "calendars": [CALENDAR],
         **every},
    ]


def checked_here(spec: dict[str, Any]) -> bool:
    """Jobs with several schedules or calendars: this module checks them."""
    return bool(spec.get("schedules") or spec.get("calendars"))


def _created(ops: list[dict[str, Any]], job: str) -> tuple[dict[str, Any], float] | None:
    for op in ops:
        done = op.get("done") or {}
        if op["f"] == "create" and op["invoke"].get("job") == job and done.get("type") == "ok":
            return op["invoke"]["spec"], done["cluster_wall"]
    return None


def _calendar(ops: list[dict[str, Any]]) -> CompiledCalendar | None:
    for op in ops:
        inv, done = op["invoke"], op.get("done") or {}
        if op["f"] == "calendar" and inv.get("calendar") == CALENDAR \
                and done.get("type") == "ok":
            return parse_calendar(inv["body"], CALENDAR).compiled()
    return None


def _scheduled(node: dict[str, Any], job: str) -> dict[int, list[dict[str, Any]]]:
    by_t: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for o in node.get("occurrences", []):
        if o["job_id"] == job and o["kind"] == "scheduled":
            by_t[int(ts(o["scheduled_for"]) or 0)].append(o)
    return by_t


def _end(node: dict[str, Any], window_end: float) -> float:
    """A node removed mid-run was read complete up to its cut-off, not to the run's end."""
    return node.get("checked_until") or window_end


def _window(fires: ScheduleSet, lo: float, hi: float) -> list[int]:
    """Instants (epoch s) of the union with lo < t < hi."""
    return [t // 1000 for t in fires.iter_after(int(lo * 1000), int(hi * 1000) - 1)
            if lo < t / 1000 < hi]


def check_multi_schedule(rep: Report, nodes: dict[str, Any], ops: list[dict[str, Any]],
                         window_end: float) -> None:
    created = _created(ops, MULTI_JOB)
    if created is None:
        return
    spec, ok_at = created
    fires = parse_job(spec).fire_times()
    for nid, node in sorted(nodes.items()):
        by_t = _scheduled(node, MULTI_JOB)
        for t, occs in sorted(by_t.items()):
            if len(occs) > 1:
                rep.add("union_duplicate", node=nid, job=MULTI_JOB, scheduled_for=iso(t),
                        occurrences=[o["id"] for o in occs])
            names = fires.matched_names(t * 1000)
            if not names:
                rep.add("union_extra", node=nid, job=MULTI_JOB, occurrence=occs[0]["id"])
            elif any(o.get("schedules") != names for o in occs):
                rep.add("union_matched", node=nid, job=MULTI_JOB, occurrence=occs[0]["id"],
                        recorded=occs[0].get("schedules"), expected=names)
        for t in _window(fires, ok_at, _end(node, window_end) - END_MARGIN_S):
            if t not in by_t:
                rep.add("union_lost", node=nid, job=MULTI_JOB, scheduled_for=iso(t),
                        schedules=fires.matched_names(t * 1000))


def check_calendar(rep: Report, nodes: dict[str, Any], ops: list[dict[str, Any]],
                   window_end: float) -> None:
    created = _created(ops, CALENDAR_JOB)
    calendar = _calendar(ops)
    if created is None or calendar is None:
        return
    spec, ok_at = created
    fires = parse_job(spec).fire_times()
    reason = skip_reason(CALENDAR)
    for nid, node in sorted(nodes.items()):
        by_t = _scheduled(node, CALENDAR_JOB)
        for t, occs in sorted(by_t.items()):
            o = occs[0]
            skipped_by_it = o["status"] == "skipped" and o["reason"] == reason
            if calendar.excludes(t * 1000) and not skipped_by_it:
                rep.add("calendar_not_skipped", node=nid, job=CALENDAR_JOB,
                        occurrence=o["id"], status=o["status"], reason=o["reason"])
            elif not calendar.excludes(t * 1000) and (o["reason"] or "").startswith(
                    "calendar:"):
                rep.add("calendar_wrong_skip", node=nid, job=CALENDAR_JOB,
                        occurrence=o["id"], reason=o["reason"])
        for t in _window(fires, ok_at, _end(node, window_end) - END_MARGIN_S):
            if t not in by_t:
                rep.add("calendar_lost", node=nid, job=CALENDAR_JOB, scheduled_for=iso(t),
                        excluded=calendar.excludes(t * 1000))


def check_calendars(rep: Report, nodes: dict[str, Any], ops: list[dict[str, Any]],
                    window_end: float) -> None:
    check_multi_schedule(rep, nodes, ops, window_end)
    check_calendar(rep, nodes, ops, window_end)


def coverage(nodes: dict[str, Any]) -> dict[str, int]:
    """On the node that shows the most: `calendars`, the calendar job's instants that ran
    and that its calendar skipped, whichever are fewer; `several_schedules`, the union
    job's runs that both schedules named."""
    reason = skip_reason(CALENDAR)
    cal = multi = 0
    for node in nodes.values():
        ran = skipped = both = 0
        for o in node.get("occurrences", []):
            if o["kind"] != "scheduled":
                continue
            if o["job_id"] == CALENDAR_JOB:
                ran += o["status"] not in ("skipped", "pending", "pruned")
                skipped += o["status"] == "skipped" and o["reason"] == reason
            elif o["job_id"] == MULTI_JOB and o["status"] not in ("skipped", "pruned"):
                both += len(o.get("schedules") or []) > 1
        cal, multi = max(cal, min(ran, skipped)), max(multi, both)
    return {"calendars": cal, "several_schedules": multi}
