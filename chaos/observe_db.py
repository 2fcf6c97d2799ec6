"""One member's own state, read from its SQLite file: what the observer records.

The observer (chaos/observer.py) must see, before retention prunes it, every occurrence
of its band *and every attempt of each* (status, fencing token, worker, times), on every
member: the fencing, duplicate, rerun and group checks need the attempts of the whole run,
and a final read holds only its last two minutes. Through the HTTP API that is one request
per occurrence (some 1,500 a band, on every member, every 15 s: load enough on two shared
cores to disturb the run it measures). The state file holds it all: one read-only
transaction answers the band's occurrences and their attempts at once, from the member's
own applied state (a lagging member shows its lag; that is the point of reading each one).

Read-only (`mode=ro`): the reader never checkpoints or removes a node's WAL, and a WAL
left by a killed node that needs recovery is an error for that observation (the next one,
15 s later, reads the restarted node).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from raftcron.core.chains import upstream_of
from raftcron.core.timefmt import ms_to_iso

OCC_SQL = (
    "SELECT id, job_id, tenant, queue, kind, scheduled_for_ms, dispatch_at_ms, job_version, "
    "status, reason, idempotency_key, attempts, epoch, created_ms, finished_ms, schedules, "
    "upstream, upstream_outcome FROM occurrences "
    "WHERE scheduled_for_ms >= ? AND scheduled_for_ms <= ? ORDER BY id")
ATT_SQL = (
    "SELECT a.id, a.occurrence_id, a.number, a.status, a.not_before_ms, a.worker_id, "
    "a.fencing_token, a.leased_ms, a.heartbeat_ms, a.finished_ms, a.exit_code, a.error, "
    "a.unacked_releases "
    "FROM attempts a JOIN occurrences o ON a.occurrence_id = o.id "
    "WHERE o.scheduled_for_ms >= ? AND o.scheduled_for_ms <= ? ORDER BY a.id")


def db_path(nodes_dir: Path, nid: str) -> Path:
    """Where node `nid` keeps its state (chaos/procs.write_node_config: data_dir = nid)."""
    return nodes_dir / nid / "state.db"


def _occurrence(r: tuple[Any, ...]) -> dict[str, Any]:
    # As the API shows them: a chained job's run (stored as manual) names its upstream.
    return {"id": r[0], "job_id": r[1], "tenant": r[2], "queue": r[3],
            "kind": "chained" if r[16] else r[4],
            "scheduled_for": ms_to_iso(r[5]), "dispatch_at": ms_to_iso(r[6]),
            "job_version": r[7], "status": r[8], "reason": r[9], "idempotency_key": r[10],
            "attempts": r[11], "epoch": r[12], "created_at": ms_to_iso(r[13]),
            "finished_at": ms_to_iso(r[14]),
            "schedules": json.loads(r[15]) if r[15] else None,
            "upstream": upstream_of(r[16], r[17])}


def _attempt(r: tuple[Any, ...]) -> dict[str, Any]:
    return {"id": r[0], "number": r[2], "status": r[3], "not_before": ms_to_iso(r[4]),
            "worker_id": r[5], "fencing_token": r[6], "leased_at": ms_to_iso(r[7]),
            "heartbeat_at": ms_to_iso(r[8]), "finished_at": ms_to_iso(r[9]),
            "exit_code": r[10], "error": r[11], "unacknowledged_releases": r[12]}


def read_band(path: Path, since: float, until: float) -> tuple[list[dict[str, Any]],
                                                                 dict[str, list[dict]]]:
    """The occurrences whose instant lies in [since, until] (epoch s), and occurrence id ->
    its attempts (by number), from one consistent snapshot of the file. Raises
    sqlite3.Error or OSError when the file cannot be read."""
    if not path.exists():
        raise FileNotFoundError(str(path))
    lo, hi = int(since * 1000), int(until * 1000)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2.0)
    try:
        conn.execute("BEGIN")
        occs = [_occurrence(r) for r in conn.execute(OCC_SQL, (lo, hi))]
        attempts: dict[str, list[dict[str, Any]]] = {}
        for r in conn.execute(ATT_SQL, (lo, hi)):
            attempts.setdefault(r[1], []).append(_attempt(r))
        conn.execute("COMMIT")
    finally:
        conn.close()
    for lst in attempts.values():
        lst.sort(key=lambda a: a["number"])
    return occs, attempts
