"""Commands that carry a `request_id`: a retried proposal whose first outcome was unknown
(leader change) returns the stored result instead of applying twice (all but `Barrier`, a
no-op). Most are a client's request through the API (jobs, calendars, tenants, alerts,
runs, concurrency groups); a node proposes a few itself the same way (`Barrier`, the
retention duty's `Prune`, the first cluster `SetWebhookKey`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from raftcron.core.command_base import Command, without_none


@dataclass(frozen=True, slots=True)
class PutJob(Command):
    TYPE: ClassVar[str] = "put_job"
    request_id: str
    now_ms: int
    job: dict[str, Any]
    create: bool
    expected_version: int | None = None
    # A hash of the request (principal, method, path, canonical body) when the client sent
    # an Idempotency-Key: the same request id with another hash is refused, not replayed.
    # None: no key, or an entry written before this field.
    request_hash: str | None = None
    # Who asked (the principal's identity), kept in the job's history (state.job_history).
    # None: an entry written before this field, or a command no principal sent.
    who: str | None = None

    def args(self) -> dict[str, Any]:
        return without_none(self, "who")


@dataclass(frozen=True, slots=True)
class CreateJobs(Command):
    """Create many jobs in one entry (a crontab import): each one is created unless its
    id exists or its tenant is at the job quota; the result lists the outcome of each."""

    TYPE: ClassVar[str] = "create_jobs"
    request_id: str
    now_ms: int
    jobs: list[dict[str, Any]]
    # A hash of the request (principal, method, path, canonical body) when the client sent
    # an Idempotency-Key: the same request id with another hash is refused, not replayed.
    # None: no key, or an entry written before this field.
    request_hash: str | None = None
    # Who asked (the principal's identity), kept in the job's history (state.job_history).
    # None: an entry written before this field, or a command no principal sent.
    who: str | None = None

    def args(self) -> dict[str, Any]:
        return without_none(self, "who")


@dataclass(frozen=True, slots=True)
class DeleteJob(Command):
    TYPE: ClassVar[str] = "delete_job"
    request_id: str
    now_ms: int
    job_id: str
    expected_version: int | None = None
    # A hash of the request (principal, method, path, canonical body) when the client sent
    # an Idempotency-Key: the same request id with another hash is refused, not replayed.
    # None: no key, or an entry written before this field.
    request_hash: str | None = None
    # Who asked (the principal's identity), kept in the job's history (state.job_history).
    # None: an entry written before this field, or a command no principal sent.
    who: str | None = None

    def args(self) -> dict[str, Any]:
        return without_none(self, "who")


@dataclass(frozen=True, slots=True)
class PauseJob(Command):
    TYPE: ClassVar[str] = "pause_job"
    request_id: str
    now_ms: int
    job_id: str
    # A hash of the request (principal, method, path, canonical body) when the client sent
    # an Idempotency-Key: the same request id with another hash is refused, not replayed.
    # None: no key, or an entry written before this field.
    request_hash: str | None = None
    # Who asked (the principal's identity), kept in the job's history (state.job_history).
    # None: an entry written before this field, or a command no principal sent.
    who: str | None = None

    def args(self) -> dict[str, Any]:
        return without_none(self, "who")


@dataclass(frozen=True, slots=True)
class ResumeJob(Command):
    TYPE: ClassVar[str] = "resume_job"
    request_id: str
    now_ms: int
    job_id: str
    # A hash of the request (principal, method, path, canonical body) when the client sent
    # an Idempotency-Key: the same request id with another hash is refused, not replayed.
    # None: no key, or an entry written before this field.
    request_hash: str | None = None
    # Who asked (the principal's identity), kept in the job's history (state.job_history).
    # None: an entry written before this field, or a command no principal sent.
    who: str | None = None

    def args(self) -> dict[str, Any]:
        return without_none(self, "who")


@dataclass(frozen=True, slots=True)
class TriggerManual(Command):
    TYPE: ClassVar[str] = "trigger_manual"
    request_id: str
    now_ms: int
    job_id: str
    idempotency_key: str
    override_overlap: bool = False
    # A hash of the request (principal, method, path, canonical body) when the client sent
    # an Idempotency-Key: the same request id with another hash is refused, not replayed.
    # None: no key, or an entry written before this field.
    request_hash: str | None = None


@dataclass(frozen=True, slots=True)
class Backfill(Command):
    TYPE: ClassVar[str] = "backfill"
    request_id: str
    now_ms: int
    job_id: str
    request_key: str
    instants_ms: list[int] = field(default_factory=list)
    # A hash of the request (principal, method, path, canonical body) when the client sent
    # an Idempotency-Key: the same request id with another hash is refused, not replayed.
    # None: no key, or an entry written before this field.
    request_hash: str | None = None


@dataclass(frozen=True, slots=True)
class PutCalendar(Command):
    """Create or replace a calendar (core.calendar, canonical spec). A calendar of
    another tenant under the same name is refused: names are cluster-wide, like job ids."""

    TYPE: ClassVar[str] = "put_calendar"
    request_id: str
    now_ms: int
    calendar: dict[str, Any]
    request_hash: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteCalendar(Command):
    """Delete a calendar; refused (`in_use`, naming them) while a job lists it."""

    TYPE: ClassVar[str] = "delete_calendar"
    request_id: str
    now_ms: int
    name: str
    # The tenants the caller may write (None: admin, any); another's calendar is absent.
    tenants: list[str] | None = None
    request_hash: str | None = None


@dataclass(frozen=True, slots=True)
class PutChannel(Command):
    """Create or replace a notification channel (core.channels, canonical spec). Names
    are cluster-wide, like calendars: another tenant's name is refused."""

    TYPE: ClassVar[str] = "put_channel"
    request_id: str
    now_ms: int
    channel: dict[str, Any]
    request_hash: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteChannel(Command):
    """Delete a channel; refused (naming them) while a job's `notify` names it."""

    TYPE: ClassVar[str] = "delete_channel"
    request_id: str
    now_ms: int
    name: str
    # The tenants the caller may write (None: admin, any); another's channel is absent.
    tenants: list[str] | None = None
    request_hash: str | None = None


