"""The backup -> restore check's outcome (chaos/backup_check.py), failing closed:

- backup_missing: a real run (meta.json names its profile) holds no backup check;
- backup_failed: the backup or the restore failed, or the check recorded no outcome;
- backup_digest_mismatch: the restored state's digest differs from the digest the source
  node reported at the backup's index.
"""

from __future__ import annotations

from typing import Any

from chaos.report_model import Report


def check_backup(rep: Report, hist: list[dict[str, Any]], required: bool) -> int:
    """The checks; the number of backups whose digest was compared."""
    lines = [h for h in hist if h.get("process") == "backup"]
    invoked = {h["op"] for h in lines if h["type"] == "invoke"}
    if required and not invoked:
        rep.add("backup_missing", problem="the run holds no backup -> restore check")
    outcome: set[int] = set()
    compared = 0
    for h in lines:
        if h["type"] == "fail":
            outcome.add(h["op"])
            rep.add("backup_failed", op=h["op"], error=h.get("error"))
        elif h["type"] == "ok":
            outcome.add(h["op"])
            compared += 1
            if not h.get("cluster_digest") or h.get("cluster_digest") != h.get(
                    "restored_digest"):
                rep.add("backup_digest_mismatch", op=h["op"], node=h.get("node"),
                        index=h.get("index"), cluster_digest=h.get("cluster_digest"),
                        restored_digest=h.get("restored_digest"))
    for op in sorted(invoked - outcome):
        rep.add("backup_failed", op=op, error="no outcome recorded")
    return compared
