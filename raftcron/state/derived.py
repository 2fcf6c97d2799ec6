"""Tables derived from `jobs` by triggers (state.job_search, state.tenant_usage).

Each is kept in the apply that changes a job, carried by snapshots, and left out of the
digest. A database written before such a table existed (or installed from the snapshot of
a node that had none) gets it created and filled when it is opened: `ensure`, called from
state.db.ensure_schema.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass


@dataclass(frozen=True)
class DerivedTable:
    name: str
    statements: tuple[str, ...]
    """Create the table and its triggers; each idempotent (IF EXISTS / IF NOT EXISTS)."""
    fill_sql: str
    """Fill the new table from `jobs` as the triggers would have kept it."""

    def ensure(self, conn: sqlite3.Connection) -> None:
        """Create the table and its triggers; fill it when it is new (an older database)."""
        existed = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                               "AND name = ?", (self.name,)).fetchone() is not None
        for statement in self.statements:
            conn.execute(statement)
        if not existed:
            conn.execute(self.fill_sql)
