"""What the API and the operations code use of a running node.

`raftcron.node.Node` builds the API (`api.app.create_app(node)`), so the API cannot import
`Node` without a circle. It depends on this protocol instead, which names only the
attributes it reads; `Node` satisfies it (tests/unit/test_node_view.py checks that).
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from raftcron.api.metrics import NodeMetrics
    from raftcron.cluster.proposer import Proposer
    from raftcron.cluster.raft import RaftNode
    from raftcron.config import NodeConfig
    from raftcron.leader.duties import DutySettings, LeaderDuties
    from raftcron.state.digest_marks import DigestMarks


class NodeView(Protocol):
    config: NodeConfig
    raft: RaftNode
    proposer: Proposer | None
    duties: LeaderDuties | None
    metrics: NodeMetrics
    duty_settings: DutySettings
    # The protocol level this node speaks (core.protocol).
    protocol_level: int
    # This node's digests at marked log indexes (state.digest_marks).
    digest_marks: DigestMarks

    def status(self) -> dict[str, Any]: ...

    def stamp_ms(self) -> int | None: ...

    def members_speak(self, level: int) -> bool: ...

    def writable_level(self) -> int: ...

    def open_reader(self) -> sqlite3.Connection: ...

    def leader_id(self) -> str | None: ...

    def leader_http_url(self) -> str | None: ...

    def refresh_peers(self) -> None: ...
