"""The membership change of a run (chaos/membership_step.py), failing closed:

- membership_missing: a real run (meta.json names its profile) holds no membership change;
- membership_failed: the change failed, or recorded no outcome (it did not complete);
- departure_read_missing: the change removed a node, but its read at the removal
  (`departed.json`) is absent or incomplete, so its history up to the removal is unchecked;
- member_set_wrong: a member's final cluster view does not name exactly the other members
  as its peers (the removed node is still there, or the added node is not);
- departed_digest_not_compared: the change removed a node, but no digest-mark record
  (chaos/digest_mark.py) holds a digest from the removed node and from at least one other
  node at the mark's index, so its state was never compared with the cluster's;
- departed_digest_divergence: at the mark, the removed node's digest and the members'
  differ (or one mark sits at different indexes on different nodes: their logs differ).

The removed node is required nowhere after its removal: the final reads and the digest
barrier expect the nodes the harness started minus the removed ones
(checks_inputs.expected_nodes), and the removed node's departure read joins the per-node
checks with its own end, the cut-off its read is complete up to (`checked_until`).
"""

from __future__ import annotations

from typing import Any

from chaos.report_model import Report


def removed_nodes(hist: list[dict[str, Any]]) -> set[str]:
    """Nodes a completed membership change removed."""
    return {h["removed"] for h in hist if h.get("process") == "membership"
            and h.get("type") == "ok" and h.get("removed")}


def departed_nodes(run: dict[str, Any]) -> dict[str, Any]:
    """The departure reads of the removed nodes (only those a completed change removed)."""
    removed = removed_nodes(run.get("history") or [])
    departed = run.get("departed") or {}
    return {nid: node for nid, node in departed.items() if nid in removed
            and not node.get("occurrences_incomplete") and node.get("cluster")
            and node.get("checked_until")}


def check_membership(rep: Report, run: dict[str, Any], required: bool) -> list[dict[str, Any]]:
    """The checks; the completed changes (their `ok` lines)."""
    hist = run.get("history") or []
    lines = [h for h in hist if h.get("process") == "membership"]
    invoked = {h["op"] for h in lines if h["type"] == "invoke"}
    if required and not invoked:
        rep.add("membership_missing", problem="the run holds no membership change")
    done: list[dict[str, Any]] = []
    outcome: set[int] = set()
    for h in lines:
        if h["type"] == "fail":
            outcome.add(h["op"])
            rep.add("membership_failed", op=h["op"], error=h.get("error"))
        elif h["type"] == "ok":
            outcome.add(h["op"])
            done.append(h)
    for op in sorted(invoked - outcome):
        rep.add("membership_failed", op=op, error="no outcome recorded: the change did not "
                                                  "complete")
    departed = departed_nodes(run)
    for h in done:
        if h["removed"] not in departed:
            rep.add("departure_read_missing", op=h["op"], node=h["removed"],
                    problem="no complete read of the removed node at its removal")
    if done:
        _check_member_sets(rep, run, set(done[-1].get("members") or []))
    return [{**h, "digest_mark": _check_departed_digest(rep, hist, h)} for h in done]


def _check_departed_digest(rep: Report, hist: list[dict[str, Any]],
                           change: dict[str, Any]) -> dict[str, Any] | None:
    """The removed node's digest against the others' at the marks made before its removal
    (the harness makes another when one could not be read from the removed node): every
    mark's digests must agree, and at least one must hold the removed node's and
    another's. Returns what was compared."""
    removed = change["removed"]
    records = [h for h in hist if h.get("process") == "membership"
               and h.get("f") == "digest-mark" and h.get("op") == change["op"]
               and h.get("node") == removed]
    if not records:
        rep.add("departed_digest_not_compared", op=change["op"], node=removed,
                problem="no digest-mark record: the removed node's state was not compared")
        return None
    compared: dict[str, Any] | None = None
    for record in records:
        digests = record.get("digests") or {}
        have = {nid: d for nid, d in digests.items()
                if isinstance(d, dict) and d.get("digest")}
        _check_mark_agrees(rep, change, record, have)
        if removed in have and len(have) > 1:
            compared = {"mark": record.get("mark"), "index": record.get("index"),
                        "compared": sorted(have)}
            for nid, d in sorted(digests.items()):
                if nid not in have:
                    rep.notes.append(f"digest mark {record.get('mark')}: {nid} not "
                                     f"compared ({(d or {}).get('error')})")
    if compared is None:
        last = records[-1]
        rep.add("departed_digest_not_compared", op=change["op"], node=removed,
                marks=len(records), mark=last.get("mark"), error=last.get("error"),
                errors={nid: (d or {}).get("error")
                        for nid, d in (last.get("digests") or {}).items()
                        if not (isinstance(d, dict) and d.get("digest"))},
                problem="no mark with a digest of the removed node and of another node")
        return {"mark": last.get("mark"), "compared": []}
    return compared


def _check_mark_agrees(rep: Report, change: dict[str, Any], record: dict[str, Any],
                       have: dict[str, dict[str, Any]]) -> None:
    """The digests one mark holds: at one index, and equal."""
    indexes = {nid: d.get("index") for nid, d in have.items()}
    groups: dict[str, list[str]] = {}
    for nid, d in sorted(have.items()):
        groups.setdefault(d["digest"], []).append(nid)
    if len(set(indexes.values())) > 1:
        rep.add("departed_digest_divergence", op=change["op"], node=change["removed"],
                mark=record.get("mark"), indexes=indexes,
                problem="the mark is at different indexes on different nodes")
    elif len(groups) > 1:
        rep.add("departed_digest_divergence", op=change["op"], node=change["removed"],
                mark=record.get("mark"), index=record.get("index"), groups=groups)


def _check_member_sets(rep: Report, run: dict[str, Any], members: set[str]) -> None:
    nodes = (run.get("final") or {}).get("nodes") or {}
    for nid in sorted(members):
        view = (nodes.get(nid) or {}).get("cluster")
        if not view:
            continue  # final_read_missing / final_read_incomplete already name it
        peers = {p.get("id") for p in view.get("peers") or []}
        if peers != members - {nid}:
            rep.add("member_set_wrong", node=nid, peers=sorted(p or "?" for p in peers),
                    expected=sorted(members - {nid}))
