"""Replicated commands and their versioned JSON codec.

Each command carries everything `apply` needs: the proposer's `now_ms`, ids, and for
leader-only commands the proposer's `epoch`. `apply` never reads a clock.
Client commands carry a `request_id`: a retried proposal whose first outcome was
unknown (leader change) returns the stored result instead of applying twice.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

CODEC_VERSION = 1


class UndecodableCommand(Exception):
    """A log entry this build cannot decode: the node must stop rather than diverge."""


@dataclass(frozen=True, slots=True)
class Command:
    TYPE: ClassVar[str] = ""
    LEADER_ONLY: ClassVar[bool] = False

    def args(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def _args_without_defaults(self, *names: str) -> dict[str, Any]:
        """`args()` without the named fields while they hold their default: an entry that
        does not use a field added later stays readable by a build without it (a rolling
        upgrade; core.protocol)."""
        out = Command.args(self)
        for name in names:
            if out[name] == field_default(type(self), name):
                del out[name]
        return out


def field_default(cls: type[Command], name: str) -> Any:
    """The default of field `name` of command class `cls` (MISSING when it has none)."""
    for f in fields(cls):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
            return MISSING
    raise KeyError(name)


def _without_none(cmd: Command, *names: str) -> dict[str, Any]:
    """`cmd.args()` without the named fields while they are None: an entry that does not
    use a field added later encodes as it did before it (a build without the field reads
    it during a rolling upgrade)."""
    out = Command.args(cmd)
    for name in names:
        if out[name] is None:
            del out[name]
    return out


# --- client commands ---------------------------------------------------------------------

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
        return _without_none(self, "who")


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
        return _without_none(self, "who")


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
        return _without_none(self, "who")


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
        return _without_none(self, "who")


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
        return _without_none(self, "who")


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


# --- leader-only commands ----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class BeginEpoch(Command):
    TYPE: ClassVar[str] = "begin_epoch"
    term: int
    node_id: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class Claim(Command):
    """Record decisions for nominal instants.

    items: [job_id, job_version, scheduled_for_ms, dispatch_at_ms, decision] where
    decision is "fire", "misfire" or "paused" (see core.policy).
    """

    TYPE: ClassVar[str] = "claim"
    LEADER_ONLY: ClassVar[bool] = True
    epoch: int
    now_ms: int
    items: list[list[Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Lease(Command):
    """Lease pending attempts to a worker.

    `acknowledge`: the worker promised to acknowledge each lease (its first heartbeat)
    within the job's `ack_timeout_s`; one that is not acknowledged by then is released by
    the sweeper and leased again. False for workers that made no such promise and for
    every entry written before the field existed: those leases count as delivered.

    `ahead_ms`: dispatch ahead (issue 18 §4). `now_ms` is then the leader's real time, and
    a run due up to `ahead_ms` later may be leased: its lease names the instant it may start
    (`start_at_ms`) and its runtime and heartbeat deadlines count from that instant; a run
    of a paused job is never leased ahead of its instant. 0 (every entry written before
    the field existed): `now_ms` is the hand-out instant and only runs due by then go.
    """

    TYPE: ClassVar[str] = "lease"
    LEADER_ONLY: ClassVar[bool] = True
    epoch: int
    now_ms: int
    worker_id: str
    attempt_ids: list[str] = field(default_factory=list)
    acknowledge: bool = False
    ahead_ms: int = 0

    def args(self) -> dict[str, Any]:
        return self._args_without_defaults("ahead_ms")


@dataclass(frozen=True, slots=True)
class Sweep(Command):
    """Expire leases whose heartbeat deadline or max runtime passed as of `now_ms`, and
    release (uncounted) those whose acknowledgement deadline passed unacknowledged."""

    TYPE: ClassVar[str] = "sweep"
    LEADER_ONLY: ClassVar[bool] = True
    epoch: int
    now_ms: int
    attempt_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RaiseAlert(Command):
    TYPE: ClassVar[str] = "raise_alert"
    LEADER_ONLY: ClassVar[bool] = True
    epoch: int
    now_ms: int
    alert_id: str
    kind: str
    job_id: str | None = None
    occurrence_id: str | None = None
    reason: str = ""
    scheduled_for_ms: int | None = None
    message: str = ""
    # The deadline the instant `scheduled_for_ms` missed: apply then decides from the
    # replicated availability (state.availability) whether the cluster's own trouble was
    # the cause. None: no such judgement (and every entry written before the field).
    deadline_ms: int | None = None

    def args(self) -> dict[str, Any]:
        """Left out when None: the entry stays readable by a node of the previous version
        during a rolling upgrade."""
        out = Command.args(self)
        if out["deadline_ms"] is None:
            del out["deadline_ms"]
        return out


@dataclass(frozen=True, slots=True)
class ConfirmClock(Command):
    """The leader's clock is confirmed by a majority and it is scheduling. Proposed after
    the leader's previous confirmation committed: one at most `max_gap_ms` after the
    previous one of the epoch proves the cluster available between them
    (state.availability)."""

    TYPE: ClassVar[str] = "confirm_clock"
    LEADER_ONLY: ClassVar[bool] = True
    epoch: int
    now_ms: int
    max_gap_ms: int


@dataclass(frozen=True, slots=True)
class SetClusterLevel(Command):
    """The cluster speaks protocol `level` (core.protocol) from this entry on: the leader
    proposes it once every member announced at least that level. Never lowers it."""

    TYPE: ClassVar[str] = "set_cluster_level"
    LEADER_ONLY: ClassVar[bool] = True
    epoch: int
    now_ms: int
    level: int


@dataclass(frozen=True, slots=True)
class ResolveAlert(Command):
    TYPE: ClassVar[str] = "resolve_alert"
    LEADER_ONLY: ClassVar[bool] = True
    epoch: int
    now_ms: int
    alert_id: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class AckOutbox(Command):
    TYPE: ClassVar[str] = "ack_outbox"
    LEADER_ONLY: ClassVar[bool] = True
    epoch: int
    now_ms: int
    outbox_id: int
    delivered: bool
    error: str = ""


@dataclass(frozen=True, slots=True)
class RouteOutbox(Command):
    """Fix the receivers of new outbox rows: routes are [outbox_id, [[receiver, signer],
    ...]]. Each (row, receiver) pair then has its own delivery state; a row routed to no
    receiver is finished at once."""

    TYPE: ClassVar[str] = "route_outbox"
    LEADER_ONLY: ClassVar[bool] = True
    epoch: int
    now_ms: int
    routes: list[list[Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AckDeliveries(Command):
    """Outcomes of webhook deliveries: results are [outbox_id, receiver, ok, error].

    A failure past `give_up_ms` since the delivery was routed (or at `max_attempts`
    failures) makes that delivery dead and raises the receiver's alert.
    """

    TYPE: ClassVar[str] = "ack_deliveries"
    LEADER_ONLY: ClassVar[bool] = True
    epoch: int
    now_ms: int
    give_up_ms: int
    max_attempts: int | None = None
    results: list[list[Any]] = field(default_factory=list)


# --- worker commands (any node) ----------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Heartbeat(Command):
    TYPE: ClassVar[str] = "heartbeat"
    now_ms: int
    worker_id: str
    attempts: list[list[Any]] = field(default_factory=list)  # [[attempt_id, token], ...]
    # The queues the worker's token may lease (None: any, and entries written before
    # this field): apply refuses an attempt on any other queue.
    queues: list[str] | None = None
    # The worker's check just before the instant of runs it leased ahead and has not
    # started: a run whose job was paused since is skipped (`paused`), not started.
    # False for every entry written before the field existed.
    before_start: bool = False

    def args(self) -> dict[str, Any]:
        return self._args_without_defaults("before_start")


@dataclass(frozen=True, slots=True)
class Complete(Command):
    TYPE: ClassVar[str] = "complete"
    now_ms: int
    worker_id: str
    # [[attempt_id, token, outcome, exit_code, output(, started_ms, duration_ms)], ...]:
    # the last two (protocol level 2) are when the job's process started, on the cluster's
    # clock as the worker measured it, and how long it ran by the worker's monotonic clock.
    completions: list[list[Any]] = field(default_factory=list)
    # The queues the worker's token may lease (None: any, and entries written before
    # this field): apply refuses an attempt on any other queue.
    queues: list[str] | None = None


@dataclass(frozen=True, slots=True)
class Release(Command):
    """A worker hands back leases it will not run (graceful shutdown)."""

    TYPE: ClassVar[str] = "release"
    now_ms: int
    worker_id: str
    attempts: list[list[Any]] = field(default_factory=list)  # [[attempt_id, token], ...]
    # The queues the worker's token may lease (None: any, and entries written before
    # this field): apply refuses an attempt on any other queue.
    queues: list[str] | None = None


COMMAND_TYPES: dict[str, type[Command]] = {
    c.TYPE: c
    for c in (
        PutJob, CreateJobs, DeleteJob, PauseJob, ResumeJob, TriggerManual, Backfill, Barrier, Prune,
        PutCalendar, DeleteCalendar, BulkPause, ApplyJobs,
        PutTenant, RetryOutbox, SetWebhookKey, AlertAction, CancelOccurrence,
        PutConcurrencyGroup, BeginEpoch, Claim, Lease, Sweep, RaiseAlert, ResolveAlert,
        ConfirmClock, SetClusterLevel, AckOutbox, RouteOutbox, AckDeliveries, Heartbeat,
        Complete, Release,
    )
}


def encode(cmd: Command) -> bytes:
    return json.dumps(
        {"v": CODEC_VERSION, "t": cmd.TYPE, "a": cmd.args()}, separators=(",", ":")
    ).encode()


def decode(data: bytes) -> Command:
    try:
        obj = json.loads(data)
        if obj["v"] != CODEC_VERSION:
            raise UndecodableCommand(f"codec version {obj['v']} is not supported")
        cls = COMMAND_TYPES[obj["t"]]
        return cls(**obj["a"])
    except UndecodableCommand:
        raise
    except Exception as e:  # noqa: BLE001 - any decoding failure is the same failure
        raise UndecodableCommand(f"cannot decode command: {e!r}") from e
