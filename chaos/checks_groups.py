"""Concurrency groups: a group never has more holders at once than its limit.

The group's jobs post `/hold?phase=start` to the sink when their process starts and
`/hold?phase=end` before it exits (chaos/workload.py `group_cmd`). The sink numbers
every record in arrival order (`seq`), one clock for all of them, and the order is causal:
a holder's end record is answered before its process exits, so before its completion is
committed and before the lease that completion frees can be granted, and so before the
next holder's start record is sent. Replaying starts and ends in `seq` order gives the
holders at each moment:

- group_limit_exceeded: more holders of a group at once than its limit (from the run's
  `group` operations; a committed group on a node wins).

A holder counts only while its lease certainly held: both its records arrived, carry the
attempt's current fencing token, and its attempt ended by its own completion (succeeded,
failed or cancelled). A lease the cluster took back (lost, timed out, released) frees the
slot while its process may still run (execution is at least once): such a holder is
left out, as is one whose attempt no read shows (pruned before it was observed).

- group_unobserved: the run set a group but not one holder could be counted, so the check
  above proved nothing (fail closed).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from chaos.report_model import Report

ENDED_BY_COMPLETION = ("succeeded", "failed", "cancelled")


def group_limits(ops: list[dict[str, Any]], nodes: dict[str, Any]) -> dict[str, int]:
    """Group name -> limit, from the run's `group` operations and the nodes' reads."""
    out: dict[str, int] = {}
    for op in ops:
        if op["f"] == "group" and (op.get("done") or {}).get("type") == "ok":
            out[op["invoke"]["group"]] = int((op["invoke"].get("body") or {})["limit"])
    for node in nodes.values():
        for g in node.get("concurrency_groups") or []:
            if g.get("configured"):
                out[g["name"]] = int(g["limit"])
    return out


def _attempt_index(attempts: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    return {a["id"]: a for lst in attempts.values() for a in lst or []}


def holder_spans(sink: list[dict[str, Any]], attempts: dict[str, list[dict[str, Any]]]
                 ) -> tuple[dict[str, list[tuple[int, int, str]]], int]:
    """group -> [(start seq, end seq, attempt)] of the holders that count, and how many
    holders were left out (see the module's docstring)."""
    by_attempt = _attempt_index(attempts)
    marks: dict[tuple[str, str, int], dict[str, int]] = defaultdict(dict)
    for s in sink:
        if s.get("event") == "hold" and s.get("group") and s.get("attempt"):
            marks[(s["group"], s["attempt"], s.get("token", -1))][s.get("phase", "")] = s["seq"]
    spans: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    left_out = 0
    for (group, attempt_id, token), phases in marks.items():
        a = by_attempt.get(attempt_id)
        if ("start" not in phases or "end" not in phases or a is None
                or a.get("status") not in ENDED_BY_COMPLETION
                or a.get("fencing_token") != token):
            left_out += 1
            continue
        spans[group].append((phases["start"], phases["end"], attempt_id))
    return spans, left_out


def check_groups(rep: Report, sink: list[dict[str, Any]], nodes: dict[str, Any],
                 attempts: dict[str, list[dict[str, Any]]], ops: list[dict[str, Any]]
                 ) -> dict[str, Any]:
    """The group checks; stats: each group's limit, peak holders, holders counted."""
    limits = group_limits(ops, nodes)
    spans, left_out = holder_spans(sink, attempts)
    stats: dict[str, Any] = {"limits": limits, "peak": {}, "counted": {},
                             "left_out": left_out}
    for group, limit in sorted(limits.items()):
        lst = spans.get(group, [])
        stats["counted"][group] = len(lst)
        if not lst:
            rep.add("group_unobserved", group=group, limit=limit, left_out=left_out,
                    problem="no holder of the group could be counted")
            continue
        events = sorted([(start, 1, att) for start, _, att in lst]
                        + [(end, -1, att) for _, end, att in lst])
        holding: set[str] = set()
        peak = 0
        for seq, step, att in events:
            if step > 0:
                holding.add(att)
                if len(holding) > limit:
                    rep.add("group_limit_exceeded", group=group, limit=limit, seq=seq,
                            holders=sorted(holding))
            else:
                holding.discard(att)
            peak = max(peak, len(holding))
        stats["peak"][group] = peak
    return stats