@dataclass(frozen=True, slots=True)
class ApplyJobs(Command):
    """A plan of `apply -f` (api.apply), applied whole or not at all (state.apply_jobs).

    `puts`: [[spec, version the plan read (0: absent)], ...] to create or edit;
    `deletes`: [[job id, version], ...]; `unchanged`: [[job id, version], ...], the jobs
    the plan left as they are, which must not have moved either."""

    TYPE: ClassVar[str] = "apply_jobs"
    request_id: str
    now_ms: int
    puts: list[list[Any]] = field(default_factory=list)
    deletes: list[list[Any]] = field(default_factory=list)
    unchanged: list[list[Any]] = field(default_factory=list)
    request_hash: str | None = None
    who: str | None = None


@dataclass(frozen=True, slots=True)
class BulkPause(Command):
    """Pause (or resume) every job a selector names: {"tenant": t}, {"queue": q} or
    {"label": [key, value]}, within `tenants` (the caller's; None: admin, all). Each job
    reached records who did it and the note (job_pause_notes)."""

    TYPE: ClassVar[str] = "bulk_pause"
    request_id: str
    now_ms: int
    selector: dict[str, Any]
    paused: bool
    who: str
    note: str
    tenants: list[str] | None = None
    request_hash: str | None = None


@dataclass(frozen=True, slots=True)
class Barrier(Command):
    """A no-op whose application proves this node has applied everything before it."""

    TYPE: ClassVar[str] = "barrier"
    request_id: str


