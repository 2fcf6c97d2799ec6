"""Opening the state database and small helpers over the `meta` table."""

from __future__ import annotations

import sqlite3
from importlib import resources

META_LAST_APPLIED = "last_applied_index"
META_EPOCH = "epoch"
META_CLOCK = "clock_ms"
META_FENCING_SEQ = "fencing_seq"


def schema_sql() -> str:
    return resources.files("raftcron.state").joinpath("schema.sql").read_text()


def open_writer(path: str) -> sqlite3.Connection:
    """The single writer connection (used only by the Raft tick thread)."""
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("PRAGMA cache_size=-65536")
    conn.executescript(schema_sql())
    return conn


def open_reader(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    conn.execute("PRAGMA query_only=ON")
    return conn


def get_meta(conn: sqlite3.Connection, key: str, default: int = 0) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return int(row[0]) if row else default


def set_meta(conn: sqlite3.Connection, key: str, value: int) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def last_applied(conn: sqlite3.Connection) -> int:
    return get_meta(conn, META_LAST_APPLIED)
