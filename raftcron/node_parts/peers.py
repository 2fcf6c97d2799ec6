"""Following the member records: a node's peers are its configured ones updated by the
replicated member records (cluster.membership), read again when a record is applied and
every few seconds (records can also arrive inside an installed snapshot)."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from dataclasses import replace

from raftcron.cluster import membership
from raftcron.cluster.proposer import post_to_loop
from raftcron.node_parts.base import NodeBase
from raftcron.state.cluster_level import committed_level

log = logging.getLogger("raftcron.node")


class PeerRefresh(NodeBase):
    """Keeps the node's peers (and the cluster level it noted) in step with the state."""

    def _members_changed(self) -> None:
        """A member record was applied (tick thread)."""
        if self.loop is not None:
            post_to_loop(self.loop, self.refresh_peers)

    def refresh_peers(self) -> None:
        conn = self.open_reader()
        try:
            members = membership.read_members(conn)
        finally:
            conn.close()
        peers = membership.merge_peers(self.configured_peers, members, self.config.node_id,
                                       self.config.raft_addr)
        if peers == self.config.peers:
            return
        log.info("peers are now %s", ", ".join(f"{p.id}={p.raft_addr}" for p in peers))
        self.config = replace(self.config, peers=peers)
        self.by_raft_addr = {p.raft_addr: p for p in peers}
        guard = getattr(self, "clock_guard", None)
        if guard is not None and hasattr(guard, "peer_urls"):
            guard.peer_urls = [p.http_url for p in peers]
            guard.cluster_size = len(peers) + 1

    def _refresh_committed_level(self) -> None:
        conn = self.open_reader()
        try:
            self.levels.note_committed(committed_level(conn))
        finally:
            conn.close()

    async def _refresh_peers_periodically(self, period_s: float = 5.0) -> None:
        """Member records can also arrive inside an installed snapshot."""
        while True:
            await asyncio.sleep(period_s)
            try:
                self.refresh_peers()
                self._refresh_committed_level()  # an installed snapshot can raise it
            except sqlite3.Error as e:
                log.warning("cannot read the member records: %s", e)
