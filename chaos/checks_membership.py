"""The membership change of a run (chaos/membership_step.py), failing closed:

- membership_missing: a real run (meta.json names its profile) holds no membership change;
- membership_failed: the change failed, or recorded no outcome (it did not complete);
- departure_read_missing: the change removed a node, but its read at the removal
  (`departed.json`) is absent or incomplete, so its history up to the removal is unchecked;
- member_set_wrong: a member's final cluster view does not name exactly the other members
  as its peers (the removed node is still there, or the added node is not).

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
    return done


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
