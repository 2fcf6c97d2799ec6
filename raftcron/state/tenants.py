"""Tenant quotas, enforced deterministically in the state machine.

- `max_jobs`: creating one more job is refused (`quota_exceeded`).
- `max_schedules`: a job create or edit that would take the tenant's schedules (one per
  job, or the length of its `schedules`) past it is refused (`quota_exceeded`); an edit
  that adds none is never refused, even above a lowered quota.
- `max_pending_runs`: a backfill or manual trigger that would take the tenant's runs
  waiting to be leased (pending attempts) past it is refused (`rate_limited`: it passes
  as runs start, and a retry is applied afresh). Cron instants are not refused: a
  schedule's runs are bounded by the jobs and schedules quotas and `max_fires_per_minute`.
- `max_fires_per_minute`: fires counted per UTC minute of the nominal instant; a
  scheduled instant over the quota is recorded as skipped (`quota`), a manual trigger is
  refused (`rate_limited`).
- `max_concurrent_runs`: leases beyond it wait (they are not handed out).

From protocol level TENANT_QUOTAS_LEVEL on, a null `max_jobs`, `max_schedules` or
`max_pending_runs` is its default (core.tenant_policy.QUOTA_DEFAULTS): every tenant's
share of the replicated state is bounded. Below it a null quota is unlimited, and only
`max_jobs` of these is known, as the level-1 build decides (its rejections, which the
`requests` table keeps, are word for word the same).

The tenant policy (`queues`, `targets`, `http_hosts`; core.tenant_policy) is checked when
a job is created or edited, and again when a run is leased: a run of a job that a later
policy change put outside the policy is failed at lease time, never handed to a worker.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from raftcron.core import errors
from raftcron.core.commands import PutTenant
from raftcron.core.protocol import TENANT_QUOTAS_LEVEL
from raftcron.core.tenant_policy import (
    NO_POLICY,
    TenantPolicy,
    TenantQuotas,
    policy_from_row,
    schedule_count,
    spec_violation,
    url_violation,
)
from raftcron.state import tenant_usage
from raftcron.state.cluster_level import committed_level
from raftcron.state.context import ApplyContext, ok, rejected

Quotas = TenantQuotas
UNLIMITED = TenantQuotas()
QUOTAS_SELECT = ("SELECT max_jobs, max_concurrent_runs, max_fires_per_minute, max_schedules, "
                 "max_pending_runs FROM tenants WHERE name = ?")
# A tenant's jobs and schedules (core.tenant_policy.schedule_count), as the triggers of
# state.tenant_usage keep them.
USAGE_SQL = tenant_usage.USAGE_SQL
# A tenant's runs waiting to be leased (index att_tenant_pending).
PENDING_SQL = "SELECT count(*) FROM attempts WHERE tenant = ? AND status = 'pending'"


def _policy_json(value: list[str] | None) -> str | None:
    return None if value is None else json.dumps(list(value), separators=(",", ":"))


def put_tenant(ctx: ApplyContext, cmd: PutTenant) -> dict[str, Any]:
    ctx.conn.execute(
        "INSERT INTO tenants (name, max_jobs, max_concurrent_runs, max_fires_per_minute, "
        "updated_ms, queues, targets, http_hosts, max_schedules, max_pending_runs) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET "
        "max_jobs = excluded.max_jobs, max_concurrent_runs = excluded.max_concurrent_runs, "
        "max_fires_per_minute = excluded.max_fires_per_minute, updated_ms = excluded.updated_ms, "
        "queues = excluded.queues, targets = excluded.targets, http_hosts = excluded.http_hosts, "
        "max_schedules = excluded.max_schedules, max_pending_runs = excluded.max_pending_runs",
        (cmd.name, cmd.max_jobs, cmd.max_concurrent_runs, cmd.max_fires_per_minute, cmd.now_ms,
         _policy_json(cmd.queues), _policy_json(cmd.targets), _policy_json(cmd.http_hosts),
         cmd.max_schedules, cmd.max_pending_runs),
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
    """The tenant's quotas as stored (None: not set)."""
    if tenant not in cache:
        row = conn.execute(QUOTAS_SELECT, (tenant,)).fetchone()
        cache[tenant] = TenantQuotas(*row) if row else UNLIMITED
    return cache[tenant]


def defaults_apply(conn: sqlite3.Connection) -> bool:
    """Whether the committed level bounds every tenant's state (TENANT_QUOTAS_LEVEL)."""
    return committed_level(conn) >= TENANT_QUOTAS_LEVEL


def quotas_in_effect(conn: sqlite3.Connection, tenant: str) -> TenantQuotas:
    """The quotas that apply to the tenant now (its defaults from TENANT_QUOTAS_LEVEL)."""
    return quotas(conn, tenant, {}).in_effect(defaults_apply(conn))


