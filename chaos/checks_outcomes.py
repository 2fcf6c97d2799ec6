"""Each occurrence's end against its job's spec and the run's operations, on every node.

Every skip names a reason, and the reason must be one that the job's spec and the run's
history permit; every outcome must be one its target can produce:

- unexplained_skip: `skipped` with no reason, or one the product does not give;
- skip_reason_wrong: a skip whose reason this job cannot have: `overlap` for a job whose
  overlap policy never skips (`allow`, `replace`: only `forbid` and `buffer_one` skip),
  `paused` for a job no operation of the run paused (and no read shows paused),
  `calendar:<name>` for a job that lists no such calendar. (`quota` is checked against the
  tenant's fires by chaos/checks_tenants.py, `misfire` against the misfire policy by
  chaos/checks_schedule.py, calendar instants by chaos/checks_calendar.py.)
- outcome_wrong: `succeeded` for a job whose command always exits non-zero; `failed` by
  an exit code for one whose command always exits 0 (a lease lost, timed out or never
  started may still fail it: those reasons are not exit codes); `cancelled` as `replaced`
  for a job that is not `replace`, as `job deleted` for one no operation deleted, and by a
  person for an occurrence no operation cancelled.
"""

from __future__ import annotations

import re
from typing import Any

from chaos.report_model import Report

SKIP_REASONS = ("misfire", "overlap", "paused", "quota")
CALENDAR_PREFIX = "calendar:"  # raftcron.core.calendar.SKIP_PREFIX
OVERLAP_SKIPS = ("forbid", "buffer_one")
_EXIT = re.compile(r"exit (\d+)\s*$")


def expected_exit(target: dict[str, Any] | None) -> int | None:
    """The exit status a workload target always has, None when it is not fixed. Shell
    targets end with `exit N` when they fail on purpose (chaos/workload.effect_cmd); the
    others post their effect and exit 0 (`exit $rc` of a group job is the effect's)."""
    if not target:
        return None
    shell = target.get("shell")
    if isinstance(shell, str):
        m = _EXIT.search(shell)
        if m:
            return int(m.group(1))
        return 0 if "/effect" in shell else None
    url = str((target.get("http") or {}).get("url", ""))
    return 0 if url.endswith("/effect") else None


def job_specs(ops: list[dict[str, Any]], nodes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """job -> {overlap_policy, calendars, exit}: the creates' specs, then the nodes' rows."""
    out: dict[str, dict[str, Any]] = {}

    def take(job_id: str, spec: dict[str, Any]) -> None:
        cur = out.setdefault(job_id, {"overlap_policy": "allow", "calendars": set(),
                                      "exits": set()})
        if spec.get("overlap_policy"):
            cur["overlap_policy"] = spec["overlap_policy"]
        cur["calendars"] |= set(spec.get("calendars") or [])
        if "target" in spec:
            cur["exits"].add(expected_exit(spec.get("target")))

    for op in ops:
        if op["f"] in ("create", "edit") and (op.get("done") or {}).get("type") in ("ok",
                                                                                   "info"):
            spec = op["invoke"].get("spec") or op["invoke"].get("body") or {}
            take(op["invoke"]["job"], spec)
    for node in nodes.values():
        for job in node.get("jobs") or []:
            take(job["id"], job)
    return out


def _touched(ops: list[dict[str, Any]], kinds: tuple[str, ...]) -> set[str]:
    """Job (and occurrence) ids that an operation of these kinds named, whatever its
    outcome (one without an answer may have been applied)."""
    out: set[str] = set()
    for op in ops:
        if op["f"] in kinds:
            inv = op["invoke"]
            out |= {str(inv[k]) for k in ("job", "occurrence") if inv.get(k)}
            out |= {str(j) for j in inv.get("jobs") or []}
    return out


def check_outcomes(rep: Report, nodes: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    specs = job_specs(ops, nodes)
    paused = _touched(ops, ("pause", "bulk-pause")) | {
        j["id"] for n in nodes.values() for j in n.get("jobs") or [] if j.get("paused")}
    deleted = _touched(ops, ("delete",))
    cancelled = _touched(ops, ("cancel",))
    for nid, node in sorted(nodes.items()):
        for o in node.get("occurrences", []):
            spec = specs.get(o["job_id"])
            if o["status"] == "skipped":
                _check_skip(rep, nid, o, spec, paused)
            elif spec is not None:
                _check_end(rep, nid, o, spec, deleted, cancelled)


def _check_skip(rep: Report, nid: str, o: dict[str, Any], spec: dict[str, Any] | None,
                paused: set[str]) -> None:
    reason = o.get("reason") or ""
    if reason not in SKIP_REASONS and not reason.startswith(CALENDAR_PREFIX):
        rep.add("unexplained_skip", node=nid, job=o["job_id"], occurrence=o["id"],
                reason=o.get("reason"))
        return
    if spec is None:
        return
    problem = None
    if reason == "overlap" and spec["overlap_policy"] not in OVERLAP_SKIPS:
        problem = f"overlap policy {spec['overlap_policy']} never skips"
    elif reason == "paused" and o["job_id"] not in paused:
        problem = "no operation of the run paused this job"
    elif reason.startswith(CALENDAR_PREFIX) and \
            reason[len(CALENDAR_PREFIX):] not in spec["calendars"]:
        problem = "the job lists no such calendar"
    if problem:
        rep.add("skip_reason_wrong", node=nid, job=o["job_id"], occurrence=o["id"],
                reason=reason, problem=problem)


def _check_end(rep: Report, nid: str, o: dict[str, Any], spec: dict[str, Any],
               deleted: set[str], cancelled: set[str]) -> None:
    exits = spec["exits"]
    fixed = next(iter(exits)) if len(exits) == 1 else None
    reason = o.get("reason") or ""
    problem = None
    if o["status"] == "succeeded" and fixed not in (None, 0):
        problem = f"its command always exits {fixed}"
    elif o["status"] == "failed" and fixed == 0 and reason.startswith("exit code"):
        problem = "its command always exits 0"
    elif o["status"] == "cancelled":
        if reason == "replaced":
            ok = spec["overlap_policy"] == "replace"
        elif reason == "job deleted":
            ok = o["job_id"] in deleted
        else:
            ok = o["id"] in cancelled or o["job_id"] in cancelled
        problem = None if ok else f"cancelled ({reason or 'no reason'}) though nothing " \
                                  "of the run could cancel it"
    if problem:
        rep.add("outcome_wrong", node=nid, job=o["job_id"], occurrence=o["id"],
                status=o["status"], reason=o.get("reason"), problem=problem)
