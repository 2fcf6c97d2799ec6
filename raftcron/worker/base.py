"""What a worker holds, shared by the parts it is made of (see raftcron.worker.runner).

A lease moves through these stages: being acknowledged (`_acking`), acknowledged and
waiting for its instant when taken ahead (`_waiting`), acknowledged and waiting for a
slot (`_ready`), running (`_runs`). The lease loop, the heartbeats, the start-at-instant
scheduling and the run executor each move leases between stages; `WorkerBase` owns the
stages, the client and the reporter, and the measured averages that size how far ahead
the worker leases.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from raftcron.worker.client import Lease, WorkerClient
from raftcron.worker.clock import WorkerClock
from raftcron.worker.executors import Cancel, execute
from raftcron.worker.isolation import RunAs
from raftcron.worker.options import PREFETCH_PER_SLOT, WorkerOptions
from raftcron.worker.reporter import Reporter
from raftcron.worker.secrets import SecretsFile

EWMA_WEIGHT = 0.2  # of the newest sample in the run-time and round-trip averages


@dataclass(slots=True, eq=False)
class HeldRun:
    """A lease this worker holds, from its acknowledgement until its run ends."""

    lease: Lease
    cancel: Cancel = field(default_factory=Cancel)
    task: asyncio.Task[None] | None = None
    lost: str | None = None
    """Set when the server said the lease is gone; such a run is never reported."""
    started_ms: int | None = None
    """When its process started, on the cluster's clock: sent with the heartbeats while
    it runs (the record shows it running from then), and with its completion."""


class WorkerBase:
    """The state of one worker process: its leases by stage, its client and reporter, and
    the measured run time and round trip. `runner.Worker` is made of this and the parts
    that act on it."""

    def __init__(
        self,
        servers: list[str],
        queues: list[str],
        concurrency: int,
        worker_id: str,
        *,
        token: str | None = None,
        options: WorkerOptions | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        http_transport: httpx.AsyncBaseTransport | None = None,
        executor: Callable[..., Any] | None = None,
        run_as: RunAs | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        prefetch = (options.prefetch if options is not None else None)
        if prefetch is not None and prefetch < 0:
            raise ValueError("prefetch must not be negative")
        self.queues = list(queues)
        self.concurrency = concurrency
        self.worker_id = worker_id
        self.options = options or WorkerOptions()
        self.client = WorkerClient(
            servers, token=token, timeout_s=self.options.request_timeout_s, transport=transport
        )
        self.reporter = Reporter(self.client, worker_id, self.options)
        self._http_transport = http_transport
        self._execute = executor or execute
        self._secrets = (SecretsFile(self.options.secrets_file)
                         if self.options.secrets_file else None)
        self._run_as = run_as
        self.prefetch = PREFETCH_PER_SLOT * concurrency if prefetch is None else prefetch
        """The hard bound on leases held beyond the concurrency."""
        self._run_s: float | None = None
        """Mean run time (EWMA; None until a run ended): how fast slots free."""
        self._round_trip_s: float | None = None
        """Mean lease round trip (EWMA): twice an acknowledgement's, one Raft commit each
        for the Lease and the acknowledging heartbeat."""
        self._runs: dict[str, HeldRun] = {}
        """Runs in progress, at most `concurrency`."""
        self._ready: dict[str, HeldRun] = {}
        """Acknowledged leases waiting for a slot, oldest first (no task yet)."""
        self._acking = 0
        """Leases whose acknowledgement is in flight."""
        self._ack_tasks: set[asyncio.Task[None]] = set()
        self._waiting: dict[str, HeldRun] = {}
        """Acknowledged leases taken ahead, waiting for their instant (core.ahead)."""
        self._instant_tasks: set[asyncio.Task[None]] = set()
        self.clock = WorkerClock()
        self._stopping = False
        self._leased_once = False  # a lease request was answered (the config works)
        self._changed = asyncio.Event()

    @property
    def running(self) -> list[Lease]:
        return [r.lease for r in self._runs.values()]

    @property
    def lease_ahead(self) -> int:
        """Leases to hold beyond the busy slots now: as many as the slots are expected to
        free during one lease round trip, within [min(1, prefetch), prefetch]. Before
        anything was measured: as many as the concurrency (within the bound)."""
        if self.prefetch == 0:
            return 0
        if self._run_s is None or self._round_trip_s is None:
            return min(self.prefetch, self.concurrency)
        expected = self.concurrency * self._round_trip_s / max(self._run_s, 0.001)
        return max(1, min(self.prefetch, math.ceil(expected)))

    def _observe(self, attr: str, sample: float) -> None:
        old = getattr(self, attr)
        setattr(self, attr, sample if old is None else
                (1 - EWMA_WEIGHT) * old + EWMA_WEIGHT * sample)

    @property
    def held(self) -> int:
        """Leases this worker holds: running, being acknowledged, waiting for their instant
        or for a slot."""
        return len(self._runs) + self._acking + len(self._waiting) + len(self._ready)
