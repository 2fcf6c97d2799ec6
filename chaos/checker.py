"""Offline checker: reads a run directory (history.jsonl, final.json, sink.jsonl,
proxy.jsonl, meta.json) and writes summary.json, report.md and timeline.png.

It fails closed: a run is VALID only when every check in CHECKS ran on the evidence it
needs and found nothing. Missing or corrupt files, incomplete final reads, faults that did
not start, stop or run, digests not compared at one index, and failure kinds without
evidence are violations of their own (chaos/checks_inputs.py). The checks on effects are in
chaos/checks_effects.py, those on schedules in chaos/checks_schedule.py; this module adds
the structural ones (duplicate rows, which SQLite's unique indexes already exclude, kept as
a cheap cross-check), rerun after success, DST folds and acknowledged writes.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chaos import (
    checks_backup,
    checks_calendar,
    checks_chains,
    checks_effects,
    checks_groups,
    checks_inputs,
    checks_lateness,
    checks_marks,
    checks_membership,
    checks_observed,
    checks_outcomes,
    checks_retention,
    checks_run_times,
    checks_schedule,
    checks_tenants,
)
from chaos.report_model import Report, iso, ts

EDGE_MARGIN_S = 4.0  # DST check: instants this close to the job's creation are not required
LEADER_LOSS = ("kill-leader", "pause-leader", "partition-leader", "renewal-delay",
               "rolling-deploy", "kill-two", "pause-two", "clock-bump-leader")
NY_FOLD_START = datetime(2026, 11, 1, 5, 0, tzinfo=UTC).timestamp()
NY_FOLD_T = datetime(2026, 11, 1, 6, 0, tzinfo=UTC).timestamp()
NY_FOLD_END = datetime(2026, 11, 1, 7, 0, tzinfo=UTC).timestamp()


COVERAGE_KINDS = (
    "process_suspension", "lease_expiry", "clock_skew", "partitions", "renewal_delay",
    "rolling_deploys", "queue_redelivery", "ack_loss", "worker_crashes",
    "timeout_after_commit", "dst_transitions", "schedule_edits", "backfills",
    "manual_retries", "leader_kills", "quota_skips", "retention_prunes", "worker_clock_skew",
    "calendars", "several_schedules", "groups", "leased_ahead", "herd_leased_ahead",
    "before_start_skips", "pause_in_fault", "cancel_in_fault", "delete_in_fault",
    "membership_in_fault", "chains",
)
# A herd run leased earlier than this before its instant went by the herd path (the
# ordinary dispatch ahead leases at most the default lease_ahead_s, 2 s, early).
HERD_AHEAD_S = 2.5
# Every check, by the name its violations carry: the report lists each with its count.
CHECKS = (
    # evidence (checks_inputs)
    "meta_missing", "history_missing", "final_missing", "sink_missing", "proxy_missing",
    "corrupt_line", "final_read_missing", "final_read_incomplete", "attempts_read_missing",
    "fault_plan_missing",
    "fault_not_started", "fault_not_healed", "fault_not_run", "coverage_missing",
    "digest_not_compared", "digest_divergence",
    # effects (checks_effects)
    "double_effect", "double_execution", "stale_write", "token_order", "token_reused",
    "early_fire", "success_without_effect",
    # lateness outside fault windows (checks_lateness)
    "late_start",
    # a run's recorded start against its start record (checks_run_times)
    "start_recorded_late",
    # schedules (checks_schedule)
    "lost_instant", "unscheduled_instant", "version_order", "version_unknown",
    "stuck_occurrence", "misfire_policy",
    # skip reasons and outcomes against the job's spec (checks_outcomes)
    "unexplained_skip", "skip_reason_wrong", "outcome_wrong",
    # this module
    "duplicate_scheduled", "duplicate_manual", "duplicate_sink", "trigger_not_idempotent",
    "rerun_after_success", "dst", "lost_ack",
    # tenant quotas (checks_tenants)
    "quota_fires_exceeded", "quota_skip_unjustified", "quota_concurrency_exceeded",
    # retention (checks_retention)
    "retention_early", "retention_unfinished", "retention_unobserved", "observed_divergence",
    # digests compared at marks during the run (checks_marks)
    *checks_marks.CHECKS,
    # concurrency groups (checks_groups)
    "group_limit_exceeded", "group_unobserved",
    # chained jobs (checks_chains)
    *checks_chains.CHECKS,
    # backup -> restore (checks_backup)
    "backup_missing", "backup_failed", "backup_digest_mismatch",
    # several schedules and calendars (checks_calendar)
    *checks_calendar.CHECKS,
    # remove a follower, add a fresh node (checks_membership)
    "membership_missing", "membership_failed", "departure_read_missing", "member_set_wrong",
    "departed_digest_not_compared", "departed_digest_divergence",
)


def _jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The file's records and how many lines did not parse."""
    out, bad = [], 0
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(rec, dict):
                out.append(rec)
            else:
                bad += 1
    return out, bad


