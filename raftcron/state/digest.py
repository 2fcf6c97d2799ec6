"""A canonical digest of the logical state, equal on nodes that applied the same index."""

from __future__ import annotations

import hashlib
import json
import sqlite3

from raftcron.state.db import COLUMN_MIGRATIONS

# table -> ORDER BY clause (its primary key)
TABLES = {
    "meta": "key",
    "epochs": "epoch",
    "jobs": "id",
    "occurrences": "id",
    "attempts": "id",
    "requests": "request_id",
    "alerts": "id",
    "outbox": "id",
    "alert_events": "id",
    "tenants": "name",
    "tenant_fires": "tenant, minute",
    "cluster_members": "id",
    "outbox_deliveries": "outbox_id, receiver",
    "webhook_keys": "owner",
    "alert_actions": "id",
    "cluster_availability": "id",
    "failure_streaks": "job_id",
    "cancellations": "occurrence_id",
    "concurrency_groups": "tenant, name",
    "calendars": "name",
    "job_pause_notes": "job_id",
    "job_history": "job_id, seq",
    "channels": "name",
    "channel_trouble": "job_id",
}
# Tables added after databases were first written: hashed only once they hold a row, so a
# node of the previous version (no such table) and an upgraded one digest alike until then.
ADDED_TABLES = frozenset({"alert_actions", "cluster_availability", "failure_streaks",
                          "cancellations", "concurrency_groups", "calendars",
                          "job_pause_notes", "job_history", "channels",
                          "channel_trouble"})


def _canonical(row: tuple, added: int) -> tuple:
    """A row without its trailing NULLs in columns added by a later version: a node of
    the previous version (no such columns) and an upgraded one digest alike until a new
    field is set, so a rolling upgrade can still wait for equal digests."""
    end = len(row)
    while added and end > 0 and row[end - 1] is None:
        end -= 1
        added -= 1
    return row[:end]


def _empty_or_absent(conn: sqlite3.Connection, table: str) -> bool:
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                    (table,)).fetchone() is None:
        return True
    return conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is None


def digest(conn: sqlite3.Connection) -> str:
    h = hashlib.sha256()
    for table, order in TABLES.items():
        if table in ADDED_TABLES and _empty_or_absent(conn, table):
            continue
        h.update(f"\x00{table}\x00".encode())
        where = " WHERE key != 'last_applied_index'" if table == "meta" else ""
        cursor = conn.execute(f"SELECT * FROM {table}{where} ORDER BY {order}")
        names = [d[0] for d in cursor.description]
        added = sum(1 for t, c, _ in COLUMN_MIGRATIONS if t == table and c in names)
        for row in cursor:
            h.update(json.dumps(_canonical(row, added), separators=(",", ":")).encode())
            h.update(b"\n")
    return h.hexdigest()
