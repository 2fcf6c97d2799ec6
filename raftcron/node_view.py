"""What the API and the operations code use of a running node. This module stands alone
at the top of the package, in no layer, because it is the seam between layers: `api` and
`ops` depend on it and `node` (the composition root) satisfies it, so it belongs to
neither side, and it imports no runtime code of the package.

`raftcron.node.Node` builds the API (`api.app.create_app(node)`), so the API cannot import
`Node` without a circle. It depends on this protocol instead, which names only the
attributes it reads; `Node` satisfies it (tests/unit/test_node_view.py checks that).

The node's in-process metrics are named the same way, by `NodeMetricsView` (the little
the API uses of them), not by `api.metrics.NodeMetrics`: `api.metrics` reads the node
through this view, so naming its class here would close an import circle.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

    from raftcron.cluster.proposer import Proposer
    from raftcron.cluster.raft import RaftNode
    from raftcron.config import NodeConfig
    from raftcron.leader.duties import DutySettings, LeaderDuties
    from raftcron.state.digest_marks import DigestMarks


class NodeMetricsView(Protocol):
    """What the API uses of a node's in-process metrics (`api.metrics.NodeMetrics`)."""

    # This node's clock minus the leader's committed clock; None until measured.
    skew_ms: int | None

    def observe_poll(self, worker_id: str, ahead_refused: str | None) -> None: ...

    def event_collectors(self) -> list[Collector]: ...


class NodeView(Protocol):
    config: NodeConfig
    raft: RaftNode
    proposer: Proposer | None
    duties: LeaderDuties | None
    metrics: NodeMetricsView
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
