"""Composition root of one node: SQLite state, Raft, leader duties and the HTTP API."""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import resource
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from types import FrameType
from typing import Any

import uvicorn

from raftcron.api.connection_guard import (
    ConnectionBudget,
    ConnectionLimits,
    guarded_protocol,
    raise_fd_limit,
)
from raftcron.api.metrics import NodeMetrics
from raftcron.cluster import membership
from raftcron.cluster.levels import ClusterLevels, level_members, spoken_level
from raftcron.cluster.peer_tls import peer_tls
from raftcron.cluster.proposer import ProposalError, Proposer, post_to_loop
from raftcron.cluster.raft import RaftNode
from raftcron.cluster.stamp_clock import StampClock
from raftcron.cluster.transfer import LeadershipTransfer
from raftcron.config import NodeConfig
from raftcron.core import commands as c
from raftcron.core.protocol import PROTOCOL_LEVEL
from raftcron.core.timefmt import parse_duration
from raftcron.leader import webhook_keys
from raftcron.leader.clock import ClockGuard
from raftcron.leader.cluster_level import ClusterLevelRaiser
from raftcron.leader.dispatch import freed_by
from raftcron.leader.duties import DutySettings, LeaderDuties
from raftcron.leader.retention import DEFAULT_RETENTION_S
from raftcron.leader.ticker import now_ms
from raftcron.state import db
from raftcron.state.cluster_level import committed_level
from raftcron.state.digest_marks import DigestMarks
from raftcron.state.machine import StateMachine

log = logging.getLogger("raftcron.node")

JOB_COMMANDS = (c.PutJob, c.CreateJobs, c.DeleteJob, c.PauseJob, c.ResumeJob)
WORK_COMMANDS = (c.Claim, c.TriggerManual, c.Backfill, c.Complete, c.Sweep, c.Release,
                 c.PutJob, c.ResumeJob, c.DeleteJob, c.PutTenant, c.PutConcurrencyGroup)
OUTBOX_COMMANDS = (c.RaiseAlert, c.ResolveAlert, c.Complete, c.Sweep, c.RetryOutbox)


def changed_job_ids(cmd: c.Command) -> set[str]:
    """The jobs a job command touched: the ticker reloads exactly these."""
    if isinstance(cmd, c.CreateJobs):
        return {job["id"] for job in cmd.jobs}
    if isinstance(cmd, c.PutJob):
        return {cmd.job["id"]}
    return {cmd.job_id}  # type: ignore[attr-defined]
MAX_CLOCK_BEHIND_MS = 2000
BEGIN_EPOCH_RETRY_S = 0.2
HANDOVER_TIMEOUT_S = 2.0
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


