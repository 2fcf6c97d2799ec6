"""What a command handler sees while it is applied."""

from __future__ import annotations

import functools
import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from raftcron.state.db import META_OUTBOX_SEQ, get_meta, set_meta


@dataclass
class ApplyContext:
    conn: sqlite3.Connection
    index: int

    def meta(self, key: str, default: int = 0) -> int:
        return get_meta(self.conn, key, default)

    def set_meta(self, key: str, value: int) -> None:
        set_meta(self.conn, key, value)

    def enqueue_outbox(self, event: str, payload: dict[str, Any], now_ms: int) -> None:
        """Transactional outbox: the row commits with the state change that caused it.

        Row ids come from a counter in `meta`, not from SQLite's rowid, which would hand
        the id of a pruned row out again (receivers deduplicate deliveries on it). The
        counter never goes below the table's largest id: rows a version without it
        inserted (before it, or after a rollback) keep theirs."""
        seq = max(self.meta(META_OUTBOX_SEQ), self.conn.execute(
            "SELECT coalesce(max(id), 0) FROM outbox").fetchone()[0])
        self.conn.execute(
            "INSERT INTO outbox (id, event, payload, status, created_ms) "
            "VALUES (?, ?, ?, 'pending', ?)",
            (seq + 1, event, json.dumps(payload, sort_keys=True, separators=(",", ":")),
             now_ms),
        )
        self.set_meta(META_OUTBOX_SEQ, seq + 1)


def ok(**fields: Any) -> dict[str, Any]:
    return {"ok": True, **fields}


def rejected(code: str, message: str, field: str | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"ok": False, "rejected": code, "message": message}
    if field:
        out["field"] = field
    out.update(extra)
    return out


@functools.lru_cache(maxsize=200_000)
def parse_spec(spec_json: str) -> dict[str, Any]:
    """Job specs are immutable strings: parse each distinct one once. Callers must not
    mutate the returned dict."""
    return json.loads(spec_json)
