"""Commands the leader proposes while it schedules: its epoch, the decisions for nominal
instants, leases, sweeps, alerts, outbox routing and deliveries, clock confirmations and
the cluster level. All but `BeginEpoch` are leader-only: they carry the leader's `epoch`,
and apply refuses them from an epoch that is not the current one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from raftcron.core.command_base import Command


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
