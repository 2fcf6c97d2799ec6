"""Retention: pruned history is not lost history, and lost history is not "pruned".

Every node deletes finished occurrences a retention after they finished (meta.json's
`retention_s`), so the final reads lack the start of the run. The observer
(chaos/observer.py) read every instant at an age where nothing could have pruned it yet;
this module puts each occurrence the final read of a node lacks back into that node's list,
with its last observed state, when (and only when) retention may have removed it:

- observed_divergence: two members observed one finished occurrence in different states;
- retention_early: absent although it finished less than a retention before the final
  read (plus the leader clock bound): retention cannot have removed it, so it was lost;
- retention_unfinished: absent although it was last seen unfinished less than a
  retention before the final read: only finished history may be pruned;
- retention_unobserved: the observations leave instants unread that are old enough to
  have been pruned (no observation at all, or a gap between two): the checks downstream
  could not tell pruned from lost there, and the run is not evidence.

An instant absent from the final read that no observation saw is left absent, so the
schedule checks still call it lost: retention explains only what was seen, finished.
"""

from __future__ import annotations

from typing import Any

from chaos.report_model import Report, iso, ts

FINISHED = ("succeeded", "failed", "skipped", "cancelled")
# The leader stamps `now` in the Prune command; the clock guard keeps it within 0.5 s of
# the others. A node also prunes from occurrences' finish times, stamped by the same
# clocks: 1 s covers both.
CLOCK_SLACK_S = 1.0
# A removed node holds what was committed before its cut-off; a claim stamped this close to
# the cut-off may have committed after it (checks_schedule.END_MARGIN_S: the same margin).
CUTOFF_MARGIN_S = 2.0


