"""Commands a worker's calls propose (through any node): heartbeats, completions and the
release of leases it will not run. Each names the attempts with their fencing tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from raftcron.core.command_base import Command


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