def load_run(d: Path) -> dict[str, Any]:
    """Every file of a run directory; absent or unreadable ones are named in
    `missing_files`, unparseable lines counted in `corrupt_lines` (never dropped silently)."""
    run: dict[str, Any] = {"missing_files": [], "corrupt_lines": {}}
    for name in ("meta", "final"):
        path = d / f"{name}.json"
        try:
            run[name] = json.loads(path.read_text())
        except (OSError, ValueError):
            run[name] = {}
            run["missing_files"].append(name)
    for name in ("history", "sink", "proxy"):
        path = d / f"{name}.jsonl"
        try:
            run[name], run["corrupt_lines"][name] = _jsonl(path)
        except OSError:
            run[name] = []
            run["missing_files"].append(name)
    # The observer's file: needed only by a run with retention (checks_retention fails
    # closed on a run whose meta names a retention and that has no observation).
    try:
        run["observed"], run["corrupt_lines"]["observed"] = _jsonl(d / "observed.jsonl")
    except OSError:
        run["observed"] = []
    # The removed node's read at its removal: required only by a run whose membership
    # change completed (checks_membership fails closed on its absence).
    try:
        run["departed"] = json.loads((d / "departed.json").read_text())
    except (OSError, ValueError):
        run["departed"] = {}
    return run


