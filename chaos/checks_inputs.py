"""Fail-closed checks on the run's inputs: a run whose evidence is missing is INVALID.

Every absence gets its own violation name, so "nothing was seen" can never read as
"nothing went wrong": no history, a corrupt line, no final read (or an incomplete one, or
fewer than a cluster's nodes), no attempts read (or a failed one), no sink or proxy log, a
fault that failed to start, did not stop cleanly or was never run, digests that were not
compared at one index on every node, and a failure kind the run was meant to exercise but
did not.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from chaos.report_model import Report

# The files a run directory must hold (meta.json, history.jsonl, final.json, sink.jsonl,
# proxy.jsonl); load_run names each missing one.
RUN_FILES = ("meta", "history", "final", "sink", "proxy")
MIN_MEMBERS = 3  # a run's cluster: its final reads must hold at least this many nodes


def check_inputs(rep: Report, run: dict[str, Any]) -> None:
    for name in run.get("missing_files", []):
        rep.add(f"{name}_missing", problem=f"{name} file absent or unreadable")
    for name, n in (run.get("corrupt_lines") or {}).items():
        if n:
            rep.add("corrupt_line", file=name, lines=n)
    hist = run.get("history") or []
    if "history" not in run.get("missing_files", []) and not hist:
        rep.add("history_missing", problem="history.jsonl holds no event")
    meta = run.get("meta") or {}
    if "meta" not in run.get("missing_files", []) and not meta.get("final_reads_cluster_wall"):
        rep.add("meta_missing", problem="meta.json has no final_reads_cluster_wall: the run "
                                        "did not reach its final reads")
    final = run.get("final") or {}
    nodes = final.get("nodes") or {}
    expected = expected_nodes(hist) or set(nodes)
    if "final" not in run.get("missing_files", []) and not nodes:
        rep.add("final_read_missing", problem="final.json has no node")
    for nid in sorted(expected):
        node = nodes.get(nid)
        if node is None:
            rep.add("final_read_missing", node=nid, problem="node absent from final reads")
        elif node.get("occurrences_incomplete") or not node.get("cluster"):
            rep.add("final_read_incomplete", node=nid,
                    problem="occurrence pages or the cluster view could not be read")
    if "final" not in run.get("missing_files", []) and 0 < len(expected) < MIN_MEMBERS:
        rep.add("final_read_missing", nodes=sorted(expected),
                problem=f"final reads of {len(expected)} node(s): a cluster has "
                        f"{MIN_MEMBERS}")
    _check_attempt_reads(rep, final, expected, run.get("departed") or {})
    if "sink" not in run.get("missing_files", []) and not run.get("sink"):
        rep.add("sink_missing", problem="sink.jsonl holds no offer: no job effect was seen")
    if "proxy" not in run.get("missing_files", []) and not run.get("proxy"):
        rep.add("proxy_missing", problem="proxy.jsonl is empty (the proxy writes a start "
                                         "line): the ack-loss proxy did not run")


def _check_attempt_reads(rep: Report, final: dict[str, Any], expected: set[str],
                         departed: dict[str, Any]) -> None:
    """attempts_read_missing: a node's attempts were not read at all, or the read of an
    occurrence's attempts failed (None, and not answered 404: pruned meanwhile). A failed
    read is no evidence that the occurrence had no attempts."""
    attempts = final.get("attempts") or {}
    gone = final.get("attempts_gone") or {}
    reads = {nid: attempts.get(nid) for nid in expected if (final.get("nodes") or {}).get(nid)}
    reads.update({nid: node.get("attempts") for nid, node in departed.items()
                  if node.get("checked_until")})
    for nid, per in sorted(reads.items()):
        if per is None:
            rep.add("attempts_read_missing", node=nid, problem="no attempts read of the node")
            continue
        failed = sorted(o for o, lst in per.items() if lst is None
                        and o not in set(gone.get(nid) or []))
        if failed:
            rep.add("attempts_read_missing", node=nid, occurrences=len(failed),
                    examples=failed[:10], problem="these attempt reads failed")


def expected_nodes(hist: list[dict[str, Any]]) -> set[str]:
    """The node ids the harness started (its `node-start` notes), less those a completed
    membership change removed (checked up to their removal: chaos/checks_membership.py)."""
    started = {h["node"] for h in hist if h.get("process") == "harness"
               and h.get("f") == "node-start" and h.get("node")}
    removed = {h["removed"] for h in hist if h.get("process") == "membership"
               and h.get("type") == "ok" and h.get("removed")}
    return started - removed


def check_faults(rep: Report, hist: list[dict[str, Any]]) -> None:
    """Every planned fault started, stopped without error, and ran: the plan note lists
    the kinds; each needs a `start` and a `stop` line of the same op."""
    plan = next((h for h in hist if h.get("process") == "harness" and h.get("f") == "plan"),
                None)
    nem = [h for h in hist if h.get("process") == "nemesis"]
    if plan is None:
        rep.add("fault_plan_missing", problem="no plan note: which faults ran is unknown")
    started: dict[int, dict[str, Any]] = {}
    stopped: set[int] = set()
    for h in nem:
        if h["type"] == "fail":
            rep.add("fault_not_started", kind=h["f"], op=h.get("op"), error=h.get("error"))
        elif h["type"] == "skipped":
            rep.add("fault_not_run", kind=h["f"], reason=h.get("reason"))
        elif h["type"] == "start" and "op" in h:
            started[h["op"]] = h
        elif h["type"] == "stop" and "op" in h:
            stopped.add(h["op"])
            if h.get("error"):
                rep.add("fault_not_healed", kind=h["f"], op=h["op"], error=h["error"])
    for op, h in started.items():
        if op not in stopped:
            rep.add("fault_not_healed", kind=h["f"], op=op, error="no stop recorded")
    if plan is not None:
        ran = Counter(h["f"] for h in started.values())
        for kind, n in Counter(plan.get("kinds") or []).items():
            if ran[kind] < n:
                rep.add("fault_not_run", kind=kind, planned=n, started=ran[kind])


def check_coverage(rep: Report, coverage: dict[str, int], required: tuple[str, ...]) -> None:
    for kind in required:
        if not coverage.get(kind):
            rep.add("coverage_missing", kind=kind,
                    problem="the run shows no evidence of this failure kind")


def check_digests(rep: Report, final: dict[str, Any], expected: set[str]) -> None:
    """Digests are compared at one barrier index that every node reported; any index that
    two nodes both reported must agree too (the samples, when the harness took them)."""
    digests = final.get("digests") or {}
    nodes = expected or set(digests) or set(final.get("nodes") or {})
    have = {n: d for n, d in digests.items() if d}
    missing = sorted(n for n in nodes if n not in have)
    indexes = {d["last_applied_index"] for d in have.values()}
    if missing or len(indexes) != 1:
        rep.add("digest_not_compared", missing=missing,
                indexes={n: d["last_applied_index"] for n, d in have.items()},
                problem="no single applied index with a digest from every node")
    by_index: dict[int, dict[str, set[str]]] = {}
    for nid, d in have.items():
        by_index.setdefault(d["last_applied_index"], {}).setdefault(d["digest"], set()).add(nid)
    for nid, lst in (final.get("digest_samples") or {}).items():
        for s in lst:
            by_index.setdefault(s["last_applied_index"], {}).setdefault(
                s["digest"], set()).add(nid)
    for idx, groups in sorted(by_index.items()):
        if len(groups) > 1:
            rep.add("digest_divergence", index=idx,
                    groups={g: sorted(ns) for g, ns in groups.items()})