def observed_bands(observed: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """The instant ranges the successful observations covered, merged and sorted."""
    bands = sorted((o["since"], o["until"]) for o in observed if o.get("node"))
    merged: list[tuple[float, float]] = []
    for lo, hi in bands:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _check_observed(rep: Report, observed: list[dict[str, Any]], first_instant: float,
                    horizon: float) -> None:
    """Instants in [first_instant, horizon) are old enough to be pruned: all must have been
    read by some observation."""
    if horizon <= first_instant:
        return
    bands = observed_bands(observed)
    if not bands:
        rep.add("retention_unobserved", since=iso(first_instant), until=iso(horizon),
                problem="no observation succeeded: pruned and lost instants look alike")
        return
    cursor = first_instant
    for lo, hi in bands:
        if lo > cursor and cursor < horizon:
            rep.add("retention_unobserved", since=iso(cursor), until=iso(min(lo, horizon)),
                    problem="no observation read these instants")
        cursor = max(cursor, hi)
    if cursor < horizon:
        rep.add("retention_unobserved", since=iso(cursor), until=iso(horizon),
                problem="no observation read these instants")


def last_seen(observed: list[dict[str, Any]]) -> dict[str, tuple[float, dict[str, Any]]]:
    """occurrence id -> (when, occurrence) of its latest observation on any member; a
    finished state is never replaced by an unfinished one (every member is observed, and
    one that lags still shows running what another shows finished)."""
    out: dict[str, tuple[float, dict[str, Any]]] = {}
    for o in sorted((o for o in observed if o.get("node")), key=lambda o: o["cluster_wall"]):
        for occ in o.get("occurrences") or []:
            cur = out.get(occ["id"])
            if cur is None or occ["status"] in FINISHED or cur[1]["status"] not in FINISHED:
                out[occ["id"]] = (o["cluster_wall"], occ)
    return out


def restore_pruned(rep: Report, run: dict[str, Any], first_instant: float | None
                   ) -> tuple[dict[str, Any], int]:
    """The final nodes with every legitimately pruned occurrence put back (marked
    `pruned`), and how many were put back on the node that lacked the most. Unchanged
    when the run had no retention.

    A member is judged on its own last observation of an occurrence, except where it saw
    unfinished what another member saw finished: it lagged, and the finished one is what
    its own log held by the time it pruned."""
    meta = run.get("meta") or {}
    final = run.get("final") or {}
    nodes: dict[str, Any] = final.get("nodes") or {}
    retention = meta.get("retention_s")
    end = meta.get("final_reads_cluster_wall")
    observed = run.get("observed") or []
    members = {o["node"] for o in observed if o.get("node")} | set(nodes)
    own = {nid: last_seen([o for o in observed if o.get("node") == nid]) for nid in members}
    _check_observed_agree(rep, own)
    if not retention or not end:
        return nodes, 0
    # Nodes are read one after another while the leader keeps pruning: each node's horizon
    # is a retention before the end of its own read (its `final-read` note).
    read_at = {h["node"]: h["cluster_wall"] for h in run.get("history") or []
               if h.get("process") == "harness"
               and h.get("f") in ("final-read", "departure-read")}
    if first_instant is not None:
        last_read = max([end, *read_at.values()])
        _check_observed(rep, observed, first_instant, last_read - retention + CLOCK_SLACK_S)
    seen = last_seen(observed)
    # Each member is judged on its own observations: another's are put back only for an
    # occurrence it was never seen holding (it was down through the whole band).
    out: dict[str, Any] = {}
    most = 0
    for nid, node in nodes.items():
        if node.get("occurrences_incomplete"):
            out[nid] = node
            continue
        have = {o["id"] for o in node.get("occurrences", [])}
        horizon = read_at.get(nid, end) - retention + CLOCK_SLACK_S
        back: list[dict[str, Any]] = []
        until = node.get("checked_until")  # a node removed mid-run: read up to its cut-off
        borrowed = lagged = 0
        for occ_id, (at, o) in sorted(seen.items()):
            if occ_id in have:
                continue
            if occ_id not in own[nid]:
                borrowed += 1
            elif own[nid][occ_id][1]["status"] in FINISHED or o["status"] not in FINISHED:
                at, o = own[nid][occ_id]
            else:
                # It saw the run unfinished while another member had applied its end: it
                # lagged (a member catching up, one just added). Every member applies the
                # same log, so it applied that end later, with the same finish time.
                lagged += 1
            if until and (ts(o.get("created_at")) or 0) > until - CUTOFF_MARGIN_S:
                continue  # claimed after the removed node's cut-off: never owed to it
            finished = ts(o.get("finished_at"))
            if o["status"] in FINISHED and finished is not None:
                if finished >= horizon:
                    rep.add("retention_early", node=nid, occurrence=occ_id,
                            finished_at=o["finished_at"], horizon=iso(horizon),
                            problem="absent, though it finished after the retention horizon")
                    continue
                back.append({**o, "pruned": True})
            elif at >= horizon:
                rep.add("retention_unfinished", node=nid, occurrence=occ_id,
                        status=o["status"], seen_at=iso(at), horizon=iso(horizon),
                        problem="absent, though last seen unfinished after the horizon")
            else:
                back.append({**o, "status": "pruned", "pruned": True})
        most = max(most, len(back))
        if borrowed:
            rep.notes.append(f"{nid}: {borrowed} pruned occurrence(s) judged on another "
                             "member's observation (none of its own saw them)")
        if lagged:
            rep.notes.append(f"{nid}: {lagged} pruned occurrence(s) it was last seen holding "
                             "unfinished, judged on another member's finished observation")
        out[nid] = {**node, "occurrences": list(node.get("occurrences", [])) + back}
    return out, most


def _check_observed_agree(rep: Report, own: dict[str, dict[str, tuple[float, dict]]]
                          ) -> None:
    """observed_divergence: two members observed one occurrence finished in different
    states (a finished state never changes, so their logs disagree), which no final
    digest can show once retention pruned it."""
    finished: dict[str, dict[str, str]] = {}
    for nid, seen in own.items():
        for occ_id, (_, o) in seen.items():
            if o["status"] in FINISHED:
                finished.setdefault(occ_id, {})[nid] = o["status"]
    for occ_id, states in sorted(finished.items()):
        if len(set(states.values())) > 1:
            rep.add("observed_divergence", occurrence=occ_id, states=states,
                    problem="members observed this finished occurrence in different states")