def check_run(run: dict[str, Any],
              required_coverage: tuple[str, ...] = COVERAGE_KINDS) -> dict[str, Any]:
    """Check a loaded run; pure (no files written). `required_coverage`: the failure kinds
    the run must show evidence of (all of them unless a test narrows it)."""
    rep = Report()
    hist = run.get("history") or []
    final = run.get("final") or {}
    meta = run.get("meta") or {}
    records = run.get("sink") or []
    sink = [s for s in records if s.get("event", "offer") == "offer"]
    ops = _client_ops(hist)

    checks_inputs.check_inputs(rep, run)
    # Required of every run: a run directory without them is no evidence, whatever its
    # meta.json says (a missing profile once made both optional).
    membership = checks_membership.check_membership(rep, run, required=True)
    # A node removed mid-run is checked like the others on its read at the removal, up to
    # its cut-off (`checked_until`).
    departed = checks_membership.departed_nodes(run)
    read_attempts = {**(final.get("attempts") or {}),
                     **{nid: node.get("attempts") or {} for nid, node in departed.items()}}
    # Every attempt of the run on every node: the final reads hold only the last retention,
    # the observations the rest (chaos/checks_observed.py).
    attempts = checks_observed.node_attempts(read_attempts, run.get("observed") or [])
    with_departed = {**run, "final": {**final, "nodes": {**(final.get("nodes") or {}),
                                                         **departed}}}
    # Occurrences that retention pruned legitimately are put back (with their observed
    # state) before any check reads the nodes; everything else absent stays absent.
    nodes, pruned = checks_retention.restore_pruned(rep, with_departed, _first_created(ops))
    checks_inputs.check_faults(rep, hist)
    checks_inputs.check_digests(rep, final, checks_inputs.expected_nodes(hist))
    marks = checks_marks.check_marks(rep, hist)
    _check_duplicates(rep, nodes, sink, ops, attempts)
    windows = _nemesis_windows(hist)
    window_end = meta.get("final_reads_cluster_wall") or max(
        (h.get("cluster_wall", 0) for h in hist), default=0)
    checks_schedule.check_schedules(rep, nodes, ops, window_end, attempts)
    checks_calendar.check_calendars(rep, nodes, ops, window_end)
    checks_outcomes.check_outcomes(rep, nodes, ops)
    dst = _check_dst(rep, nodes, ops, window_end)
    starts = [s for s in records if s.get("event") == "start"
              or (s.get("event") == "hold" and s.get("phase") == "start")]
    sink_stats = checks_effects.check_effects(rep, sink, nodes, attempts, ops, starts)
    _check_acks(rep, nodes, ops)
    quotas = checks_tenants.tenant_quotas(ops, nodes)
    quota_skips = checks_tenants.check_fire_quotas(rep, nodes, quotas)
    all_attempts = checks_effects.merged_attempts(attempts)
    running_at_end = {a["id"] for per in read_attempts.values() for lst in (per or {}).values()
                      for a in lst or [] if a.get("status") == "running"}
    effects = checks_effects.resolve_offers(
        [s for s in records if s.get("event", "offer") in ("offer", "start")], nodes,
        all_attempts)
    effect_at = {s["attempt"]: s["cluster_wall"] for s in effects
                 if s.get("attempt") and s.get("cluster_wall") is not None}
    peak = checks_tenants.check_concurrency(rep, nodes, all_attempts, quotas, windows,
                                            window_end, running_at_end, effect_at)
    groups = checks_groups.check_groups(rep, records, nodes, all_attempts, ops)
    chains = checks_chains.check_chains(rep, nodes, ops, window_end)
    # Offers and start records resolved to their attempt (an HTTP target's offer names
    # none until then), and the group holds' start records.
    run_times = checks_run_times.check_run_times(
        rep, all_attempts, [*effects, *(s for s in starts if s.get("event") == "hold")],
        windows, window_end)
    lateness = checks_lateness.check_lateness(
        rep, nodes, all_attempts, effects, ops, hist, windows, window_end,
        {t for t, q in quotas.items() if q.get("max_concurrent_runs") is not None},
        meta.get("jobs_created_cluster_wall"))
    backups = checks_backup.check_backup(rep, hist, required=True)

    stats = {
        "failover": _failover(nodes, windows),
        "fire_lag": _fire_lag(nodes, attempts, windows),
        "terms": _terms(hist, nodes),
        "sink": sink_stats,
        "client_ops": _op_counts(ops),
        "dst": dst,
        "coverage": _coverage(hist, windows, nodes, attempts, run.get("proxy") or [], ops,
                              dst),
        "occurrences": _occ_counts(nodes),
        "tenants": {"quotas": quotas, "quota_skips": quota_skips,
                    "peak_concurrent_runs": peak},
        "retention": {"retention_s": meta.get("retention_s"), "restored_pruned": pruned,
                      "observations": len(run.get("observed") or [])},
        "backups_compared": backups,
        "digest_marks": marks,
        "membership": [{k: h.get(k) for k in ("removed", "added", "members", "cutoff_index",
                                              "removed_s", "caught_up_s", "elapsed_s",
                                              "digest_mark")}
                       for h in membership],
        "groups": groups,
        "lateness": lateness,
        "starts_judged": run_times,
    }
    stats["coverage"]["quota_skips"] = quota_skips
    stats["coverage"]["retention_prunes"] = pruned
    stats["coverage"].update(checks_calendar.coverage(nodes))
    stats["coverage"]["groups"] = sum(groups["counted"].values())
    stats["coverage"]["chains"] = chains
    checks_inputs.check_coverage(rep, stats["coverage"], required_coverage)
    unknown = sorted(set(rep.violations) - set(CHECKS))
    counts = {k: len(rep.violations.get(k, [])) for k in (*CHECKS, *unknown)}
    verdict = {"valid": not any(counts.values()),
               "violations": {k: n for k, n in counts.items() if n},
               "checks": counts, "seed": meta.get("seed"), "profile": meta.get("profile"),
               "coverage_missing": [k for k in required_coverage
                                    if not stats["coverage"].get(k)]}
    return {"verdict": verdict, "violations": dict(rep.violations), "stats": stats,
            "windows": windows, "meta": meta, "notes": rep.notes}


