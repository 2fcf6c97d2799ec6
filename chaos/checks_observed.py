"""The attempts of the whole run, on every node: final reads joined with the observations.

A final read holds only the last retention (120 s) of a run; the observer
(chaos/observer.py) recorded every attempt of every occurrence in its band, on every
member, before retention could prune it. The fencing, duplicate, rerun and group checks
read `node_attempts`: node -> occurrence -> attempts, where each node's observations come
first and its final read (the latest word) last. An attempt seen several times keeps its
most advanced state: a terminal status wins over a non-terminal one (a lagging read may
still show it running), and among equals the later read wins.
"""

from __future__ import annotations

from typing import Any

# Terminal statuses outrank live ones (checks_effects.merged_attempts uses the same order).
RANK = {"succeeded": 3, "failed": 2, "lost": 2, "timed_out": 2, "cancelled": 2}


def merge_lists(*lists: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """One occurrence's attempts from several reads, oldest read first."""
    best: dict[str, dict[str, Any]] = {}
    for lst in lists:
        for a in lst or []:
            cur = best.get(a["id"])
            if cur is None or RANK.get(a["status"], 0) >= RANK.get(cur["status"], 0):
                best[a["id"]] = a
    return sorted(best.values(), key=lambda a: a["number"])


def observed_by_node(observed: list[dict[str, Any]]
                     ) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """node -> occurrence -> attempts, merged over that node's observations in time order."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for line in sorted((o for o in observed if o.get("node")),
                       key=lambda o: o["cluster_wall"]):
        per = out.setdefault(line["node"], {})
        for occ_id, lst in (line.get("attempts") or {}).items():
            per[occ_id] = merge_lists(per.get(occ_id), lst)
    return out


def node_attempts(final_attempts: dict[str, Any],
                  observed: list[dict[str, Any]]) -> dict[str, dict[str, list[dict]]]:
    """Every node's attempts: its observations, then its final read (a failed final read of
    an occurrence, None, leaves what was observed)."""
    seen = observed_by_node(observed)
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for nid in sorted(set(seen) | set(final_attempts)):
        per = dict(seen.get(nid) or {})
        for occ_id, lst in (final_attempts.get(nid) or {}).items():
            if lst is None and occ_id in per:
                continue
            per[occ_id] = merge_lists(per.get(occ_id), lst) if lst is not None else None
        out[nid] = per
    return out
