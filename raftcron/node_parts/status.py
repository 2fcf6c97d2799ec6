"""What a node says about itself and its cluster: its leader, its status (`GET
/v1/cluster`), the time it stamps writes with, and the protocol level it may write at.
These are the reads `NodeView` names for the API."""

from __future__ import annotations

import time
from typing import Any

from raftcron.cluster.levels import level_members
from raftcron.core.protocol import PROTOCOL_LEVEL
from raftcron.node_parts.base import NodeBase
from raftcron.state import db
from raftcron.state.cluster_level import committed_level


class NodeStatus(NodeBase):
    """The reads the API makes of the node (`NodeView`)."""

    def leader_id(self) -> str | None:
        if self.raft.is_leader():
            return self.config.node_id
        addr = self.raft.leader_addr()
        peer = self.by_raft_addr.get(addr) if addr else None
        return peer.id if peer else None

    def leader_http_url(self) -> str | None:
        if self.raft.is_leader():
            return self.config.http_url
        addr = self.raft.leader_addr()
        peer = self.by_raft_addr.get(addr) if addr else None
        return peer.http_url if peer else None

    def raft_status(self) -> dict[str, Any]:
        for _ in range(3):
            try:
                return self.raft.getStatus()
            except RuntimeError:  # a dict changed size under the tick thread; read again
                continue
        return {}

    def status(self) -> dict[str, Any]:
        st = self.raft_status()
        with self.apply_lock:
            applied = db.last_applied(self.writer)
            epoch = db.get_meta(self.writer, db.META_EPOCH)
            self.levels.note_committed(committed_level(self.writer))
        peers = []
        for p in self.config.peers:
            connected = st.get(f"partner_node_status_server_{p.raft_addr}") == 2
            peers.append({"id": p.id, "raft_addr": p.raft_addr, "http_url": p.http_url,
                          "reachable": connected,
                          "protocol_level": self.levels.announced(p.http_url)})
        is_leader = self.raft.is_leader()
        ticker = self.duties.ticker if self.duties else None
        return {
            "node_id": self.config.node_id,
            "role": "leader" if is_leader else ("follower" if self.leader_id() else "candidate"),
            "term": st.get("raft_term", self.raft.term()),
            "epoch": epoch,
            "leader_id": self.leader_id(),
            "leader_url": self.leader_http_url(),
            "commit_index": st.get("commit_idx"),
            "raft_last_applied": st.get("last_applied"),
            "log_last_index": self.raft.last_log_index(),
            "last_applied_index": applied,
            "has_quorum": st.get("has_quorum"),
            "ready": bool(self.raft.isReady()),
            "leader_duties": bool(self.duties and not self.duties.stopped),
            "last_tick_ms": ticker.last_tick_ms if ticker else None,
            "clock_blocked": self.skew_blocked or not self.clock_guard.confirmed(),
            "clock": self.clock_guard.describe(),
            "clock_skew_ms": self.metrics.skew_ms,
            "stamp_clock": self.stamp_clock.describe(),
            "now_ms": int(time.time() * 1000),
            # What the cluster committed, what this node speaks (core.protocol); each
            # peer's announced level is in `peers` (null: not known, counted as level 1).
            "cluster_level": self.levels.committed,
            "protocol_level": self.protocol_level,
            "newest_protocol_level": PROTOCOL_LEVEL,
            "peers": peers,
        }

    def stamp_ms(self) -> int | None:
        """The time to stamp a client write or worker call with (cluster.stamp_clock);
        None when neither the cluster's time nor this node's clock is confirmed."""
        return self.stamp_clock.stamp_ms()

    def writable_level(self) -> int:
        """The level this node may write (cluster.levels): the committed one as applied
        here, from memory. Set from the state at start, noted on every applied
        SetClusterLevel, and within 5 s of a snapshot install (the periodic refresh; until
        then it lags, lower, the safe side)."""
        return self.levels.writable()

    def members_speak(self, level: int) -> bool:
        """Whether every member, as this node last heard them, speaks at least `level`
        (False when one is unknown, or the voters cannot be read)."""
        members = self._level_members()
        return members is not None and self.levels.target(members) >= level

    def _level_members(self) -> list[str] | None:
        """Whom the cluster level waits for; None when the Raft voters cannot be read (no
        level is raised on a guess: a voter left out would count as upgraded)."""
        voters = self.raft.other_addrs()
        if voters is None:
            return None
        return level_members([p.http_url for p in self.config.peers], voters, self.by_raft_addr)
