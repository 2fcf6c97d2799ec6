"""Replicated commands and their versioned JSON codec.

Each command carries everything `apply` needs: the proposer's `now_ms`, ids, and for
leader-only commands the proposer's `epoch`. `apply` never reads a clock.
Client commands carry a `request_id`: a retried proposal whose first outcome was
unknown (leader change) returns the stored result instead of applying twice.

This module is the codec (`encode`, `decode`, `COMMAND_TYPES`) and the one place the
commands are imported from (`from raftcron.core import commands as c`). They are defined
by who proposes them: `client_commands`, `leader_commands`, `worker_commands`, on the
base in `command_base`.
"""

from __future__ import annotations

import json

from raftcron.core.client_commands import (
    AlertAction,
    ApplyJobs,
    Backfill,
    Barrier,
    BulkPause,
    CancelOccurrence,
    CreateJobs,
    DeleteCalendar,
    DeleteChannel,
    DeleteJob,
    PauseJob,
    Prune,
    PutCalendar,
    PutChannel,
    PutConcurrencyGroup,
    PutJob,
    PutTenant,
    ResumeJob,
    RetryOutbox,
    SetWebhookKey,
    TriggerManual,
)
from raftcron.core.command_base import (
    Command,
    field_default,
)
from raftcron.core.leader_commands import (
    AckDeliveries,
    AckOutbox,
    BeginEpoch,
    Claim,
    ConfirmClock,
    Lease,
    RaiseAlert,
    ResolveAlert,
    RouteOutbox,
    SetClusterLevel,
    Sweep,
)
from raftcron.core.worker_commands import (
    Complete,
    Heartbeat,
    Release,
)

__all__ = [
    "AckDeliveries",
    "AckOutbox",
    "AlertAction",
    "ApplyJobs",
    "Backfill",
    "Barrier",
    "BeginEpoch",
    "BulkPause",
    "CODEC_VERSION",
    "COMMAND_TYPES",
    "CancelOccurrence",
    "Claim",
    "Command",
    "Complete",
    "ConfirmClock",
    "CreateJobs",
    "DeleteCalendar",
    "DeleteChannel",
    "DeleteJob",
    "Heartbeat",
    "Lease",
    "PauseJob",
    "Prune",
    "PutCalendar",
    "PutChannel",
    "PutConcurrencyGroup",
    "PutJob",
    "PutTenant",
    "RaiseAlert",
    "Release",
    "ResolveAlert",
    "ResumeJob",
    "RetryOutbox",
    "RouteOutbox",
    "SetClusterLevel",
    "SetWebhookKey",
    "Sweep",
    "TriggerManual",
    "UndecodableCommand",
    "decode",
    "encode",
    "field_default",
]

CODEC_VERSION = 1


class UndecodableCommand(Exception):
    """A log entry this build cannot decode: the node must stop rather than diverge."""



COMMAND_TYPES: dict[str, type[Command]] = {
    c.TYPE: c
    for c in (
        PutJob, CreateJobs, DeleteJob, PauseJob, ResumeJob, TriggerManual, Backfill, Barrier, Prune,
        PutCalendar, DeleteCalendar, BulkPause, ApplyJobs,
        PutTenant, RetryOutbox, SetWebhookKey, AlertAction, CancelOccurrence,
        PutConcurrencyGroup, BeginEpoch, Claim, Lease, Sweep, RaiseAlert, ResolveAlert,
        ConfirmClock, SetClusterLevel, AckOutbox, RouteOutbox, AckDeliveries, Heartbeat,
        Complete, Release, PutChannel, DeleteChannel,
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
