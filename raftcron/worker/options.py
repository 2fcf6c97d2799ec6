"""How a worker is configured (`WorkerOptions`), and the error that stops a worker whose
configuration the servers refuse."""

from __future__ import annotations

from dataclasses import dataclass

from raftcron.worker.executors import DEFAULT_KILL_GRACE_S

PREFETCH_PER_SLOT = 16


class WorkerConfigError(Exception):
    """The servers refuse this worker as configured (token, scope, queues): exit, do not
    retry."""


@dataclass(slots=True)
class WorkerOptions:
    wait_s: float = 10.0
    busy_wait_s: float = 2.0
    """Long-poll wait while runs are in flight, so freed slots are refilled sooner."""
    drain_timeout_s: float = 30.0
    report_timeout_s: float = 30.0
    kill_grace_s: float = DEFAULT_KILL_GRACE_S
    request_timeout_s: float = 10.0
    backoff_initial_s: float = 0.5
    backoff_cap_s: float = 2.0
    """The longest wait between two tries of a call no server answered (leasing,
    acknowledging, heartbeats, completions). A failover takes about a second: a worker
    that had backed off to 30 s left its runs unleased, and its heartbeats unsent, for
    up to 30 s after a new leader was there (a chaos run measured 28 s). A try costs
    one small request per server, so 2 s stays cheap for hundreds of workers."""
    completion_batch: int = 50
    ack_give_up_s: float = 30.0
    """How long a lease's acknowledgement is retried while no server answers for it. The
    lease is never started without an answer; past the job's ack_timeout_s the server
    has either accepted the acknowledgement or released the lease, so a late answer is
    still definite."""
    refused_grace_s: float = 60.0
    """How long a worker that has not leased yet keeps asking when its token or queues
    are refused (401/403) before it stops (counted from the first refusal): a tokens
    file being rolled out reaches the nodes one by one, and a worker started with a new
    token may ask a node that lacks it."""
    secrets_file: str | None = None
    """JSON file of the secrets that job targets may name (raftcron.worker.secrets)."""
    lease_ahead: bool = True
    """Take runs due within the server's `lease_ahead_s` before their instant, and start
    each at its instant (core.ahead), while this worker's clock agrees with the server's
    within the tolerance (worker.clock). False: only runs already due."""
    prefetch: int | None = None
    """At most this many leases held beyond the concurrency, acknowledged and waiting for a
    slot (None: PREFETCH_PER_SLOT x the concurrency; 0: lease only for free slots). How
    many are actually leased ahead follows the measured run time and round trip (see
    raftcron.worker.runner); this is the hard bound, so that a stopping worker has few leases
    to hand back."""

