"""Tenant quotas, enforced deterministically in the state machine.

- `max_jobs`: creating one more job is refused (`quota_exceeded`).
- `max_fires_per_minute`: fires counted per UTC minute of the nominal instant; a
  scheduled instant over the quota is recorded as skipped (`quota`), a manual trigger is
  refused (`rate_limited`).
- `max_concurrent_runs`: leases beyond it wait (they are not handed out).

The tenant policy (`queues`, `targets`, `http_hosts`; core.tenant_policy) is checked when
a job is created or edited, and again when a run is leased: a run of a job that a later
policy change put outside the policy is failed at lease time, never handed to a worker.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from raftcron.core import errors
from raftcron.core.commands import PutTenant
from raftcron.core.tenant_policy import (
    NO_POLICY,
    TenantPolicy,
    policy_from_row,
    spec_violation,
    url_violation,
)
from raftcron.state.context import ApplyContext, ok, rejected


@dataclass(frozen=True)
class Quotas:
    max_jobs: int | None = None
    max_concurrent_runs: int | None = None
    max_fires_per_minute: int | None = None


UNLIMITED = Quotas()


def _policy_json(value: list[str] | None) -> str | None:
    return None if value is None else json.dumps(list(value), separators=(",", ":"))


def put_tenant(ctx: ApplyContext, cmd: PutTenant) -> dict[str, Any]:
    ctx.conn.execute(
        "INSERT INTO tenants (name, max_jobs, max_concurrent_runs, max_fires_per_minute, "
        "updated_ms, queues, targets, http_hosts) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET "
        "max_jobs = excluded.max_jobs, max_concurrent_runs = excluded.max_concurrent_runs, "
        "max_fires_per_minute = excluded.max_fires_per_minute, updated_ms = excluded.updated_ms, "
        "queues = excluded.queues, targets = excluded.targets, http_hosts = excluded.http_hosts",
        (cmd.name, cmd.max_jobs, cmd.max_concurrent_runs, cmd.max_fires_per_minute, cmd.now_ms,
         _policy_json(cmd.queues), _policy_json(cmd.targets), _policy_json(cmd.http_hosts)),
    )
    return ok(tenant=cmd.name)


def policy_of(conn: sqlite3.Connection, tenant: str,
           cache: dict[str, TenantPolicy] | None = None) -> TenantPolicy:
    """The tenant's committed policy (NO_POLICY for a tenant without a row or policy)."""
    if cache is not None and tenant in cache:
        return cache[tenant]
    row = conn.execute("SELECT queues, targets, http_hosts FROM tenants WHERE name = ?",
                       (tenant,)).fetchone()
    found = policy_from_row(*row) if row else NO_POLICY
    if cache is not None:
        cache[tenant] = found
    return found


def check_job_policy(conn: sqlite3.Connection, tenant: str, spec: dict[str, Any],
                     cache: dict[str, TenantPolicy] | None = None) -> dict[str, Any] | None:
    """A `policy_denied` rejection naming the field, or None when the job is allowed."""
    violation = spec_violation(policy_of(conn, tenant, cache), spec)
    if violation is None:
        return None
    return rejected(errors.POLICY_DENIED, f"tenant {tenant!r} policy refuses "
                    f"{violation.field}: {violation.message}", violation.field)


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


def allowed_notify_urls(conn: sqlite3.Connection, tenant: str, urls: tuple[str, ...]
                        ) -> tuple[str, ...]:
    """The job's `notify` URLs its tenant's current policy lets the leader reach."""
    current = policy_of(conn, tenant)
    return tuple(u for u in urls if url_violation(current, u) is None)
