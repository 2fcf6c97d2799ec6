"""What a command handler sees while it is applied."""

from __future__ import annotations

import functools
import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from raftcron.state.db import get_meta, set_meta


@dataclass
class ApplyContext:
    conn: sqlite3.Connection
    index: int

    def meta(self, key: str, default: int = 0) -> int:
        return get_meta(self.conn, key, default)

    def set_meta(self, key: str, value: int) -> None:
        set_meta(self.conn, key, value)

    def enqueue_outbox(self, event: str, payload: dict[str, Any], now_ms: int) -> None:
        """Transactional outbox: the row commits with the state change that caused it."""
        self.conn.execute(
            "INSERT INTO outbox (event, payload, status, created_ms) VALUES (?, ?, 'pending', ?)",
            (event, json.dumps(payload, sort_keys=True, separators=(",", ":")), now_ms),
        )


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