def check_dir(d: Path) -> dict[str, Any]:
    run = load_run(d)
    summary = check_run(run)
    (d / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    from chaos.report import write_report

    write_report(d, summary, run)
    return summary


# --- helpers -------------------------------------------------------------------------------

def _client_ops(hist: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pair invoke / completion lines of client operations by op id."""
    by_op: dict[int, dict[str, Any]] = {}
    for h in hist:
        if h.get("process") != "client" or "op" not in h:
            continue
        if h["type"] == "invoke":
            by_op[h["op"]] = {"invoke": h, "f": h["f"]}
        elif h["op"] in by_op:
            by_op[h["op"]]["done"] = h
    return list(by_op.values())


def _first_created(ops: list[dict[str, Any]]) -> float | None:
    """When the first job was created (no instant before it can be owed)."""
    times = [op["done"]["cluster_wall"] for op in ops if op["f"] == "create"
             and (op.get("done") or {}).get("type") == "ok"]
    return min(times) if times else None


def _reference_node(nodes: dict[str, Any]) -> str | None:
    best = None
    for nid, node in sorted(nodes.items()):
        if node.get("occurrences_incomplete"):
            continue
        if best is None or len(node["occurrences"]) > len(nodes[best]["occurrences"]):
            best = nid
    return best


# --- checks --------------------------------------------------------------------------------

def _check_duplicates(rep: Report, nodes: dict[str, Any], sink: list[dict[str, Any]],
                      ops: list[dict[str, Any]], attempts: dict[str, Any]) -> None:
    for nid, node in nodes.items():
        sched: dict[tuple[str, str], list[str]] = defaultdict(list)
        manual: dict[tuple[str, str], list[str]] = defaultdict(list)
        for o in node.get("occurrences", []):
            if o["kind"] == "scheduled":
                sched[(o["job_id"], o["scheduled_for"])].append(o["id"])
            elif o["kind"] == "manual":
                manual[(o["job_id"], o["idempotency_key"])].append(o["id"])
        for (job, at), ids in sched.items():
            if len(ids) > 1:
                rep.add("duplicate_scheduled", node=nid, job=job, scheduled_for=at, ids=ids)
        for (job, key), ids in manual.items():
            if len(ids) > 1:
                rep.add("duplicate_manual", node=nid, job=job, key=key, ids=ids)
    kinds = {o["id"]: o["kind"] for node in nodes.values() for o in node.get("occurrences", [])}
    seen: dict[tuple[str, float], set[str]] = defaultdict(set)
    for s in sink:
        if s.get("verdict") == "reject" or not s.get("occurrence"):
            continue
        occ = s["occurrence"]
        kind = kinds.get(occ) or checks_effects.kind_from_id(occ)
        if kind == "scheduled" and s.get("scheduled_for"):
            seen[(s["job"], ts(s["scheduled_for"]) or 0)].add(occ)
    for (job, at), occs in seen.items():
        if len(occs) > 1:
            rep.add("duplicate_sink", job=job, scheduled_for=at, occurrences=sorted(occs))
    by_key: dict[tuple[str, str], set[str]] = defaultdict(set)
    for op in ops:
        done = op.get("done")
        if op["f"] == "trigger" and done and done["type"] == "ok":
            occ = (done.get("response") or {}).get("id")
            by_key[(op["invoke"]["job"], op["invoke"]["key"])].add(occ)
    for (job, key), occs in by_key.items():
        if len(occs) > 1:
            rep.add("trigger_not_idempotent", job=job, key=key, occurrences=sorted(occs))
    for nid, per_occ in attempts.items():
        for occ_id, lst in per_occ.items():
            done_at = None
            for a in sorted(lst or [], key=lambda a: a["number"]):
                if done_at is not None:
                    rep.add("rerun_after_success", node=nid, occurrence=occ_id,
                            succeeded=done_at, later_attempt=a["id"], status=a["status"])
                    break
                if a["status"] == "succeeded":
                    done_at = a["id"]


def _check_dst(rep: Report, nodes: dict[str, Any], ops: list[dict[str, Any]],
               window_end: float) -> dict[str, Any]:
    """Independent of raftcron's engine: `*/5 * 1 * * *` in New York on 2026-11-01 fires
    every 5 s in 05:00-06:00Z (01:xx EDT), and again in 06:00-07:00Z (01:xx EST) unless
    dst_fold=once."""
    ref = _reference_node(nodes)
    created = {op["invoke"]["job"]: op["done"]["cluster_wall"] for op in ops
               if op["f"] == "create" and op.get("done") and op["done"]["type"] == "ok"}
    out: dict[str, Any] = {}
    if ref is None:
        return out
    for job, second_pass in (("dst-once", False), ("dst-both", True), ("dst-auto", True)):
        if job not in created:
            continue
        got = {ts(o["scheduled_for"]) for o in nodes[ref]["occurrences"]
               if o["job_id"] == job and o["kind"] == "scheduled"}
        lo = created[job] + EDGE_MARGIN_S
        hi = min(window_end - EDGE_MARGIN_S, NY_FOLD_END)
        first = [t for t in range(int(NY_FOLD_START), int(NY_FOLD_T), 5) if lo < t < hi]
        second = [t for t in range(int(NY_FOLD_T), int(NY_FOLD_END), 5) if lo < t < hi]
        exp = first + (second if second_pass else [])
        missing = [t for t in exp if t not in got]
        unexpected = [t for t in second if t in got] if not second_pass else []
        for t in missing:
            rep.add("dst", job=job, scheduled_for=iso(t), problem="expected DST instant absent")
        for t in unexpected:
            rep.add("dst", job=job, scheduled_for=iso(t),
                    problem="fired in the second pass of the fold with dst_fold=once")
        out[job] = {"first_pass_expected": len(first), "second_pass_expected":
                    len(second) if second_pass else 0,
                    "first_pass_recorded": len([t for t in first if t in got]),
                    "second_pass_recorded": len([t for t in second if t in got]),
                    "crossed_transition": bool(second)}
    return out


def _check_acks(rep: Report, nodes: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    # A job the run deleted (or tried to: the answer may be lost) may be gone at the end.
    deleted = {op["invoke"].get("job") for op in ops if op["f"] == "delete"}
    for nid, node in nodes.items():
        if node.get("occurrences_incomplete") or not node.get("cluster"):
            rep.notes.append(f"{nid}: final read incomplete; acknowledged writes not checked")
            continue
        jobs = {j["id"]: j for j in node.get("jobs", [])}
        occ_ids = {o["id"] for o in node.get("occurrences", [])}
        until = node.get("checked_until")  # a removed node: what was acked before its cut-off
        for op in ops:
            done = op.get("done")
            if not done or done["type"] != "ok" or (until and done["cluster_wall"] > until):
                continue
            inv, resp = op["invoke"], done.get("response") or {}
            if op["f"] in ("create", "edit") and inv["job"] in deleted:
                continue
            if op["f"] == "create" and inv["job"] not in jobs:
                rep.add("lost_ack", node=nid, op="create", job=inv["job"], op_id=inv["op"])
            elif op["f"] == "edit":
                have = jobs.get(inv["job"], {}).get("version", 0)
                if have < (resp.get("version") or 0):
                    rep.add("lost_ack", node=nid, op="edit", job=inv["job"],
                            acked_version=resp.get("version"), final_version=have,
                            op_id=inv["op"])
            elif op["f"] == "trigger" and resp.get("id") and resp["id"] not in occ_ids:
                rep.add("lost_ack", node=nid, op="trigger", job=inv["job"], key=inv["key"],
                        occurrence=resp["id"], op_id=inv["op"])
            elif op["f"] == "backfill":
                missing = [i for i in resp.get("occurrence_ids") or [] if i not in occ_ids]
                if missing:
                    rep.add("lost_ack", node=nid, op="backfill", job=inv["job"],
                            key=inv["key"], missing=missing[:10], op_id=inv["op"])


# --- statistics ------------------------------------------------------------------------------

def _nemesis_windows(hist: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fault windows from the invoke (the fault begins there: rolling deploys and renewal
    delays do their work before `start` is logged) to the stop."""
    starts: dict[int, dict[str, Any]] = {}
    invoked: dict[int, float] = {}
    out = []
    for h in hist:
        if h.get("process") != "nemesis" or "op" not in h:
            continue
        if h["type"] == "invoke":
            invoked[h["op"]] = h["cluster_wall"]
        elif h["type"] == "start":
            starts[h["op"]] = h
        elif h["type"] == "stop" and h["op"] in starts:
            s = starts.pop(h["op"])
            out.append({"kind": s["f"], "op": s["op"],
                        "start": invoked.get(s["op"], s["cluster_wall"]),
                        "stop": h["cluster_wall"], "targets": s.get("targets"),
                        "leader": s.get("leader"), "epoch": s.get("epoch"),
                        "term": s.get("term"), "info": {k: s[k] for k in (
                            "offset_ms", "delta_ms", "period_s", "bridge", "drop_p", "pids")
                            if k in s}})
    for s in starts.values():
        out.append({"kind": s["f"], "op": s["op"],
                    "start": invoked.get(s["op"], s["cluster_wall"]), "stop": None,
                    "targets": s.get("targets"), "leader": s.get("leader"),
                    "epoch": s.get("epoch"), "term": s.get("term"), "info": {}})
    return sorted(out, key=lambda w: w["start"])


def _failover(nodes: dict[str, Any], windows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ref = _reference_node(nodes)
    if ref is None:
        return []
    claims = sorted((o["epoch"], ts(o["created_at"]) or 0) for o in nodes[ref]["occurrences"]
                    if o["kind"] == "scheduled")
    first_claim: dict[int, float] = {}
    for epoch, at in claims:
        first_claim[epoch] = min(first_claim.get(epoch, at), at)
    out = []
    for w in windows:
        if w["kind"] not in LEADER_LOSS or w["epoch"] is None:
            continue
        if w["kind"] in ("kill-two", "pause-two") and w["leader"] not in (w["targets"] or []):
            continue
        horizon = (w["stop"] or w["start"]) + 15
        later = [(e, t) for e, t in first_claim.items()
                 if e > w["epoch"] and w["start"] - 2 <= t <= horizon]
        if not later:
            out.append({"kind": w["kind"], "op": w["op"], "old_epoch": w["epoch"],
                        "new_epoch": None, "failover_s": None})
            continue
        e, t = min(later, key=lambda x: x[1])
        out.append({"kind": w["kind"], "op": w["op"], "old_epoch": w["epoch"], "new_epoch": e,
                    "failover_s": round(t - w["start"], 3)})
    return out


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)


def _fire_lag(nodes: dict[str, Any], attempts: dict[str, Any],
              windows: list[dict[str, Any]]) -> dict[str, Any]:
    ref = _reference_node(nodes)
    if ref is None:
        return {}
    kinds = {o["id"]: o for o in nodes[ref]["occurrences"]}
    lags: list[tuple[float, float]] = []
    for occ_id, lst in (attempts.get(ref) or {}).items():
        o = kinds.get(occ_id)
        if not o or o["kind"] != "scheduled":
            continue
        for a in lst or []:
            if a["number"] == 1 and a.get("leased_at"):
                at = ts(o["scheduled_for"]) or 0
                lags.append((at, (ts(a["leased_at"]) or 0) - at))
    per_window = []
    inside: set[int] = set()
    for w in windows:
        end = (w["stop"] or w["start"]) + 5
        sel = [i for i, (at, _) in enumerate(lags) if w["start"] - 1 <= at <= end]
        inside |= set(sel)
        vals = [lags[i][1] for i in sel]
        per_window.append({"kind": w["kind"], "op": w["op"], "n": len(vals),
                           "p50_s": _pct(vals, 0.5), "p95_s": _pct(vals, 0.95),
                           "max_s": round(max(vals), 3) if vals else None})
    base = [lag for i, (_, lag) in enumerate(lags) if i not in inside]
    return {"baseline": {"n": len(base), "p50_s": _pct(base, 0.5), "p95_s": _pct(base, 0.95),
                         "max_s": round(max(base), 3) if base else None,
                         "mean_s": round(statistics.fmean(base), 3) if base else None},
            "windows": per_window, "points": [[round(a, 3), round(b, 3)] for a, b in lags]}


def _terms(hist: list[dict[str, Any]], nodes: dict[str, Any]) -> dict[str, Any]:
    terms = [h["term"] for h in hist if h.get("f") == "cluster" and h.get("term") is not None]
    epochs = {h["epoch"] for h in hist if h.get("f") == "cluster" and h.get("epoch")}
    final_terms = {nid: (n.get("cluster") or {}).get("term") for nid, n in nodes.items()}
    ref = _reference_node(nodes)
    claim_epochs = sorted({o["epoch"] for o in nodes[ref]["occurrences"]}) if ref else []
    max_term = max(terms + [t for t in final_terms.values() if t], default=0)
    return {"final_terms": final_terms, "max_term": max_term,
            "epochs_observed": len(epochs), "epochs_with_claims": len(claim_epochs),
            "term_inflation": max_term - len(epochs) if epochs else None}


def _op_counts(ops: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for op in ops:
        out[op["f"]][(op.get("done") or {}).get("type", "none")] += 1
    return {k: dict(v) for k, v in out.items()}


def _occ_counts(nodes: dict[str, Any]) -> dict[str, int]:
    ref = _reference_node(nodes)
    out: dict[str, int] = defaultdict(int)
    for o in nodes[ref]["occurrences"] if ref else []:
        out[f"{o['kind']}:{o['status']}" + (f":{o['reason']}" if o["reason"] else "")] += 1
    return dict(sorted(out.items()))


def _in_windows(hist: list[dict[str, Any]], ops: list[dict[str, Any]],
                windows: list[dict[str, Any]]) -> dict[str, int]:
    """How many pauses, cancels and deletes were acknowledged, and membership changes
    begun, from inside a fault window (invoked after it began, before it stopped)."""
    def inside(t: float | None) -> bool:
        return t is not None and any(
            w["start"] <= t and (w["stop"] is None or t <= w["stop"]) for w in windows)

    out = defaultdict(int)
    for op in ops:
        if op["f"] in ("pause", "cancel", "delete") and \
                (op.get("done") or {}).get("type") == "ok" and \
                inside(op["invoke"].get("cluster_wall")):
            out[op["f"]] += 1
    out["membership"] = sum(1 for h in hist if h.get("process") == "membership"
                            and h.get("type") == "invoke" and h.get("f") == "replace-node"
                            and inside(h.get("cluster_wall")))
    return out


def _before_start_skips(node: dict[str, Any] | None, attempts: dict[str, Any] | None) -> int:
    """Runs leased (ahead) and then skipped as `paused`: the check before the start saw a
    pause that came after the lease."""
    return sum(1 for o in (node or {}).get("occurrences", [])
               if o.get("status") == "skipped" and o.get("reason") == "paused"
               and any(a.get("leased_at") for a in (attempts or {}).get(o["id"]) or []))


def _leased_ahead(node: dict[str, Any] | None, attempts: dict[str, Any] | None
                  ) -> list[tuple[str, float]]:
    """(job, seconds early) of every scheduled run leased before its instant."""
    out = []
    for o in (node or {}).get("occurrences", []):
        instant = ts(o.get("scheduled_for"))
        if o.get("kind") != "scheduled" or instant is None:
            continue
        for a in (attempts or {}).get(o["id"]) or []:
            leased = ts(a.get("leased_at"))
            if leased is not None and leased < instant:
                out.append((o["job_id"], instant - leased))
    return out


def _coverage(hist: list[dict[str, Any]], windows: list[dict[str, Any]],
              nodes: dict[str, Any], attempts: dict[str, Any], proxy: list[dict[str, Any]],
              ops: list[dict[str, Any]], dst: dict[str, Any]) -> dict[str, int]:
    kinds = defaultdict(int)
    for w in windows:
        kinds[w["kind"]] += 1
    ref = _reference_node(nodes)
    atts = [a for lst in (attempts.get(ref) or {}).values() for a in lst or []] if ref else []
    drops = defaultdict(int)
    for p in proxy:
        if p.get("event") == "drop":
            drops[p["path"]] += 1
    trig_retries = sum(1 for op in ops if op["f"] == "trigger" and (
        op["invoke"].get("try_no", 1) > 1 or op["invoke"].get("repeat")))
    ok = defaultdict(int)
    for op in ops:
        if (op.get("done") or {}).get("type") == "ok":
            ok[op["f"]] += 1
    unknown = sum(1 for op in ops if (op.get("done") or {}).get("type") == "info")
    ahead = _leased_ahead(nodes.get(ref) if ref else None, attempts.get(ref) if ref else None)
    in_fault = _in_windows(hist, ops, windows)
    return {
        "before_start_skips": _before_start_skips(nodes.get(ref) if ref else None,
                                                  attempts.get(ref) if ref else None),
        "pause_in_fault": in_fault["pause"],
        "cancel_in_fault": in_fault["cancel"],
        "delete_in_fault": in_fault["delete"],
        "membership_in_fault": in_fault["membership"],
        "leased_ahead": len(ahead),
        "herd_leased_ahead": sum(1 for job, early in ahead if job.startswith("herd-")
                                 and early > HERD_AHEAD_S),
        "process_suspension": kinds["pause-leader"] + kinds["pause-two"]
        + kinds["worker-pause"],
        "lease_expiry": sum(1 for a in atts if a["status"] == "lost"),
        "clock_skew": kinds["clock-bump"] + kinds["clock-bump-leader"] + kinds["clock-strobe"],
        "worker_clock_skew": kinds["clock-bump-worker"],
        "partitions": kinds["partition-leader"] + kinds["partition-follower"]
        + kinds["partition-bridge"],
        "renewal_delay": kinds["renewal-delay"],
        "rolling_deploys": kinds["rolling-deploy"],
        "queue_redelivery": drops["/v1/leases"] + sum(
            1 for a in atts if a["number"] > 1),
        "ack_loss": drops["/v1/completions"] + drops["/v1/heartbeats"],
        "worker_crashes": kinds["worker-crash"],
        "timeout_after_commit": sum(drops.values()) + unknown,
        "dst_transitions": sum(1 for d in dst.values() if d.get("crossed_transition")),
        "schedule_edits": ok["edit"],
        "backfills": ok["backfill"],
        "manual_retries": trig_retries,
        "leader_kills": kinds["kill-leader"] + kinds["kill-two"],
    }
