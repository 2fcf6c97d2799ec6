"""Opening the state database and small helpers over the `meta` table."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any, TypeVar

from raftcron.state import job_search, tenant_usage

DERIVED_TABLES = (job_search.TABLE, tenant_usage.TABLE)

T = TypeVar("T")

META_LAST_APPLIED = "last_applied_index"
META_EPOCH = "epoch"
META_CLOCK = "clock_ms"
META_FENCING_SEQ = "fencing_seq"
META_OUTBOX_SEQ = "outbox_seq"
META_UNACKED_LEASES = "leases_unacknowledged"
# The protocol level the cluster committed (core.protocol); absent: level 1.
META_CLUSTER_LEVEL = "cluster_level"

# Columns added to tables after databases were first written: (table, column, definition).
# `CREATE TABLE IF NOT EXISTS` leaves an existing table as it is, so these are added to
# older databases when they are opened, at the end of the table as in schema.sql (the
# digest reads `SELECT *`: old and new databases must have the same column order).
COLUMN_MIGRATIONS: tuple[tuple[str, str, str], ...] = (
    ("attempts", "ack_deadline_ms", "INTEGER"),
    ("attempts", "acked_ms", "INTEGER"),
    ("attempts", "unacked_releases", "INTEGER NOT NULL DEFAULT 0"),
    ("attempts", "release_reason", "TEXT"),
    ("tenants", "queues", "TEXT"),
    ("tenants", "targets", "TEXT"),
    ("tenants", "http_hosts", "TEXT"),
    ("alerts", "acked_ms", "INTEGER"),
    ("alerts", "acked_by", "TEXT"),
    ("alerts", "ack_note", "TEXT"),
    ("occurrences", "schedules", "TEXT"),
    ("alerts", "cause", "TEXT"),
    ("tenants", "max_schedules", "INTEGER"),
    ("tenants", "max_pending_runs", "INTEGER"),
    ("attempts", "started_ms", "INTEGER"),
    ("occurrences", "upstream", "TEXT"),
    ("occurrences", "upstream_outcome", "TEXT"),
    ("outbox_deliveries", "held_ms", "INTEGER"),
)
# Indexes on columns that COLUMN_MIGRATIONS may add: created after it.
MIGRATED_INDEXES = (
    # Invariant 1 for chains: at most one run of a chained job per upstream occurrence.
    "CREATE UNIQUE INDEX IF NOT EXISTS occ_chained ON occurrences (job_id, upstream) "
    "WHERE upstream IS NOT NULL",
)


# UPDATE ... FROM (state.bulk_claim) arrived in SQLite 3.33 (2020).
MIN_SQLITE = (3, 33, 0)


def sqlite_too_old(version: tuple[int, int, int] = sqlite3.sqlite_version_info) -> str | None:
    """Why this Python's SQLite library cannot hold the state, or None when it can."""
    if version >= MIN_SQLITE:
        return None
    need, have = ".".join(map(str, MIN_SQLITE)), ".".join(map(str, version))
    return f"raftcron needs SQLite {need} or newer; this Python uses SQLite {have}"


def schema_sql() -> str:
    return resources.files("raftcron.state").joinpath("schema.sql").read_text()


def open_writer(path: str, schema: str | None = None) -> sqlite3.Connection:
    """The single writer connection (used only by the Raft tick thread). `schema` replaces
    the product's schema (benchmarks compare other table layouts with the same settings)."""
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("PRAGMA cache_size=-65536")
    # Sorts and large transactions spill to memory, never to a temporary file: an apply
    # must not depend on opening a file when descriptors run short.
    conn.execute("PRAGMA temp_store=MEMORY")
    # Checkpoints run on a background connection (see Checkpointer), not inside the
    # COMMIT of whichever apply happened to cross the WAL threshold.
    conn.execute("PRAGMA wal_autocheckpoint=0")
    if schema is None:
        ensure_schema(conn)
    else:
        conn.executescript(schema)
    return conn


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create missing tables and indexes, and add the columns an older database lacks."""
    conn.executescript(schema_sql())
    add_missing_columns(conn)
    for statement in MIGRATED_INDEXES:
        conn.execute(statement)
    for table in DERIVED_TABLES:
        table.ensure(conn)


def add_missing_columns(conn: sqlite3.Connection) -> None:
    """Bring a database written by an earlier version up to the current columns.

    Rows that predate a column get its default (NULL): an attempt leased before explicit
    delivery existed has no acknowledgement deadline and is treated as delivered; a tenant
    from before policies has none (any queue, target and host)."""
    for table, column, definition in COLUMN_MIGRATIONS:
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if have and column not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")


class Checkpointer:
    """Copies WAL pages into the database file every `period_s` seconds off the apply path.

    A PASSIVE checkpoint never blocks the writer or readers; if readers pin old pages the
    WAL simply grows until the next round. A TRUNCATE is attempted when the WAL is large.
    """

    def __init__(self, path: str, period_s: float = 1.0, truncate_pages: int = 20_000) -> None:
        self.path = path
        self.period_s = period_s
        self.truncate_pages = truncate_pages
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wal-checkpoint", daemon=True)

    def start(self) -> Checkpointer:
        self._thread.start()
        return self

    def _run(self) -> None:
        # timeout=0: a TRUNCATE waiting for readers holds the WAL write lock, which would
        # stall the Raft thread's next apply (a snapshot copy pins a reader for seconds);
        # busy now means "try again next round".
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                               timeout=0)
        try:
            while not self._stop.wait(self.period_s):
                try:
                    _, wal_pages, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if wal_pages > self.truncate_pages:
                        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.OperationalError:
                    continue  # busy: try again next round
        finally:
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


def open_reader(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    conn.execute("PRAGMA query_only=ON")
    conn.execute("PRAGMA temp_store=MEMORY")
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


class ThreadReader:
    """A read connection owned by one worker thread, for duties that query off the event loop.

    Every query and the final close run on that thread, in order. With `asyncio.to_thread`
    and a connection closed in the task's `finally`, cancelling the task (leadership lost)
    closed the connection while the worker thread was still inside a query on it: a
    use-after-free in SQLite that killed the node with SIGSEGV (found by the soak).
    """

    def __init__(self, open_reader: Callable[[], sqlite3.Connection], name: str) -> None:
        self._open = open_reader
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._conn: sqlite3.Connection | None = None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(conn, *args)` on the reader's thread."""
        return await asyncio.wrap_future(self._pool.submit(self._call, fn, args))

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self._conn is None:
            self._conn = self._open()
        return fn(self._conn, *args)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        """Close after whatever is running or queued; does not wait."""
        self._pool.submit(self._close)
        self._pool.shutdown(wait=False)
