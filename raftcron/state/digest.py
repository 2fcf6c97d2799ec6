"""A canonical digest of the logical state, equal on nodes that applied the same index."""

from __future__ import annotations

import hashlib
import json
import sqlite3

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
}


def digest(conn: sqlite3.Connection) -> str:
    h = hashlib.sha256()
    for table, order in TABLES.items():
        h.update(f"\x00{table}\x00".encode())
        where = " WHERE key != 'last_applied_index'" if table == "meta" else ""
        for row in conn.execute(f"SELECT * FROM {table}{where} ORDER BY {order}"):
            h.update(json.dumps(row, separators=(",", ":")).encode())
            h.update(b"\n")
    return h.hexdigest()
