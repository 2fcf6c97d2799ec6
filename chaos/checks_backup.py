"""The backup -> restore check's outcome (chaos/backup_check.py), failing closed:

- backup_missing: a real run (meta.json names its profile) holds no backup check;
- backup_failed: the backup or the restore failed, or the check recorded no outcome;
- backup_digest_mismatch: the backup's digest differs from the digest the source node
  reported at the backup's index, or the restored state's digest differs from the
  backup's with the member records left out (a restore drops them by design).
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
            if not _digests_agree(h):
                rep.add("backup_digest_mismatch", op=h["op"], node=h.get("node"),
                        index=h.get("index"), cluster_digest=h.get("cluster_digest"),
                        backup_digest=h.get("backup_digest"),
                        backup_digest_without_members=h.get(
                            "backup_digest_without_members"),
                        restored_digest=h.get("restored_digest"))
    for op in sorted(invoked - outcome):
        rep.add("backup_failed", op=op, error="no outcome recorded")
    return compared


def _digests_agree(h: dict[str, Any]) -> bool:
    """The source's digest at N is the backup's, and the restored digest is the backup's
    without the member records (which a restore drops). A line written before the backup's
    own digests were recorded compares the source's digest with the restored one."""
    cluster, restored = h.get("cluster_digest"), h.get("restored_digest")
    if not cluster or not restored:
        return False
    if "backup_digest" not in h:
        return cluster == restored
    return h["backup_digest"] == cluster and h.get("backup_digest_without_members") == restored
