"""Composition root of one node: SQLite state, Raft, leader duties and the HTTP API. It
stands alone at the top of the package, above every layer, because it is the one module
that puts them all together (state, cluster, leader, api, and the node's parts in
`raftcron.node_parts`); only the CLI's `node` command imports it.

`Node` sets up the node's state and runs it; what it does is in its parts
(`raftcron.node_parts`): its status, its peers, what an applied command wakes, and
leadership. Names that moved there are still importable from here.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from types import FrameType

import uvicorn

from raftcron.api.app import create_app
from raftcron.api.connection_guard import (
    ACCEPT_BURST,
    ConnectionBudget,
    ConnectionLimits,
    QuietAcceptErrors,
    guarded_protocol,
    raise_fd_limit,
    widen_listen_queue,
)
from raftcron.api.metrics import NodeMetrics
from raftcron.cluster import membership
from raftcron.cluster.levels import ClusterLevels, spoken_level
from raftcron.cluster.peer_tls import peer_tls
from raftcron.cluster.proposer import Proposer
from raftcron.cluster.raft import RaftNode
from raftcron.cluster.stamp_clock import StampClock
from raftcron.cluster.transfer import LeadershipTransfer
from raftcron.config import NodeConfig
from raftcron.core.protocol import PROTOCOL_LEVEL
from raftcron.core.timefmt import parse_duration
from raftcron.leader import webhook_keys
from raftcron.leader.clock import ClockGuard
from raftcron.leader.cluster_level import ClusterLevelRaiser
from raftcron.leader.duties import DutySettings, LeaderDuties
from raftcron.leader.retention import DEFAULT_RETENTION_S
from raftcron.leader.ticker import now_ms
from raftcron.node_parts.applied import (
    JOB_COMMANDS,
    OUTBOX_COMMANDS,
    WORK_COMMANDS,
    AppliedHooks,
    changed_job_ids,
)
from raftcron.node_parts.leadership import (
    BEGIN_EPOCH_RETRY_S,
    HANDOVER_TIMEOUT_S,
    MAX_CLOCK_BEHIND_MS,
    Leadership,
)
from raftcron.node_parts.peers import PeerRefresh
from raftcron.node_parts.status import NodeStatus
from raftcron.state import db
from raftcron.state.cluster_level import committed_level
from raftcron.state.digest_marks import DigestMarks
from raftcron.state.machine import StateMachine

__all__ = [
    "BEGIN_EPOCH_RETRY_S",
    "GRACEFUL_SHUTDOWN_S",
    "HANDOVER_TIMEOUT_S",
    "JOB_COMMANDS",
    "KEEP_ALIVE_S",
    "MAX_CLOCK_BEHIND_MS",
    "OUTBOX_COMMANDS",
    "WORK_COMMANDS",
    "Node",
    "changed_job_ids",
    "retention_of",
    "run_node",
]

log = logging.getLogger("raftcron.node")
logging.getLogger("asyncio").addFilter(QuietAcceptErrors())

GRACEFUL_SHUTDOWN_S = 5.0
# Idle HTTP connections stay open longer than httpx clients keep them (5 s): with equal
# timeouts a client can reuse a connection the server is closing at that moment and get
# "server disconnected" for a request that never arrived.
KEEP_ALIVE_S = 30


class _Server(uvicorn.Server):
    """uvicorn's server, telling the node the moment an exit signal arrives."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self._on_exit()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            widen_listen_queue(sock for server in self.servers for sock in server.sockets)