class TenantUsage:
    """The jobs and schedules quotas while one command creates and edits jobs.

    Each tenant's counts are read once per command (state.tenant_usage) and kept up
    to date as the command creates jobs, so a batch of 250 jobs does not count the
    tenant's jobs 250 times."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.defaults = defaults_apply(conn)
        self.cache: dict[str, Quotas] = {}
        self.used: dict[str, list[int]] = {}  # tenant -> [jobs, schedules]

    def _quotas(self, tenant: str) -> TenantQuotas:
        return quotas(self.conn, tenant, self.cache).in_effect(self.defaults)

    def _used(self, tenant: str) -> list[int]:
        if tenant not in self.used:
            jobs, schedules = self.conn.execute(USAGE_SQL, (tenant,)).fetchone()
            self.used[tenant] = [int(jobs), int(schedules)]
        return self.used[tenant]

    def refuse_create(self, tenant: str, spec: dict[str, Any]) -> dict[str, Any] | None:
        """A `quota_exceeded` rejection for one more job of the tenant, or None."""
        q = self._quotas(tenant)
        if q.max_jobs is None and q.max_schedules is None:
            return None
        jobs, schedules = self._used(tenant)
        if q.max_jobs is not None and jobs >= q.max_jobs:
            message = f"tenant {tenant!r} is at its max_jobs quota ({q.max_jobs})"
            if not self.defaults:  # the level-1 build's words: its requests rows keep them
                return rejected(errors.QUOTA_EXCEEDED, message, "tenant", quota="max_jobs")
            return rejected(errors.QUOTA_EXCEEDED, message, "tenant", quota="max_jobs",
                            limit=q.max_jobs, used=jobs, requested=1)
        return self._refuse_schedules(tenant, q, schedule_count(spec))

    def refuse_edit(self, tenant: str, old_spec: dict[str, Any], new_spec: dict[str, Any]
                    ) -> dict[str, Any] | None:
        """A `quota_exceeded` rejection for an edit that adds schedules past the quota."""
        added = schedule_count(new_spec) - schedule_count(old_spec)
        if added <= 0:
            return None
        return self._refuse_schedules(tenant, self._quotas(tenant), added)

    def _refuse_schedules(self, tenant: str, q: TenantQuotas, added: int
                          ) -> dict[str, Any] | None:
        if q.max_schedules is None:
            return None
        schedules = self._used(tenant)[1]
        if schedules + added <= q.max_schedules:
            return None
        return rejected(errors.QUOTA_EXCEEDED,
                        f"tenant {tenant!r} has {schedules:,} of the {q.max_schedules:,} "
                        f"schedules its max_schedules quota allows: {added:,} more do not fit",
                        "schedules", quota="max_schedules", limit=q.max_schedules,
                        used=schedules, requested=added)

    def created(self, tenant: str, spec: dict[str, Any]) -> None:
        if tenant in self.used:
            self.used[tenant][0] += 1
            self.used[tenant][1] += schedule_count(spec)

    def edited(self, tenant: str, old_spec: dict[str, Any], new_spec: dict[str, Any]) -> None:
        if tenant in self.used:
            self.used[tenant][1] += schedule_count(new_spec) - schedule_count(old_spec)


def check_job_quota(conn: sqlite3.Connection, tenant: str,
                    spec: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """`TenantUsage.refuse_create` for one job."""
    return TenantUsage(conn).refuse_create(tenant, spec or {})


def pending_runs(conn: sqlite3.Connection, tenant: str) -> int:
    return int(conn.execute(PENDING_SQL, (tenant,)).fetchone()[0])


def refuse_pending(conn: sqlite3.Connection, tenant: str, adding: int
                   ) -> dict[str, Any] | None:
    """A `rate_limited` rejection (quota `max_pending_runs`) when `adding` more pending
    runs would take the tenant past its quota; None when they fit, or below
    TENANT_QUOTAS_LEVEL (the level-1 build has no such quota)."""
    if adding <= 0 or not defaults_apply(conn):
        return None
    limit = quotas_in_effect(conn, tenant).max_pending_runs
    if limit is None:
        return None
    return pending_refusal(tenant, pending_runs(conn, tenant), adding, limit)


def pending_refusal(tenant: str, pending: int, adding: int, limit: int | None
                    ) -> dict[str, Any] | None:
    """The `max_pending_runs` rejection for `adding` more runs beside `pending` (None: they
    fit). The API's check before it proposes a backfill answers the same."""
    if limit is None or adding <= 0 or pending + adding <= limit:
        return None
    return rejected(errors.RATE_LIMITED,
                    f"tenant {tenant!r} has {pending:,} of the {limit:,} runs waiting to "
                    f"start its max_pending_runs quota allows: {adding:,} more do not fit",
                    "tenant",
                    quota="max_pending_runs", limit=limit, used=pending, requested=adding)


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
