"""Offline checker: reads a run directory (history.jsonl, final.json, sink.jsonl,
proxy.jsonl, meta.json) and writes summary.json, report.md and timeline.png.

Violations (any of them makes the run invalid):
- duplicate_scheduled: two scheduled occurrences for one (job, instant) on a node;
- duplicate_manual: two manual occurrences for one idempotency key;
- duplicate_sink: the sink accepted effects of two different occurrence ids for one
  scheduled (job, instant);
- trigger_not_idempotent: acknowledged triggers with one key named different occurrences;
- rerun_after_success: an attempt started after an earlier attempt of the same occurrence
  succeeded;
- lost_instant: an expected (job, instant) inside the window that has no occurrence;
- unexplained_skip / misfire_policy: skips without a policy reason, or misfire decisions
  that contradict the recorded claim time;
- dst: New York fall-back jobs whose second-pass instants contradict dst_fold;
- token_not_increasing / token_reused: sink per key;
- early_fire: a scheduled effect that reached the sink well before its instant;
- lost_ack: acknowledged creates, edits, triggers or backfills missing at the end;
- digest_divergence: equal applied index, different digest.
Stale writes refused by the sink are counted, not failures.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from raftcron.core.schedule import compile_schedule

EDGE_MARGIN_S = 4.0
EDIT_MARGIN_S = 2.0
EARLY_TOLERANCE_S = 1.5
LEADER_LOSS = ("kill-leader", "pause-leader", "partition-leader", "renewal-delay",
               "rolling-deploy", "kill-two", "pause-two", "clock-bump-leader")
SKIP_REASONS = ("misfire", "overlap", "paused")
NY_FOLD_START = datetime(2026, 11, 1, 5, 0, tzinfo=UTC).timestamp()
NY_FOLD_T = datetime(2026, 11, 1, 6, 0, tzinfo=UTC).timestamp()
NY_FOLD_END = datetime(2026, 11, 1, 7, 0, tzinfo=UTC).timestamp()


def ts(iso: str | None) -> float | None:
    if not iso:
        return None
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
    return out


def load_run(d: Path) -> dict[str, Any]:
    meta_path, final_path = d / "meta.json", d / "final.json"
    return {
        "meta": json.loads(meta_path.read_text()) if meta_path.exists() else {},
        "history": _jsonl(d / "history.jsonl"),
        "final": json.loads(final_path.read_text()) if final_path.exists() else {},
        "sink": _jsonl(d / "sink.jsonl"),
        "proxy": _jsonl(d / "proxy.jsonl"),
    }


class Report:
    def __init__(self) -> None:
        self.violations: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.notes: list[str] = []

    def add(self, kind: str, **detail: Any) -> None:
        self.violations[kind].append(detail)


def check_run(run: dict[str, Any]) -> dict[str, Any]:
    """Check a loaded run; pure (no files written)."""
    rep = Report()
    hist = run["history"]
    final = run.get("final") or {}
    nodes: dict[str, Any] = final.get("nodes", {})
    meta = run.get("meta") or {}
    ops = _client_ops(hist)

    _check_duplicates(rep, nodes, run["sink"], ops, final.get("attempts", {}))
    windows = _nemesis_windows(hist)
    window_end = meta.get("final_reads_cluster_wall") or max(
        (h["cluster_wall"] for h in hist), default=0)
    _check_lost(rep, nodes, ops, window_end)
    dst = _check_dst(rep, nodes, ops, window_end)
    sink_stats = _check_sink(rep, run["sink"], nodes)
    _check_acks(rep, nodes, ops)
    _check_digests(rep, final.get("digests") or {})

    stats = {
        "failover": _failover(nodes, windows),
        "fire_lag": _fire_lag(nodes, final.get("attempts", {}), windows),
        "terms": _terms(hist, nodes),
        "sink": sink_stats,
        "client_ops": _op_counts(ops),
        "dst": dst,
        "coverage": _coverage(hist, windows, nodes, final.get("attempts", {}), run["proxy"],
                              ops, dst),
        "occurrences": _occ_counts(nodes),
    }
    counts = {k: len(v) for k, v in rep.violations.items()}
    verdict = {"valid": not counts, "violations": counts, "seed": meta.get("seed"),
               "profile": meta.get("profile"),
               "coverage_missing": [k for k, v in stats["coverage"].items() if not v]}
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


def _reference_node(nodes: dict[str, Any]) -> str | None:
    best = None
    for nid, node in sorted(nodes.items()):
        if node.get("occurrences_incomplete"):
            continue
        if best is None or len(node["occurrences"]) > len(nodes[best]["occurrences"]):
            best = nid
    return best


def _job_specs(ops: list[dict[str, Any]], nodes: dict[str, Any]) -> dict[str, dict[int, Any]]:
    """job -> version -> {cron, tz, gap, fold, invoke, ok} from creates, edits and reads."""
    out: dict[str, dict[int, Any]] = defaultdict(dict)
    for op in ops:
        inv, done = op["invoke"], op.get("done")
        if not done or done["type"] != "ok":
            continue
        resp = done.get("response") or {}
        if op["f"] == "create":
            s = inv["spec"]["schedule"]
            out[inv["job"]][1] = {"cron": s["cron"], "tz": s.get("timezone", "UTC"),
                                  "gap": s.get("dst_gap", "auto"),
                                  "fold": s.get("dst_fold", "auto"),
                                  "invoke": inv["cluster_wall"], "ok": done["cluster_wall"]}
        elif op["f"] == "edit" and resp.get("version"):
            s = inv["body"]["schedule"]
            prev = out[inv["job"]].get(resp["version"], {})
            out[inv["job"]][resp["version"]] = {
                "cron": s["cron"], "tz": s.get("timezone", "UTC"), "gap": "auto",
                "fold": "auto", "invoke": min(prev.get("invoke", 1e18), inv["cluster_wall"]),
                "ok": min(prev.get("ok", 1e18), done["cluster_wall"])}
    for op in ops:
        inv, done = op["invoke"], op.get("done")
        if op["f"] != "read" or not done or done["type"] != "ok":
            continue
        resp = done.get("response") or {}
        v = resp.get("version")
        if v and v not in out[inv["job"]] and resp.get("cron"):
            out[inv["job"]][v] = {"cron": resp["cron"], "tz": "UTC", "gap": "auto",
                                  "fold": "auto", "invoke": None, "ok": done["cluster_wall"]}
    for node in nodes.values():
        for job in node.get("jobs", []):
            v = job["version"]
            if v not in out[job["id"]]:
                s = job["schedule"]
                out[job["id"]][v] = {"cron": s["cron"], "tz": s["timezone"],
                                     "gap": s["dst_gap"], "fold": s["dst_fold"],
                                     "invoke": None, "ok": None}
    return out


def _compile(job: str, spec: dict[str, Any]) -> Any:
    return compile_schedule(spec["cron"], spec["tz"], spec["gap"], spec["fold"], hash_key=job)


def _instants(job: str, spec: dict[str, Any], lo: float, hi: float) -> list[int]:
    """Nominal instants t (epoch s) with lo < t < hi."""
    if hi <= lo:
        return []
    sched = _compile(job, spec)
    return [t for t in sched.iter_between(int(lo), int(hi) + 1) if lo < t < hi]


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
        if s.get("verdict") != "accept" or not s.get("occurrence"):
            continue
        occ = s["occurrence"]
        kind = kinds.get(occ) or ("manual" if "@manual-" in occ else
                                  "backfill" if "@backfill-" in occ else "scheduled")
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


def _check_lost(rep: Report, nodes: dict[str, Any], ops: list[dict[str, Any]],
                window_end: float) -> None:
    ref = _reference_node(nodes)
    if ref is None:
        rep.notes.append("no complete final read: lost instants not checked")
        return
    specs = _job_specs(ops, nodes)
    occs_by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for o in nodes[ref]["occurrences"]:
        if o["kind"] == "scheduled":
            occs_by_job[o["job_id"]].append(o)
    hi = window_end - EDGE_MARGIN_S
    grace = {}
    for op in ops:
        if op["f"] == "create":
            grace[op["invoke"]["job"]] = op["invoke"]["spec"]
    for job, versions in specs.items():
        if 1 not in versions or versions[1].get("ok") is None:
            continue
        lo = versions[1]["ok"] + EDGE_MARGIN_S
        occs = sorted(occs_by_job.get(job, []), key=lambda o: o["scheduled_for"])
        points = [(ts(o["scheduled_for"]) or 0, o["job_version"]) for o in occs]
        inside = [p for p in points if lo < p[0] < hi]
        before = [p for p in points if p[0] <= lo]
        after = [p for p in points if p[0] >= hi]
        first_v = before[-1][1] if before else (inside[0][1] if inside else 1)
        last_v = after[0][1] if after else (inside[-1][1] if inside else first_v)
        seq = [(lo, first_v)] + inside + [(hi, last_v)]
        for (a, va), (b, vb) in zip(seq, seq[1:], strict=False):
            expected: list[tuple[int, int]] = []
            if va == vb:
                if va in versions:
                    expected = [(t, va) for t in _instants(job, versions[va], a, b)]
            else:
                first_edit = versions.get(va + 1, {})
                new = versions.get(vb, {})
                t_lo, t_hi = first_edit.get("invoke"), new.get("ok")
                if va not in versions or vb not in versions or t_lo is None or t_hi is None:
                    rep.notes.append(f"{job}: edit gap {a}..{b} (v{va}->v{vb}) not checked")
                    continue
                expected = [(t, va) for t in _instants(job, versions[va], a,
                                                         min(b, t_lo - EDIT_MARGIN_S))]
                expected += [(t, vb) for t in _instants(job, versions[vb],
                                                          max(a, t_hi + EDIT_MARGIN_S), b)]
            for t, v in expected:
                rep.add("lost_instant", job=job, scheduled_for=_iso(t), version=v,
                        between=[_iso(a), _iso(b)])
        for o in occs:
            if o["status"] == "skipped" and o["reason"] not in SKIP_REASONS:
                rep.add("unexplained_skip", job=job, occurrence=o["id"], reason=o["reason"])
            spec = grace.get(job) or {}
            g = spec.get("misfire_grace_s", 60)
            late = (ts(o["created_at"]) or 0) - (ts(o["scheduled_for"]) or 0)
            if o["reason"] == "misfire" and late <= g:
                rep.add("misfire_policy", job=job, occurrence=o["id"], late_s=round(late, 3),
                        grace_s=g, problem="skipped as a misfire but claimed within grace")
            if (spec.get("misfire_policy") == "skip" and late > g + 0.001
                    and o["status"] != "skipped" and o["reason"] is None):
                rep.add("misfire_policy", job=job, occurrence=o["id"], late_s=round(late, 3),
                        grace_s=g, problem="missed instant fired under misfire_policy=skip")


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
            rep.add("dst", job=job, scheduled_for=_iso(t), problem="expected DST instant absent")
        for t in unexpected:
            rep.add("dst", job=job, scheduled_for=_iso(t),
                    problem="fired in the second pass of the fold with dst_fold=once")
        out[job] = {"first_pass_expected": len(first), "second_pass_expected":
                    len(second) if second_pass else 0,
                    "first_pass_recorded": len([t for t in first if t in got]),
                    "second_pass_recorded": len([t for t in second if t in got]),
                    "crossed_transition": bool(second)}
    return out


def _check_sink(rep: Report, sink: list[dict[str, Any]], nodes: dict[str, Any]) -> dict:
    accepted: dict[str, list[dict[str, Any]]] = defaultdict(list)
    token_owner: dict[int, str] = {}
    stale = []
    kinds = {o["id"]: o["kind"] for node in nodes.values() for o in node.get("occurrences", [])}
    reexec = 0
    for s in sink:
        if s.get("verdict") == "reject":
            stale.append({k: s.get(k) for k in ("key", "attempt", "token", "prev_max",
                                                "worker", "cluster_wall")})
            continue
        prev = accepted[s["key"]]
        if prev and s["token"] < prev[-1]["token"]:
            rep.add("token_not_increasing", key=s["key"], token=s["token"],
                    previous=prev[-1]["token"], attempt=s.get("attempt"))
        if prev and s["token"] == prev[-1]["token"] and s.get("attempt") != prev[-1].get(
                "attempt"):
            rep.add("token_reused", key=s["key"], token=s["token"],
                    attempts=[prev[-1].get("attempt"), s.get("attempt")])
        owner = token_owner.setdefault(s["token"], s.get("attempt") or "")
        if owner != (s.get("attempt") or ""):
            rep.add("token_reused", key=s["key"], token=s["token"],
                    attempts=[owner, s.get("attempt")])
        if prev and s["token"] > prev[-1]["token"]:
            reexec += 1
        prev.append(s)
        sched = ts(s.get("scheduled_for"))
        kind = kinds.get(s.get("occurrence") or "", "scheduled")
        if (kind == "scheduled" and sched is not None
                and s["cluster_wall"] < sched - EARLY_TOLERANCE_S):
            rep.add("early_fire", occurrence=s.get("occurrence"), attempt=s.get("attempt"),
                    token=s["token"], effect_at=_iso(s["cluster_wall"]),
                    scheduled_for=s.get("scheduled_for"),
                    early_s=round(sched - s["cluster_wall"], 3))
    return {"effects": len(sink), "accepted": sum(len(v) for v in accepted.values()),
            "stale_rejected": len(stale), "stale_examples": stale[:20],
            "keys": len(accepted), "re_executions_accepted": reexec}


def _check_acks(rep: Report, nodes: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    for nid, node in nodes.items():
        if node.get("occurrences_incomplete") or not node.get("cluster"):
            rep.notes.append(f"{nid}: final read incomplete; acknowledged writes not checked")
            continue
        jobs = {j["id"]: j for j in node.get("jobs", [])}
        occ_ids = {o["id"] for o in node.get("occurrences", [])}
        for op in ops:
            done = op.get("done")
            if not done or done["type"] != "ok":
                continue
            inv, resp = op["invoke"], done.get("response") or {}
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


def _check_digests(rep: Report, digests: dict[str, Any]) -> None:
    by_index: dict[int, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for nid, d in digests.items():
        if d:
            by_index[d["last_applied_index"]][d["digest"]].append(nid)
    for idx, groups in by_index.items():
        if len(groups) > 1:
            rep.add("digest_divergence", index=idx, groups=dict(groups))
    if len(by_index) > 1:
        rep.notes.append(f"nodes ended at different applied indexes: "
                         f"{ {n: d['last_applied_index'] for n, d in digests.items() if d} }")


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
    return {
        "process_suspension": kinds["pause-leader"] + kinds["pause-two"]
        + kinds["worker-pause"],
        "lease_expiry": sum(1 for a in atts if a["status"] == "lost"),
        "clock_skew": kinds["clock-bump"] + kinds["clock-bump-leader"] + kinds["clock-strobe"],
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


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")