class Node(Leadership, AppliedHooks, PeerRefresh, NodeStatus):
    """One node. `raftcron.node_view.NodeView` is what the API uses of it."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        os.makedirs(config.data_dir, exist_ok=True)
        password = config.read_secret()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.apply_lock = threading.Lock()
        self.writer = db.open_writer(config.db_path)
        # Peers: the configured ones updated by the replicated member records (membership).
        membership.ensure_table(self.writer)
        self.configured_peers = config.peers
        config = self.config = replace(config, peers=membership.merge_peers(
            config.peers, membership.read_members(self.writer), config.node_id,
            config.raft_addr))
        self.checkpointer = db.Checkpointer(config.db_path).start()
        # Protocol levels (core.protocol): what this node reads and announces, what the
        # cluster committed. Below PROTOCOL_LEVEL only in tests (cluster.levels).
        self.protocol_level = spoken_level()
        self.levels = ClusterLevels(self.protocol_level, committed_level(self.writer))
        if self.protocol_level < PROTOCOL_LEVEL:
            log.warning("test-only: this node speaks protocol level %d (of %d), as an older "
                        "build would", self.protocol_level, PROTOCOL_LEVEL)
        # Digests at exact indexes (state.digest_marks), made by the apply listener.
        self.digest_marks = DigestMarks(lambda: db.open_reader(config.db_path))
        self.machine = StateMachine(self.writer, listener=self._on_applied,
                                    speaks=self.protocol_level)
        self.by_raft_addr = {p.raft_addr: p for p in config.peers}
        # Constructed on the main thread: its tick thread dies with the constructing thread.
        self.raft = RaftNode(
            config.raft_addr, [p.raft_addr for p in config.peers], self.machine,
            config.data_dir, password, self.apply_lock, config.raft_overrides,
            db_path=config.db_path,
        )
        self.raft.on_members_changed = self._members_changed
        self.proposer: Proposer | None = None
        self.duties: LeaderDuties | None = None
        self._role: tuple[bool, int] = (False, 0)
        self._beginning: int | None = None
        self.started_monotonic = time.monotonic()
        self.skew_blocked = False
        self.stopping = False
        self._handover: asyncio.Task[bool] | None = None
        self.clock_guard = ClockGuard([p.http_url for p in config.peers], len(config.peers) + 1)
        self.stamp_clock = StampClock(local_confirmed=self.clock_guard.confirmed)
        self.clock_guard.on_answer = self.levels.record_answer
        self.transfer = LeadershipTransfer(self.raft)
        self.metrics = NodeMetrics()
        self.duty_settings = DutySettings(
            webhooks=config.webhooks, webhook_secret=config.read_webhook_secret(),
            watchdog_url=config.watchdog_url, watchdog_method=config.watchdog_method,
            watchdog_interval_s=config.watchdog_interval_s, tick_stale_s=config.tick_stale_s,
            retention_s=retention_of(config), outbox_give_up_s=config.outbox_give_up_s,
            outbox_give_up_attempts=config.outbox_give_up_attempts,
            backlog_alert_s=config.backlog_alert_s,
            lease_ahead_ms=int(config.lease_ahead_s * 1000),
            lease_ahead_herd_ms=int(config.lease_ahead_herd_s * 1000),
            lease_ahead_herd_max_ms=int(config.lease_ahead_herd_max_s * 1000),
            herd_size=config.herd_size,
        )

    async def serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.proposer = Proposer(self.raft, self.loop)
        self.raft.on_tick(self._on_tick)
        self._background = [
            asyncio.create_task(self.clock_guard.run(verify=peer_tls(self.config)),
                                name="clock-guard"),
            asyncio.create_task(self._step_down_when_clock_untrusted(), name="clock-step-down"),
            asyncio.create_task(webhook_keys.ensure_cluster_key(
                self.open_reader, self.proposer.propose, now_ms), name="webhook-key"),
            asyncio.create_task(ClusterLevelRaiser(
                self.levels, self._level_members, self.proposer,
            ).run(self._leading_epoch), name="cluster-level"),
        ]
        self._peer_refresher = asyncio.create_task(self._refresh_peers_periodically(),
                                                   name="peer-refresh")
        app = create_app(self)
        soft_fds, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.connections = ConnectionBudget(ConnectionLimits.for_fd_limit(soft_fds))
        log.info("HTTP connections: at most %d open, %d from one address; a request must "
                 "arrive within %.1f s", self.connections.limits.max_connections,
                 self.connections.limits.per_source,
                 self.connections.limits.request_deadline_s)
        config = uvicorn.Config(app, host=self.config.http_host, port=self.config.http_port,
                                http=guarded_protocol(self.connections),
                                log_level="warning", lifespan="on", access_log=False,
                                timeout_keep_alive=KEEP_ALIVE_S, backlog=ACCEPT_BURST,
                                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                                **self.config.server_ssl_options())
        server = _Server(config, on_exit=self._on_exit_signal)
        # uvicorn re-raises the signal it caught once it has shut down; with this handler
        # in place that re-raise returns here instead of killing the process before the
        # leadership handover and close() ran.
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, lambda *_: None) if main else None
        try:
            await server.serve()
        finally:
            self._on_exit_signal()
            if self._handover is not None:
                await self._handover
            if self.duties:
                self.duties.stop()
            if main:
                signal.signal(signal.SIGTERM, previous)

    def _on_exit_signal(self) -> None:
        """Shutdown began (SIGTERM/SIGINT): a leader hands leadership over at once, in
        parallel with uvicorn draining its connections (long polls can take seconds)."""
        self.stopping = True
        if self._handover is None and self.loop is not None:
            self._handover = self.loop.create_task(self.hand_over(), name="handover")

    def close(self) -> None:
        self.checkpointer.stop()
        self.digest_marks.close()
        try:
            self.raft.destroy()
        finally:
            with self.apply_lock:
                self.writer.close()


def retention_of(config: NodeConfig) -> float | None:
    """The node's `retention` (config or `--retention`), else $RAFTCRON_RETENTION, else
    7 days. None: history is kept forever."""
    text = config.retention or os.environ.get("RAFTCRON_RETENTION")
    if text is None:
        return DEFAULT_RETENTION_S
    return parse_duration(text)


def run_node(config: NodeConfig) -> None:
    # A crash in native code (SQLite, the TLS or crypto libraries) leaves every thread's
    # Python stack in the log instead of a bare exit status.
    faulthandler.enable()
    # The Raft thread shares the GIL with the API and the leader's duties. With the default
    # 5 ms switch interval, a CPU-bound thread (compiling thousands of schedules, encoding a
    # 1,000-lease response) makes every GIL hand-off of the Raft thread wait 5 ms, and its
    # heartbeats fall behind the 300 ms election timeout (measured: election storms during
    # herds). 1 ms keeps the Raft thread responsive for a few percent of CPU.
    sys.setswitchinterval(0.001)
    # Every file and directory the node makes is its own alone (state, journal, snapshots,
    # secrets, backups): the state holds webhook keys and target headers.
    os.umask(0o077)
    # Room for client connections beside SQLite, Raft and peers (api.connection_guard).
    raise_fd_limit()
    node = Node(config)
    try:
        asyncio.run(node.serve())
    finally:
        node.close()

