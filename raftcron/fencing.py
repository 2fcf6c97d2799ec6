"""Fencing tokens for a job's own datastore. This is the public client library for
downstream stores: a job's own code imports it (`from raftcron.fencing import FencedStore`,
or `fenced_write`), wherever the job writes from. It is no part of the node or the worker,
so it stands alone at the top of the package, in no layer, and imports nothing else of
raftcron.

raftcron gives every lease a fencing token that is strictly greater than any token
issued before it. A worker that stalls (GC pause, network partition) can lose its lease
while its job keeps running, and a newer attempt may then run the same occurrence. Such
a zombie run can only be stopped from doing damage at the place it writes to: the store
must refuse writes carrying a token lower than the highest it has already seen for that
key. This module implements that check over sqlite3, atomically with the caller's write.

Use the idempotency key (stable across all attempts of one occurrence) or a resource
name as the key; equal tokens are accepted, so the same attempt may write repeatedly.

Example job script (the worker sets both variables for shell targets)::

    import os, sqlite3
    from raftcron.fencing import fenced_write

    token = int(os.environ["RAFTCRON_FENCING_TOKEN"])
    key = os.environ["RAFTCRON_IDEMPOTENCY_KEY"]

    conn = sqlite3.connect("/var/lib/billing/billing.db", timeout=30)
    accepted, _ = fenced_write(
        conn, key, token,
        lambda c: c.execute("INSERT INTO invoices (run_key, total) VALUES (?, ?)",
                            (key, 42)),
    )
    if not accepted:
        raise SystemExit("a newer attempt owns this run; not writing")

Or, when only the check is needed (the write happens elsewhere, with its own
idempotency)::

    from raftcron.fencing import FencedStore

    with FencedStore("/var/lib/billing/fencing.db") as store:
        if not store.accept("nightly-report", token):
            raise SystemExit("stale fencing token")
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

TABLE = "raftcron_fencing"

_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    "key TEXT PRIMARY KEY, token INTEGER NOT NULL) WITHOUT ROWID"
)
_UPSERT = (
    f"INSERT INTO {TABLE} (key, token) VALUES (?, ?) "
    "ON CONFLICT (key) DO UPDATE SET token = excluded.token "
    f"WHERE excluded.token >= {TABLE}.token"
)


def ensure_table(conn: sqlite3.Connection) -> None:
    """Create the fencing table if it does not exist (idempotent).

    Outside a transaction this takes effect at once; inside one it commits with it.
    """
    conn.execute(_CREATE)


def _check_args(key: str, token: int) -> None:
    if not isinstance(key, str) or not key:
        raise ValueError("key must be a non-empty string")
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError("token must be an int")


def fenced_write(
    conn: sqlite3.Connection,
    key: str,
    token: int,
    fn: Callable[[sqlite3.Connection], T] | None = None,
) -> tuple[bool, T | None]:
    """Record `token` for `key` and run `fn(conn)` in the same transaction, if accepted.

    Returns `(True, fn's result)` when `token` is at least the highest token seen for
    `key`, and `(False, None)` otherwise (then `fn` is not called and nothing is written).
    If `fn` raises, the token update is rolled back along with the write.

    On a connection with no open transaction this runs `BEGIN IMMEDIATE … COMMIT`, so the
    check and the write are one atomic step even with other writers. Inside a transaction
    the caller already opened, it uses a savepoint and leaves the commit to the caller.
    The fencing table must exist (`ensure_table`, or `FencedStore` creates it).
    """
    _check_args(key, token)
    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN IMMEDIATE")
    else:
        conn.execute("SAVEPOINT raftcron_fence")
    try:
        accepted = conn.execute(_UPSERT, (key, token)).rowcount > 0
        result = fn(conn) if accepted and fn is not None else None
    except BaseException:
        if own:
            conn.rollback()
        else:
            conn.execute("ROLLBACK TO SAVEPOINT raftcron_fence")
            conn.execute("RELEASE SAVEPOINT raftcron_fence")
        raise
    if own:
        conn.commit()
    else:
        conn.execute("RELEASE SAVEPOINT raftcron_fence")
    return accepted, result


class FencedStore:
    """The highest fencing token seen per key, kept in an sqlite3 database file.

    `path` may be the job's own database, so that `write` can update the job's tables
    and the token in one transaction. Not thread-safe; use one store per thread.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 30.0) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, timeout=timeout_s)
        ensure_table(self.conn)

    def accept(self, key: str, token: int) -> bool:
        """True (and `token` recorded) if `token` >= the highest seen for `key`."""
        accepted, _ = fenced_write(self.conn, key, token)
        return accepted

    def write(
        self, key: str, token: int, fn: Callable[[sqlite3.Connection], T]
    ) -> tuple[bool, T | None]:
        """`fenced_write` on this store's connection."""
        return fenced_write(self.conn, key, token, fn)

    def highest(self, key: str) -> int | None:
        """The highest token accepted for `key`, or None if there was none."""
        row = self.conn.execute(f"SELECT token FROM {TABLE} WHERE key = ?", (key,)).fetchone()
        return None if row is None else int(row[0])

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> FencedStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
