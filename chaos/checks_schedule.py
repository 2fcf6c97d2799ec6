"""Checks of scheduled occurrences against the schedules, on every node.

Nominal instants come from raftcron.core.schedule, compiled from the job version that
was in force (creates and acknowledged edits in the history, the final job reads):

- lost_instant: an instant with no occurrence on a node (up to the job's deletion, for a
  job deleted mid-run). Across an edit the checker knows
  the versions on both sides (from the occurrences' `job_version`) and the edit's commit
  window (sent .. acknowledged): instants the live ticker claimed before the edit was sent
  belong to the old version, instants after its acknowledgement plus the claim lookahead to
  the new one, and between them the boundary may fall anywhere that leaves no instant of
  either version out. So both sides of every edit are checked, with no blind window;
- unscheduled_instant: an occurrence at an instant its own job version does not have;
- version_order: a later instant claimed under an older job version than an earlier one;
- version_unknown: an occurrence names a job version whose schedule the run cannot know;
- stuck_occurrence: `pending` or `running` at the final read, with no activity for longer
  than the job's heartbeat timeout plus a grace (on a node removed mid-run: at its
  cut-off, unless the members' reads at the end show it finished);
- misfire_policy: misfire decisions against `skip`, `run_once` and `catch_up` (runs of
  consecutive missed instants after an outage: `run_once` fires only the latest,
  `catch_up` the latest `catch_up_max`, `skip` none). Skip reasons and outcomes against
  the job's spec: chaos/checks_outcomes.py.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections import defaultdict
from typing import Any

from chaos.checks_calendar import checked_here
from chaos.report_model import Report, iso, ts
from raftcron.core.model import Job
from raftcron.core.schedule import compile_schedule

# How far past an edit's acknowledgement the old version may still own instants: the
# ticker claims up to its lookahead (raftcron.leader.planner.LOOKAHEAD_MS = 1 s) ahead,
# and the clock guard lets a leader's clock be off by up to 0.5 s.
EDIT_SLACK_S = 1.5
LOOKAHEAD_S = 1.0
# Instants this close to the final read may not be claimed yet (lookahead 1 s + 1 s).
END_MARGIN_S = 2.0
STUCK_GRACE_S = 10.0
# A job created without these fields gets the product's defaults (the checker once assumed
# `skip` while jobs default to `run_once`, and flagged every correct late run as a
# violation).
_JOB_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Job)}
DEFAULTS = {name: _JOB_DEFAULTS[name] for name in (
    "misfire_policy", "misfire_grace_s", "catch_up_max", "heartbeat_timeout_s",
    "retry_backoff_s")}


def job_versions(ops: list[dict[str, Any]], nodes: dict[str, Any]) -> dict[str, dict[int, Any]]:
    """job -> version -> {cron, tz, gap, fold, invoke, ok}: creates and acknowledged edits
    (with the time the edit was sent and acknowledged), edits whose answer was lost (the
    version they would have made, from If-Match, with their body), consistent reads (the
    version existed by the read's answer), then the final job rows."""
    out: dict[str, dict[int, Any]] = defaultdict(dict)
    for op in ops:
        inv, done = op["invoke"], op.get("done")
        if not done or done["type"] != "ok":
            continue
        resp = done.get("response") or {}
        if op["f"] == "create":
            if checked_here(inv["spec"]) or inv["spec"].get("after"):
                continue  # several schedules or calendars: chaos/checks_calendar.py; a
                # chained job owes no instant (chaos/checks_chains.py)
            s = inv["spec"]["schedule"]
            out[inv["job"]][1] = {"cron": s["cron"], "tz": s.get("timezone", "UTC"),
                                  "gap": s.get("dst_gap", "auto"),
                                  "fold": s.get("dst_fold", "auto"),
                                  "invoke": inv["cluster_wall"], "ok": done["cluster_wall"]}
        elif op["f"] == "edit" and resp.get("version"):
            s = inv["body"]["schedule"]
            prev = out[inv["job"]].get(resp["version"], {})
            out[inv["job"]][resp["version"]] = {
                "cron": s["cron"], "tz": s.get("timezone", "UTC"),
                "gap": s.get("dst_gap", "auto"), "fold": s.get("dst_fold", "auto"),
                "invoke": min(prev.get("invoke", 1e18), inv["cluster_wall"]),
                "ok": min(prev.get("ok", 1e18), done["cluster_wall"])}
    for op in ops:  # an edit whose answer was lost: the version it would make, its body
        inv, done = op["invoke"], op.get("done") or {}
        v = (inv.get("expected_version") or 0) + 1
        if op["f"] != "edit" or v < 2 or done.get("type") == "ok":
            continue
        s = inv["body"]["schedule"]
        cur = out[inv["job"]].get(v)
        if cur is None:
            out[inv["job"]][v] = {"cron": s["cron"], "tz": s.get("timezone", "UTC"),
                                  "gap": s.get("dst_gap", "auto"),
                                  "fold": s.get("dst_fold", "auto"),
                                  "invoke": inv["cluster_wall"], "ok": None, "unsure": True}
        elif cur.get("unsure") and cur["cron"] != s["cron"]:
            cur["conflict"] = True
        elif not cur.get("unsure") and cur["cron"] == s["cron"]:
            # A try that timed out may be the one that committed this version (the same
            # If-Match, the same schedule): the edit was in flight from its first send.
            # A real run (seed 101) committed a timed-out try 0.8 s before the retry that
            # was acknowledged was sent, and the next instant of the old schedule was
            # rightly not claimed.
            cur["invoke"] = min(cur.get("invoke") or 1e18, inv["cluster_wall"])
    for op in ops:  # a consistent read saw version v (and its cron) by its answer
        inv, done = op["invoke"], op.get("done") or {}
        resp = done.get("response") or {}
        v = resp.get("version")
        if op["f"] != "read" or done.get("type") != "ok" or not v or not resp.get("cron"):
            continue
        cur = out[inv["job"]].get(v)
        if cur is None or cur.get("unsure"):
            out[inv["job"]][v] = {"cron": resp["cron"], "tz": (cur or {}).get("tz", "UTC"),
                                  "gap": "auto", "fold": "auto",
                                  "invoke": (cur or {}).get("invoke"),
                                  "ok": done["cluster_wall"]}
        elif cur.get("ok") is None or done["cluster_wall"] < cur["ok"]:
            cur["ok"] = min(cur.get("ok") or 1e18, done["cluster_wall"])
    for job_versions_ in out.values():  # two lost edits that disagree: unknown after all
        for v in [v for v, spec in job_versions_.items() if spec.get("conflict")]:
            del job_versions_[v]
    for node in nodes.values():
        for job in node.get("jobs", []):
            v = job["version"]
            if checked_here(job) or job.get("after"):
                continue
            if v not in out[job["id"]]:
                s = job["schedule"]
                out[job["id"]][v] = {"cron": s["cron"], "tz": s["timezone"],
                                     "gap": s["dst_gap"], "fold": s["dst_fold"],
                                     "invoke": None, "ok": None}
    return out


def job_policies(ops: list[dict[str, Any]], nodes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for op in ops:
        if op["f"] == "create" and (op.get("done") or {}).get("type") == "ok":
            out[op["invoke"]["job"]] = {**DEFAULTS, **{k: v for k, v in (
                op["invoke"].get("spec") or {}).items() if k in DEFAULTS}}
    # What a node committed is complete (defaults filled in): it wins over the request.
    for node in nodes.values():
        for job in node.get("jobs", []):
            out[job["id"]] = {**out.get(job["id"], DEFAULTS),
                              **{k: job[k] for k in DEFAULTS if k in job}}
    return out


def _sched(job: str, spec: dict[str, Any]) -> Any:
    return compile_schedule(spec["cron"], spec["tz"], spec["gap"], spec["fold"], hash_key=job)


def instants(job: str, spec: dict[str, Any], lo: float, hi: float) -> list[int]:
    """Nominal instants t (epoch s) with lo < t < hi."""
    if hi <= lo:
        return []
    return [t for t in _sched(job, spec).iter_between(int(lo) - 1, int(hi) + 1) if lo < t < hi]


def is_instant(job: str, spec: dict[str, Any], t: float) -> bool:
    return float(t).is_integer() and _sched(job, spec).next_after(int(t) - 1) == int(t)


def check_schedules(rep: Report, nodes: dict[str, Any], ops: list[dict[str, Any]],
                    window_end: float, attempts: dict[str, Any]) -> None:
    versions = job_versions(ops, nodes)
    policies = job_policies(ops, nodes)
    special = {op["invoke"]["job"] for op in ops if op["f"] == "create"
               and (op.get("done") or {}).get("type") == "ok"
               and checked_here(op["invoke"].get("spec") or {})}
    finished_at_end = _finished_at_end(nodes)
    # A job deleted mid-run owes no instant after its deletion was first asked for.
    deleted: dict[str, float] = {}
    for op in ops:
        if op["f"] == "delete" and op["invoke"].get("job"):
            job = op["invoke"]["job"]
            deleted[job] = min(deleted.get(job, op["invoke"]["cluster_wall"]),
                               op["invoke"]["cluster_wall"])
    for nid, node in sorted(nodes.items()):
        # A node removed mid-run was read complete up to its cut-off, not to the run's end.
        end = node.get("checked_until") or window_end
        by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
        claims = sorted(ts(o["created_at"]) or 0.0 for o in node.get("occurrences", [])
                        if o["kind"] == "scheduled")
        for o in node.get("occurrences", []):
            if o["kind"] == "scheduled":
                by_job[o["job_id"]].append(o)
        for job, vs in versions.items():
            occs = sorted(by_job.get(job, []), key=lambda o: o["scheduled_for"])
            if not _versions_known(rep, nid, job, occs, vs):
                continue
            _check_lost(rep, nid, job, occs, vs, min(end, deleted.get(job, end)), claims)
            _check_policy(rep, nid, job, occs, policies.get(job, DEFAULTS))
        # Several schedules and calendars: their instants are checked by checks_calendar,
        # their misfire decisions here, like every other job's.
        for job in sorted(special):
            occs = sorted(by_job.get(job, []), key=lambda o: o["scheduled_for"])
            _check_policy(rep, nid, job, occs, policies.get(job, DEFAULTS))
        _check_stuck(rep, nid, node, policies, end, attempts.get(nid) or {},
                     finished_at_end if node.get("checked_until") else set())


def _versions_known(rep: Report, nid: str, job: str, occs: list[dict[str, Any]],
                    vs: dict[int, Any]) -> bool:
    ok = True
    last_v = 0
    for o in occs:
        v = o["job_version"]
        if v not in vs:
            rep.add("version_unknown", node=nid, job=job, occurrence=o["id"], version=v)
            ok = False
            continue
        if not is_instant(job, vs[v], ts(o["scheduled_for"]) or 0):
            rep.add("unscheduled_instant", node=nid, job=job, occurrence=o["id"], version=v,
                    cron=vs[v]["cron"])
        if v < last_v:
            rep.add("version_order", node=nid, job=job, occurrence=o["id"], version=v,
                    after_version=last_v)
        last_v = max(last_v, v)
    return ok


def _check_lost(rep: Report, nid: str, job: str, occs: list[dict[str, Any]],
                vs: dict[int, Any], window_end: float, claims: list[float]) -> None:
    first = vs.get(1)
    if first is None or first.get("ok") is None:
        rep.add("version_unknown", node=nid, job=job, version=1,
                problem="the job's creation was not acknowledged in the history")
        return
    lo, hi = first["ok"], window_end - END_MARGIN_S
    points = [(ts(o["scheduled_for"]) or 0.0, o["job_version"]) for o in occs]
    inside = [p for p in points if lo < p[0] < hi]
    after = [p for p in points if p[0] >= hi]
    last_v = after[0][1] if after else (inside[-1][1] if inside else max(vs))
    seq = [(lo, 1)] + inside + [(hi, last_v)]
    for (a, va), (b, vb) in zip(seq, seq[1:], strict=False):
        for t, v in _missing_between(job, vs, a, va, b, vb, claims):
            rep.add("lost_instant", node=nid, job=job, scheduled_for=iso(t), version=v,
                    between=[iso(a), iso(b)])


def _missing_between(job: str, vs: dict[int, Any], a: float, va: int, b: float,
                     vb: int, claims: list[float]) -> list[tuple[int, int]]:
    """Instants that must lie in (a, b), where nothing was claimed, a was claimed under va
    and b under vb. Versions va..vb each own one contiguous range, in order; each range is
    pushed as far right as it can go without holding an instant of its version, and never
    past the acknowledgement of a later version's edit (plus the claim slack). Whatever the
    last version then still has before b is missing. On the old side, an instant is owed to
    the old version when the node committed some claim (of any job) between its lookahead
    and the moment the next edit was sent: the ticker was live and the edit did not exist
    yet. Without such a claim (an outage) the backlog may be claimed under the new version,
    and the old side is then held to the new version's instants."""
    missing: list[tuple[int, int]] = []
    boundary = a
    for v in range(va, vb + 1):
        if v not in vs:
            continue  # an edit whose outcome was never seen: it owns nothing here
        if v == vb:
            missing += [(t, v) for t in instants(job, vs[v], boundary, b)]
            break
        sent = _next_edit_sent(vs, v)
        if sent is not None:
            # Instants the live ticker claimed before the next edit was even sent belong to
            # this version: a claim at c covers every instant up to c + the lookahead.
            owed = [t for t in instants(job, vs[v], boundary, b)
                    if _claimed_between(claims, t - LOOKAHEAD_S, sent)]
            missing += [(t, v) for t in owed]
            boundary = max([boundary, *owed])
        nxt = next((t for t in instants(job, vs[v], boundary, b + 1)), None)
        cap = _edit_acked(vs, v)
        end = min(b, b if nxt is None else nxt - 0.5, b if cap is None else cap)
        boundary = max(boundary, end)
    return missing


def _next_edit_sent(vs: dict[int, Any], v: int) -> float | None:
    sent = [s["invoke"] for w, s in vs.items() if w > v and s.get("invoke") is not None]
    return min(sent) if sent else None


def _claimed_between(claims: list[float], lo: float, hi: float) -> bool:
    """Did this node commit any claim (of any job) at a time in [lo, hi)?"""
    i = bisect.bisect_left(claims, lo)
    return i < len(claims) and claims[i] < hi


def _edit_acked(vs: dict[int, Any], v: int) -> float | None:
    """The time by which version v was certainly superseded: the first acknowledgement of
    any later version's edit, plus the claim slack."""
    oks = [s["ok"] for w, s in vs.items() if w > v and s.get("ok") is not None]
    return min(oks) + EDIT_SLACK_S if oks else None


def _check_policy(rep: Report, nid: str, job: str, occs: list[dict[str, Any]],
                  pol: dict[str, Any]) -> None:
    grace = float(pol["misfire_grace_s"])
    policy = pol["misfire_policy"]
    keep = {"skip": 0, "run_once": 1, "catch_up": int(pol["catch_up_max"])}.get(policy, 0)
    run: list[tuple[dict[str, Any], float]] = []

    def close_run() -> None:
        fire = {o["id"] for o, _ in run[max(0, len(run) - keep):]} if keep else set()
        for o, late in run:
            skipped = o["status"] == "skipped" and o["reason"] == "misfire"
            if o["id"] in fire and skipped:
                rep.add("misfire_policy", node=nid, job=job, occurrence=o["id"],
                        late_s=round(late, 3), policy=policy, missed_in_a_row=len(run),
                        problem=f"{policy} fires this missed instant, it was skipped")
            elif o["id"] not in fire and not skipped and o["reason"] is None:
                rep.add("misfire_policy", node=nid, job=job, occurrence=o["id"],
                        late_s=round(late, 3), policy=policy, missed_in_a_row=len(run),
                        problem=f"{policy} skips this missed instant, it fired")
        run.clear()

    for o in occs:
        late = (ts(o["created_at"]) or 0) - (ts(o["scheduled_for"]) or 0)
        if late > grace + 0.001:
            run.append((o, late))
            continue
        if late <= grace - 0.001 and o["reason"] == "misfire":
            rep.add("misfire_policy", node=nid, job=job, occurrence=o["id"],
                    late_s=round(late, 3), grace_s=grace, policy=policy,
                    problem="skipped as a misfire but claimed within grace")
        close_run()
    close_run()


def _finished_at_end(nodes: dict[str, Any]) -> set[str]:
    """Occurrences some member read at the end of the run shows no longer pending or
    running (finished, skipped, or pruned by retention, which prunes only finished rows)."""
    return {o["id"] for node in nodes.values() if not node.get("checked_until")
            for o in node.get("occurrences", []) if o["status"] not in ("pending", "running")}


def _check_stuck(rep: Report, nid: str, node: dict[str, Any], policies: dict[str, Any],
                 window_end: float, attempts: dict[str, Any],
                 resolved_later: set[str]) -> None:
    """`resolved_later`, for a node removed mid-run: occurrences the members at the end
    show finished. One pending at the removed node's cut-off was in progress then (a real
    run: a quota tenant's backlog, queued behind its concurrency cap, 31.4 s at the cut-off
    against a limit of 31 s), not left stuck; one not finished by the end is judged on the
    members' reads with the whole run's window, and one absent there is judged here."""
    for o in node.get("occurrences", []):
        if o["status"] not in ("pending", "running") or o["id"] in resolved_later:
            continue
        pol = policies.get(o["job_id"], DEFAULTS)
        marks = [ts(o["scheduled_for"]), ts(o["created_at"])]
        marks.append(ts(o.get("dispatch_at")))
        for a in attempts.get(o["id"]) or []:
            marks += [ts(a.get(k)) for k in ("leased_at", "not_before", "heartbeat_at",
                                              "finished_at")]
        last = max(m for m in marks if m is not None)
        limit = float(pol["heartbeat_timeout_s"]) + float(pol["retry_backoff_s"]) \
            + STUCK_GRACE_S
        if window_end - last > limit:
            rep.add("stuck_occurrence", node=nid, occurrence=o["id"], status=o["status"],
                    idle_s=round(window_end - last, 3), limit_s=limit)
