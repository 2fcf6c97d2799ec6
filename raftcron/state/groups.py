"""Concurrency groups: at most `limit` runs of a tenant's jobs naming a group hold leases
at once, across all workers.

The limit is enforced by the `Lease` command at apply time (`GroupLimiter`), on the
committed state: two leaders, or a replayed log, cannot hand out more. A group is a
tenant's own: the same name in two tenants is two groups, so no tenant can fill another's.
A job may name a group nobody has set: its limit is then DEFAULT_LIMIT (fail closed: a
forgotten PUT does not mean "unlimited").
"""

from __future__ import annotations

import sqlite3
from typing import Any

from raftcron.core.commands import PutConcurrencyGroup
from raftcron.state.context import ApplyContext, ok

DEFAULT_LIMIT = 1
GROUP_OF_SPEC = "json_extract(spec, '$.concurrency_group')"
# Running attempts of the jobs of one group (tenant, name).
# Running attempts of the jobs of one group (tenant, name): read from the running
# attempts (bounded by the workers' slots), not from the tenant's jobs (unbounded).
RUNNING_IN_GROUP = (
    "SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job_id "
    "WHERE a.status = 'running' AND a.tenant = ?1 AND j.tenant = ?1 "
    "AND json_extract(j.spec, '$.concurrency_group') = ?2"
)


def put_group(ctx: ApplyContext, cmd: PutConcurrencyGroup) -> dict[str, Any]:
    ctx.conn.execute(
        "INSERT INTO concurrency_groups (tenant, name, max_running, updated_ms) "
        "VALUES (?, ?, ?, ?) ON CONFLICT (tenant, name) DO UPDATE SET "
        "max_running = excluded.max_running, updated_ms = excluded.updated_ms",
        (cmd.tenant, cmd.name, cmd.limit, cmd.now_ms))
    return ok(tenant=cmd.tenant, name=cmd.name, limit=cmd.limit)


def group_limit(conn: sqlite3.Connection, tenant: str, name: str) -> int:
    row = conn.execute("SELECT max_running FROM concurrency_groups WHERE tenant = ? "
                       "AND name = ?", (tenant, name)).fetchone()
    return DEFAULT_LIMIT if row is None else int(row[0])


class GroupLimiter:
    """Applies group limits while one Lease command hands out attempts."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.running: dict[tuple[str, str], int] = {}
        self.limits: dict[tuple[str, str], int] = {}

    def allow(self, tenant: str, group: str | None) -> bool:
        """Take a slot of the group (True), or say it is full (False)."""
        if group is None:
            return True
        key = (tenant, group)
        if key not in self.running:
            self.limits[key] = group_limit(self.conn, tenant, group)
            self.running[key] = self.conn.execute(RUNNING_IN_GROUP, key).fetchone()[0]
        if self.running[key] >= self.limits[key]:
            return False
        self.running[key] += 1
        return True

    def give_back(self, tenant: str, group: str | None) -> None:
        """A slot taken by `allow` that the attempt did not use after all."""
        if group is not None:
            self.running[(tenant, group)] -= 1
