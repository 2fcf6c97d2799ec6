"""The cluster's committed protocol level (core.protocol): what every member can read.

The leader commits `SetClusterLevel` once every member announced at least that level
(leader.cluster_level); apply keeps the highest level ever committed, so it never goes
down. A state without one (every database written before levels existed) is at
`BASE_LEVEL`. Deterministic: nothing here reads what the members announce.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from raftcron.core.commands import SetClusterLevel
from raftcron.core.protocol import BASE_LEVEL
from raftcron.state.context import ApplyContext, ok
from raftcron.state.db import META_CLUSTER_LEVEL, get_meta


def committed_level(conn: sqlite3.Connection) -> int:
    """The level this state committed (BASE_LEVEL when it never committed one)."""
    return max(BASE_LEVEL, get_meta(conn, META_CLUSTER_LEVEL))


def set_cluster_level(ctx: ApplyContext, cmd: SetClusterLevel) -> dict[str, Any]:
    current = committed_level(ctx.conn)
    if cmd.level <= current:
        return ok(level=current, raised=False)
    ctx.set_meta(META_CLUSTER_LEVEL, cmd.level)
    return ok(level=cmd.level, raised=True, previous=current)
