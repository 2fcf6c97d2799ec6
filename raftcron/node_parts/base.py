"""The state every part of a node shares: set by `raftcron.node.Node.__init__`, named here
so that each part (`raftcron.node_parts`) can say what it reads."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from typing import TYPE_CHECKING

from raftcron.state import db

if TYPE_CHECKING:
    from raftcron.api.metrics import NodeMetrics
    from raftcron.cluster.levels import ClusterLevels
    from raftcron.cluster.proposer import Proposer
    from raftcron.cluster.raft import RaftNode
    from raftcron.cluster.stamp_clock import StampClock
    from raftcron.cluster.transfer import LeadershipTransfer
    from raftcron.config import NodeConfig, Peer
    from raftcron.leader.clock import ClockGuard
    from raftcron.leader.duties import DutySettings, LeaderDuties
    from raftcron.state.digest_marks import DigestMarks


class NodeBase:
    """The attributes of a node its parts use (declared only: `Node.__init__` sets them),
    and a reader of its state."""

    config: NodeConfig
    configured_peers: tuple[Peer, ...]
    by_raft_addr: dict[str, Peer]
    loop: asyncio.AbstractEventLoop | None
    apply_lock: threading.Lock
    writer: sqlite3.Connection
    protocol_level: int
    levels: ClusterLevels
    digest_marks: DigestMarks
    raft: RaftNode
    proposer: Proposer | None
    duties: LeaderDuties | None
    duty_settings: DutySettings
    metrics: NodeMetrics
    clock_guard: ClockGuard
    stamp_clock: StampClock
    transfer: LeadershipTransfer
    # Leadership: the (is leader, term) last seen on the tick thread, the term whose
    # epoch is being begun, a clock behind the cluster's, shutdown under way.
    _role: tuple[bool, int]
    _beginning: int | None
    skew_blocked: bool
    stopping: bool

    def open_reader(self) -> sqlite3.Connection:
        return db.open_reader(self.config.db_path)
