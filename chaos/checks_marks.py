"""Digests compared at marks during the run, not only at the end.

Every MARK_EVERY_S of the fault schedule the harness makes a digest mark through the
leader and reads every member's digest at the mark's index (chaos/digest_mark.py), faults
and all: a member cut off or paused answers later or not at all and is left out of that
mark. Retention prunes history before the final digest barrier can compare it; a mark
compares every table at one exact index while that history is still there.

- mark_digest_divergence: two members answered one mark with different digests;
- marks_not_compared: fewer than MIN_COMPARED marks held the digests of two members or
  more (the run compared nothing while it ran, and is not evidence).
"""

from __future__ import annotations

from typing import Any

from chaos.report_model import Report

CHECKS = ("mark_digest_divergence", "marks_not_compared")
MIN_COMPARED = 2


def mark_records(hist: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [h for h in hist if h.get("process") == "marks" and h.get("f") == "digest-mark"]


def check_marks(rep: Report, hist: list[dict[str, Any]]) -> dict[str, Any]:
    compared = 0
    for record in mark_records(hist):
        digests = {nid: d["digest"] for nid, d in (record.get("digests") or {}).items()
                   if isinstance(d, dict) and d.get("digest")}
        if len(digests) < 2:
            continue
        compared += 1
        if len(set(digests.values())) > 1:
            rep.add("mark_digest_divergence", mark=record.get("mark"),
                    index=record.get("index"), digests=digests,
                    problem="members disagree on the state at one applied index")
    if compared < MIN_COMPARED:
        rep.add("marks_not_compared", compared=compared, required=MIN_COMPARED,
                marks=len(mark_records(hist)),
                problem="too few digest marks were read from two members or more")
    return {"marks": len(mark_records(hist)), "compared": compared}