class Node:
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
            herd_size=config.herd_size,
        )

    # --- reads ---------------------------------------------------------------------------

    def open_reader(self) -> sqlite3.Connection:
        return db.open_reader(self.config.db_path)

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

    # --- tick-thread hooks -----------------------------------------------------------------

    def _on_applied(self, cmd: c.Command, result: dict[str, Any]) -> None:
        # First: right after the entry's transaction, before the next one (a mark pins
        # the state at its own index).
        self.digest_marks.on_applied(cmd, result)
        if isinstance(cmd, c.SetClusterLevel) and result.get("ok"):
            self.levels.note_committed(int(result.get("level", 0)))
        loop = self.loop
        if loop is None or not result.get("ok"):
            return
        if cmd.LEADER_ONLY or isinstance(cmd, c.BeginEpoch):
            # This node's clock minus the leader's, as committed (plus replication delay).
            sent_ms: int = cmd.now_ms  # type: ignore[attr-defined]
            self.metrics.skew_ms = int(time.time() * 1000) - sent_ms
            if isinstance(cmd, c.BeginEpoch | c.ConfirmClock):
                # Proposed only while a majority confirms the leader's clock.
                epoch = cmd.term if isinstance(cmd, c.BeginEpoch) else cmd.epoch
                self.stamp_clock.observe(sent_ms, epoch, self.raft.applying_live())
        post_to_loop(loop, self._handle_applied, cmd, result)

    def _handle_applied(self, cmd: c.Command, result: dict[str, Any]) -> None:
        if isinstance(cmd, c.BeginEpoch):
            self.metrics.epoch_changes.inc()
        duties = self.duties
        if duties is None or duties.stopped:
            return
        if isinstance(cmd, c.Lease) and cmd.epoch == duties.epoch:
            self.metrics.observe_leases(cmd.now_ms, result.get("leases") or [])
        if isinstance(cmd, OUTBOX_COMMANDS):
            duties.outbox.notify()
        if isinstance(cmd, JOB_COMMANDS):
            duties.ticker.notify_jobs_changed(changed_job_ids(cmd))
        if isinstance(cmd, c.BulkPause):
            duties.ticker.notify_jobs_changed(set(result.get("job_ids") or ()))
            duties.dispatcher.notify()
        if isinstance(cmd, c.PutCalendar | c.DeleteCalendar):
            duties.ticker.notify_calendars_changed()
        if isinstance(cmd, WORK_COMMANDS):
            jobs, tenants = freed_by(cmd)
            duties.dispatcher.free(jobs, tenants)
            duties.dispatcher.notify()

    def _on_tick(self) -> None:
        role = (self.raft.is_leader(), self.raft.term())
        if role != self._role:
            self._role = role
            if self.loop is not None:
                post_to_loop(self.loop, self._role_changed, role)

    # --- leadership ----------------------------------------------------------------------

    def _role_changed(self, role: tuple[bool, int]) -> None:
        is_leader, term = role
        log.info("term %d: %s", term, "leader" if is_leader else
                 f"follower (leader at {self.raft.leader_addr() or 'none yet'})")
        if self.duties and (not is_leader or term != self.duties.epoch):
            log.info("stopping leader duties of epoch %d", self.duties.epoch)
            self.duties.stop()
            self.duties = None
        if is_leader and self.duties is None and self._beginning != term and not self.stopping:
            self._beginning = term
            asyncio.get_running_loop().create_task(self._begin_epoch(term))

    async def _commit_begin_epoch(self, term: int) -> dict[str, Any] | None:
        """Propose `begin_epoch(term)` until its result is known, while this node leads
        `term` with a confirmed clock. None: leadership moved on first.

        A proposal that timed out may still commit (a follower catching up holds the
        majority back for a while): giving up would leave a leader without duties until
        the next election, firing nothing (a chaos run saw 70 s). Proposing again is safe:
        a second `begin_epoch` of the same term is refused as not newer, with the epoch,
        and that answer means "begun"."""
        assert self.proposer is not None
        while True:
            if not await self._wait_clock_confirmed(term):
                return None
            try:
                return await self.proposer.propose_leader(
                    c.BeginEpoch(term, self.config.node_id, int(time.time() * 1000))
                )
            except ProposalError as e:
                log.warning("begin_epoch(%d) not committed yet (%s): proposing it again",
                            term, e.message)
            await asyncio.sleep(BEGIN_EPOCH_RETRY_S)
            if self._role != (True, term) or self.stopping:
                return None

    async def _begin_epoch(self, term: int) -> None:
        result = await self._commit_begin_epoch(term)
        if result is None:
            self._beginning = None
            return
        if not result.get("ok") and result.get("epoch") != term:
            log.info("begin_epoch(%d) rejected: %s", term, result.get("message"))
            self._beginning = None
            return
        if self._role != (True, term):
            self._beginning = None
            return
        clock_ms = result.get("clock_ms", 0)
        while int(time.time() * 1000) < clock_ms - MAX_CLOCK_BEHIND_MS:
            # Time never goes backwards in the state: a leader whose clock is behind the
            # newest committed time must not tick until it catches up.
            if not self.skew_blocked:
                log.error("clock is %d ms behind the cluster; not ticking",
                          clock_ms - int(time.time() * 1000))
            self.skew_blocked = True
            await asyncio.sleep(0.5)
            if self._role != (True, term):
                self._beginning = None
                return
        self.skew_blocked = False
        self._beginning = None
        if self.stopping:
            return
        log.info("epoch %d begins on %s", term, self.config.node_id)
        self.duties = LeaderDuties(term, self.proposer, self.open_reader, self._duties_exited,
                                   self.duty_settings, self.metrics.on_duty_event)
        for duty in (self.duties.ticker, self.duties.sweeper, self.duties.dispatcher,
                     self.duties.deadlines, self.duties.retention, self.duties.backlog,
                     self.duties.run_bounds, self.duties.availability):
            if duty is not None:
                duty.gate = self.clock_guard.confirmed
        for duty in (self.duties.dispatcher, self.duties.deadlines, self.duties.availability,
                     self.duties.sweeper):
            duty.level = self.levels.writable
        self.duties.start()

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

    def _leading_epoch(self) -> int | None:
        """The epoch whose duties run on this node (None: it does not lead one)."""
        duties = self.duties
        return None if duties is None or duties.stopped else duties.epoch

    async def _wait_clock_confirmed(self, term: int) -> bool:
        """Until a majority confirms this node's clock, while it still leads `term`.

        An unconfirmed leader proposes no command of its own, not even `begin_epoch`:
        each would carry its clock (`now_ms`), and a fast clock committed once holds back
        every later leader (the MAX_CLOCK_BEHIND_MS wait). Meanwhile the step-down loop
        hands leadership to a peer. False: leadership moved on first."""
        logged = False
        while not self.clock_guard.confirmed():
            if not logged:
                log.warning("term %d: leader, but this node's clock is not confirmed by a "
                            "majority yet: beginning no epoch, leasing nothing", term)
                logged = True
            await asyncio.sleep(0.1)
            if self._role != (True, term) or self.stopping:
                return False
        if logged:
            log.info("term %d: clock confirmed by a majority", term)
        return True

    async def _step_down_when_clock_untrusted(self) -> None:
        """A leader whose clock no majority confirms (off, not measured, or its probes
        failing) does not tick; after a few seconds it hands leadership to a peer
        instead of leaving the cluster idle."""
        untrusted_since: float | None = None
        handing_over = False
        while True:
            await asyncio.sleep(0.5)
            if not self.raft.is_leader() or self.clock_guard.confirmed():
                untrusted_since = None
                handing_over = False
                continue
            if untrusted_since is None:
                untrusted_since = time.monotonic()
                log.error("clock not confirmed by a majority (skew %s ms, %d of %d peers "
                          "agree): not ticking", self.clock_guard.skew_ms(),
                          self.clock_guard.agreeing(), len(self.clock_guard.peer_urls))
            elif handing_over or time.monotonic() - untrusted_since > 3.0:
                # Hand over to a peer that answers (a paused peer still accepts TCP and
                # would swallow the request). pysyncobj denies a transfer to a follower
                # that lacks an entry (a heartbeat in flight, common under load), so it is
                # asked again every half second until this node no longer leads: with
                # pre-vote, no stray election deposes a leader that does not tick.
                alive = self.clock_guard.recently_seen()
                by_url = {p.http_url: p.raft_addr for p in self.config.peers}
                target = next((by_url[u] for u in alive if u in by_url), None)
                if not handing_over:
                    log.error("handing leadership over to %s: this node's clock is not "
                              "confirmed", target or "any follower")
                handing_over = True
                self.transfer.request(target)

    def _duties_exited(self, duties: LeaderDuties, exc: BaseException | None) -> None:
        if self.duties is duties:
            self.duties = None
        # Still leader in the same term (e.g. a transient proposal timeout): begin again.
        if self._role[0] and self._role[1] == duties.epoch and self._beginning is None:
            self._beginning = duties.epoch
            asyncio.get_running_loop().call_later(
                0.2, lambda: asyncio.ensure_future(self._begin_epoch(duties.epoch))
            )

    # --- run -----------------------------------------------------------------------------

    async def serve(self) -> None:
        from raftcron.api.app import create_app

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
                                timeout_keep_alive=KEEP_ALIVE_S,
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

    async def hand_over(self, timeout_s: float = HANDOVER_TIMEOUT_S) -> bool:
        """Stop the leader duties and ask pysyncobj to transfer leadership to a caught-up
        follower (Raft TimeoutNow), waiting until this node no longer leads. A follower
        returns at once. True when leadership moved within `timeout_s`."""
        if not self.raft.is_leader():
            return False
        if self.duties:
            self.duties.stop()
            self.duties = None
        term = self.raft.term()
        deadline = time.monotonic() + timeout_s
        log.info("shutting down as leader of term %d: transferring leadership", term)
        while self.raft.is_leader() and time.monotonic() < deadline:
            # The target must have every entry: a denied request (a heartbeat still in
            # flight) is simply asked again.
            done = self.transfer.request()
            until = min(deadline, time.monotonic() + 0.3)
            while self.raft.is_leader() and time.monotonic() < until:
                await asyncio.sleep(0.01 if not done.is_set() else 0.02)
        if self.raft.is_leader():
            log.warning("leadership transfer did not complete within %.1f s; stopping "
                        "anyway (the others elect a leader after the election timeout)",
                        timeout_s)
            return False
        log.info("leadership handed over (term %d -> %d, leader %s)", term, self.raft.term(),
                 self.raft.leader_addr())
        return True

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
