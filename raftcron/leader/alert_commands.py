"""Proposing the alert commands a leader duty decides (deadlines, backlog)."""

from __future__ import annotations

import logging

from raftcron.cluster.proposer import Proposer
from raftcron.core.commands import Command, RaiseAlert, ResolveAlert
from raftcron.leader.ticker import LostEpoch

log = logging.getLogger("raftcron.alerts")


async def propose_alert_change(proposer: Proposer, cmd: Command, duty: str) -> str | None:
    """Commit `cmd` (a RaiseAlert or ResolveAlert); "raised" or "resolved" when it changed
    an alert, None when it was a no-op or refused. A newer leader raises LostEpoch, which
    ends the duty."""
    result = await proposer.propose_leader(cmd)
    if not result.get("ok"):
        if result.get("rejected") == "stale_epoch":
            raise LostEpoch(result.get("message", ""))
        log.info("%s command %s refused: %s", duty, cmd.TYPE, result.get("message"))
        return None
    if isinstance(cmd, RaiseAlert) and result.get("raised"):
        return "raised"
    if isinstance(cmd, ResolveAlert) and result.get("resolved"):
        return "resolved"
    return None
