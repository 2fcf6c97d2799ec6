"""Tenant quotas, enforced deterministically in the state machine.

- `max_jobs`: creating one more job is refused (`quota_exceeded`).
- `max_fires_per_minute`: fires counted per UTC minute of the nominal instant; a
  scheduled instant over the quota is recorded as skipped (`quota`), a manual trigger is
  refused (`rate_limited`).
- `max_concurrent_runs`: leases beyond it wait (they are not handed out).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from raftcron.core import errors
from raftcron.core.commands import PutTenant
from raftcron.state.context import ApplyContext, ok, rejected


@dataclass(frozen=True)
class Quotas:
    max_jobs: int | None = None
    max_concurrent_runs: int | None = None
    max_fires_per_minute: int | None = None


UNLIMITED = Quotas()


def put_tenant(ctx: ApplyContext, cmd: PutTenant) -> dict[str, Any]:
    ctx.conn.execute(
        "INSERT INTO tenants (name, max_jobs, max_concurrent_runs, max_fires_per_minute, "
        "updated_ms) VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
        "max_jobs = excluded.max_jobs, max_concurrent_runs = excluded.max_concurrent_runs, "
        "max_fires_per_minute = excluded.max_fires_per_minute, updated_ms = excluded.updated_ms",
        (cmd.name, cmd.max_jobs, cmd.max_concurrent_runs, cmd.max_fires_per_minute, cmd.now_ms),
    )
    return ok(tenant=cmd.name)


def quotas(conn: sqlite3.Connection, tenant: str, cache: dict[str, Quotas]) -> Quotas:
    if tenant not in cache:
        row = conn.execute(
            "SELECT max_jobs, max_concurrent_runs, max_fires_per_minute FROM tenants "
            "WHERE name = ?", (tenant,),
        ).fetchone()
        cache[tenant] = Quotas(*row) if row else UNLIMITED
    return cache[tenant]


def check_job_quota(conn: sqlite3.Connection, tenant: str) -> dict[str, Any] | None:
    q = quotas(conn, tenant, {})
    if q.max_jobs is None:
        return None
    count = conn.execute("SELECT count(*) FROM jobs WHERE tenant = ?", (tenant,)).fetchone()[0]
    if count >= q.max_jobs:
        return rejected(errors.QUOTA_EXCEEDED,
                        f"tenant {tenant!r} is at its max_jobs quota ({q.max_jobs})",
                        "tenant", quota="max_jobs")
    return None


class FireCounter:
    """Counts fires per (tenant, minute) within one apply, for tenants that have a quota."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.cache: dict[str, Quotas] = {}
        self.counts: dict[tuple[str, int], int] = {}

    def _key(self, tenant: str, instant_ms: int) -> tuple[str, int]:
        key = (tenant, instant_ms // 60_000)
        if key not in self.counts:
            row = self.conn.execute(
                "SELECT fires FROM tenant_fires WHERE tenant = ? AND minute = ?", key
            ).fetchone()
            self.counts[key] = row[0] if row else 0
        return key

    def has_room(self, tenant: str, instant_ms: int) -> bool:
        limit = quotas(self.conn, tenant, self.cache).max_fires_per_minute
        return limit is None or self.counts[self._key(tenant, instant_ms)] < limit

    def add(self, tenant: str, instant_ms: int) -> None:
        """Count one fire (only for tenants with a quota: others cost nothing)."""
        if quotas(self.conn, tenant, self.cache).max_fires_per_minute is None:
            return
        key = self._key(tenant, instant_ms)
        self.counts[key] += 1
        self.conn.execute(
            "INSERT INTO tenant_fires (tenant, minute, fires) VALUES (?, ?, 1) "
            "ON CONFLICT (tenant, minute) DO UPDATE SET fires = fires + 1", key,
        )

    def limit(self, tenant: str) -> int | None:
        return quotas(self.conn, tenant, self.cache).max_fires_per_minute


class RunLimiter:
    """Applies `max_concurrent_runs` while one Lease command hands out attempts."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.cache: dict[str, Quotas] = {}
        self.running: dict[str, int] = {}

    def allow(self, tenant: str) -> bool:
        limit = quotas(self.conn, tenant, self.cache).max_concurrent_runs
        if limit is None:
            return True
        if tenant not in self.running:
            self.running[tenant] = self.conn.execute(
                "SELECT count(*) FROM attempts WHERE status = 'running' AND tenant = ?",
                (tenant,),
            ).fetchone()[0]
        if self.running[tenant] >= limit:
            return False
        self.running[tenant] += 1
        return True