@dataclass(frozen=True, slots=True)
class Prune(Command):
    TYPE: ClassVar[str] = "prune"
    request_id: str
    now_ms: int
    before_ms: int
    limit: int = 10_000


@dataclass(frozen=True, slots=True)
class PutTenant(Command):
    """Set a tenant's quotas (None: not set, which is the quota's default or unlimited;
    see core.tenant_policy) and policy (None: any). Enforced deterministically at apply.
    Entries written before the policy fields, or the schedules and pending-runs quotas,
    existed decode with them None."""

    TYPE: ClassVar[str] = "put_tenant"
    request_id: str
    now_ms: int
    name: str
    max_jobs: int | None = None
    max_concurrent_runs: int | None = None
    max_fires_per_minute: int | None = None
    queues: list[str] | None = None
    targets: list[str] | None = None
    http_hosts: list[str] | None = None
    max_schedules: int | None = None
    max_pending_runs: int | None = None

    def args(self) -> dict[str, Any]:
        """Policy fields and the newer quotas that are None are left out: an entry that
        sets none of them stays readable by a node of the previous version during a
        rolling upgrade."""
        out = Command.args(self)
        for name in ("queues", "targets", "http_hosts", "max_schedules", "max_pending_runs"):
            if out[name] is None:
                del out[name]
        return out


@dataclass(frozen=True, slots=True)
class RetryOutbox(Command):
    """Admin: the dead deliveries of an outbox row (to `receiver`, or to every receiver)
    go back to pending with their attempts and give-up clock reset."""

    TYPE: ClassVar[str] = "retry_outbox"
    request_id: str
    now_ms: int
    outbox_id: int
    receiver: str | None = None


@dataclass(frozen=True, slots=True)
class SetWebhookKey(Command):
    """Store a webhook signing key, generated by the proposer (never in apply).

    `owner` is "cluster" (the key a node generates on first start: with `replace` False
    the first committed key wins and later ones are no-ops) or "tenant:<name>" (a
    rotation, `replace` True).
    """

    TYPE: ClassVar[str] = "set_webhook_key"
    request_id: str
    now_ms: int
    owner: str
    key: str
    replace: bool = False


@dataclass(frozen=True, slots=True)
class AlertAction(Command):
    """A person acknowledges (`action` "ack") or resolves ("resolve") an alert by hand.

    `who` is the principal's name and `note` its reason; both go into the alert's history.
    `tenants` are the tenants the principal may write (None: admin, any alert): apply
    checks the alert's job against them, so the decision is made on the committed object.
    """

    TYPE: ClassVar[str] = "alert_action"
    request_id: str
    now_ms: int
    alert_id: str
    action: str
    who: str
    note: str
    tenants: list[str] | None = None
    # A hash of the request (principal, method, path, canonical body) when the client sent
    # an Idempotency-Key: the same request id with another hash is refused, not replayed.
    request_hash: str | None = None


@dataclass(frozen=True, slots=True)
class CancelOccurrence(Command):
    """A person cancels a run. A queued one ends `cancelled` at once; a running one is told
    through its heartbeat answer and ends `cancelled` when its worker reports (whatever
    the outcome it reports) or its lease expires. `who` and `note` are kept with it.
    `tenants` are the tenants the principal may write (None: admin): apply checks the
    occurrence's tenant against them, on the committed object."""

    TYPE: ClassVar[str] = "cancel_occurrence"
    request_id: str
    now_ms: int
    occurrence_id: str
    who: str
    note: str
    tenants: list[str] | None = None
    request_hash: str | None = None


@dataclass(frozen=True, slots=True)
class PutConcurrencyGroup(Command):
    """Set the limit of a tenant's concurrency group: at most `limit` runs of the jobs
    naming it hold leases at once (enforced by `Lease` at apply time)."""

    TYPE: ClassVar[str] = "put_concurrency_group"
    request_id: str
    now_ms: int
    tenant: str
    name: str
    limit: int
    request_hash: str | None = None
