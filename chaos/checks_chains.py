"""Chains: each upstream run that ended as a chained job follows has exactly one run of it.

The workload chains `chain-down` to every end of `chain-up`, and `chain-alarm` to every
failure of `fail-4s` (chaos/workload.py `CHAIN_FOLLOWS`). The product creates the
downstream run in the same log entry that ends the upstream one, so on every node, in
every state it reaches:

- chain_missing: an upstream occurrence ended as the follower follows with no run of the
  follower naming it. Judged only for ends after the follower's creation was acknowledged
  (an end before it owes nothing) and before the node's read (so the read cannot have
  fallen between the two);
- chain_duplicate: two runs of a follower naming one upstream occurrence;
- chain_orphan: a follower's run naming an occurrence that is not one of its upstream's
  that ended that way (or that the node does not hold);
- chain_outcome_wrong: a follower's run whose recorded upstream outcome is not how that
  upstream occurrence ended.

`coverage` counts the upstream ends judged on the node that judged the most (required
coverage kind `chains`: a run in which no chain was exercised proves nothing).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from chaos.report_model import Report, ts
from chaos.workload import CHAIN_FOLLOWS
from raftcron.core.chains import ENDS_FOLLOWED

CHECKS = ("chain_missing", "chain_duplicate", "chain_orphan", "chain_outcome_wrong")
# An upstream that ended this close to the node's read is not judged for a missing run.
END_MARGIN_S = 2.0


def followers_created(ops: list[dict[str, Any]]) -> dict[str, float]:
    """follower -> when its creation was acknowledged (cluster wall)."""
    out: dict[str, float] = {}
    for op in ops:
        done = op.get("done") or {}
        job = op["invoke"].get("job")
        if op["f"] == "create" and job in CHAIN_FOLLOWS and done.get("type") == "ok":
            out[job] = min(out.get(job, done["cluster_wall"]), done["cluster_wall"])
    return out


def check_chains(rep: Report, nodes: dict[str, Any], ops: list[dict[str, Any]],
                 window_end: float | None) -> int:
    """The chain checks on every node; returns the coverage (upstream ends judged)."""
    created = followers_created(ops)
    most = 0
    for nid, node in sorted(nodes.items()):
        if node.get("occurrences_incomplete"):
            continue
        cutoff = node.get("checked_until") or window_end
        occs = {o["id"]: o for o in node.get("occurrences", [])}
        judged = 0
        for follower, (upstream, on) in CHAIN_FOLLOWS.items():
            runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for o in occs.values():
                if o["job_id"] == follower and o.get("upstream"):
                    runs[o["upstream"]["occurrence_id"]].append(o)
            ends = ENDS_FOLLOWED[on]
            for o in occs.values():
                if o["job_id"] != upstream or o["status"] not in ends:
                    continue
                mine = runs.get(o["id"], [])
                finished = ts(o.get("finished_at"))
                if not mine:
                    if (cutoff is None or finished is None or follower not in created
                            or finished <= created[follower]
                            or finished > cutoff - END_MARGIN_S):
                        continue  # before the follower existed, or too close to the read
                    rep.add("chain_missing", node=nid, follower=follower, upstream=o["id"],
                            status=o["status"], finished_at=o.get("finished_at"))
                    continue
                judged += 1
                if len(mine) > 1:
                    rep.add("chain_duplicate", node=nid, follower=follower, upstream=o["id"],
                            runs=sorted(r["id"] for r in mine))
                for r in mine:
                    if r["upstream"].get("outcome") != o["status"]:
                        rep.add("chain_outcome_wrong", node=nid, run=r["id"],
                                recorded=r["upstream"].get("outcome"), upstream=o["id"],
                                ended=o["status"])
            for upstream_id, mine in sorted(runs.items()):
                up = occs.get(upstream_id)
                if up is None or up["job_id"] != upstream or up["status"] not in ends:
                    rep.add("chain_orphan", node=nid, follower=follower, upstream=upstream_id,
                            upstream_status=None if up is None else up["status"],
                            runs=sorted(r["id"] for r in mine))
        most = max(most, judged)
    return most
