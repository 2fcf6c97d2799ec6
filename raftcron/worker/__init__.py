"""The raftcron worker: leases attempts from the cluster and runs them."""

from raftcron.worker.client import ApiError, Lease, ServerUnavailable, WorkerClient
from raftcron.worker.executors import Cancel, RunResult, execute, run_http, run_shell
from raftcron.worker.runner import Worker, WorkerOptions, main, run_worker

__all__ = [
    "ApiError",
    "Cancel",
    "Lease",
    "RunResult",
    "ServerUnavailable",
    "Worker",
    "WorkerClient",
    "WorkerOptions",
    "execute",
    "main",
    "run_http",
    "run_shell",
    "run_worker",
]
