"""The pysyncobj adapter: one replicated method that feeds the state machine.

Tuning follows ARCHITECTURE §4 (measured on 2 shared cores): pysyncobj's defaults keep
a cut-off leader believing it leads for 30 s and drop the first vote on idle links.
Snapshots are SQLite backups of the state DB (custom serializer, no fork); restoring
one copies it into the live database only when it is newer than what we have.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj import pickle as raft_pickle
from pysyncobj.node import TCPNode
from pysyncobj.serializer import SERIALIZER_STATE
from pysyncobj.syncobj import SyncObjExceptionWrongVer

from raftcron.cluster import durability, membership
from raftcron.cluster.election import ElectionGuard
from raftcron.cluster.transport import GuardedTCPTransport, PortLimits
from raftcron.core.commands import UndecodableCommand
from raftcron.state.db import ensure_schema, get_meta
from raftcron.state.machine import StateMachine

log = logging.getLogger("raftcron.raft")

# SQLite errors that say the machine ran short (descriptors, memory, disk), not that the
# entry is wrong: the apply rolled back whole, and the same entry is applied again once
# the resource is back. Stopping on them would let a client's flood of connections (or a
# full disk) cost the cluster a node; applying them again is deterministic.
RESOURCE_ERRORS = ("unable to open", "out of memory", "disk i/o error", "disk is full",
                   "database is locked")
RESOURCE_RETRY_MAX_S = 2.0


def is_resource_error(e: BaseException) -> bool:
    return isinstance(e, sqlite3.OperationalError) and any(
        text in str(e).lower() for text in RESOURCE_ERRORS)


def retry_resource_errors(index: int, apply: Callable[[], dict[str, Any]],
                          sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """`apply()`, tried again (backing off to RESOURCE_RETRY_MAX_S) for as long as it
    fails for want of a resource; any other error goes to the caller."""
    delay = 0.01
    failures = 0
    while True:
        try:
            return apply()
        except sqlite3.OperationalError as e:
            if not is_resource_error(e):
                raise
            failures += 1
            if failures == 1 or failures % 20 == 0:
                log.error("apply of index %d failed for want of a resource (%s), %d time(s); "
                          "trying again", index, e, failures)
            sleep(delay)
            delay = min(delay * 2, RESOURCE_RETRY_MAX_S)

RAFT_TUNING: dict[str, Any] = {
    "raftMinTimeout": 0.3,
    "raftMaxTimeout": 0.6,
    "appendEntriesPeriod": 0.05,
    "autoTickPeriod": 0.01,
    "connectionTimeout": 3600.0,
    "connectionRetryTime": 0.5,
    "leaderFallbackTimeout": 0.6,
    "commandsWaitLeader": True,
    "logCompactionMinEntries": 5000,
    "logCompactionMinTime": 300,
    "useFork": False,
    # Nodes are added and removed with `raftcron cluster add-node/remove-node`
    # (cluster.membership).
    "dynamicMembershipChange": True,
}


class _QuietTruncation(logging.Filter):
    """pysyncobj logs a CRITICAL 'truncating already-applied log entries' on harmless
    same-term resends (measured, ARCHITECTURE §4): demote it so it does not page."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "already-applied" in str(record.msg) or "already applied" in str(record.msg):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


logging.getLogger("pysyncobj.syncobj").addFilter(_QuietTruncation())


def _fatal(message: str) -> None:
    """A node that cannot apply a committed entry must stop, loudly, rather than diverge."""
    log.critical(message)
    logging.shutdown()
    os._exit(70)


FAILURE_BACKOFF_S = 30.0
# A tick normally ends within autoTickPeriod (0.01 s) plus its work; longer gaps count as
# stalls (RaftNode._forgive_stalls).
NORMAL_TICK_S = 0.02
STALL_FORGIVEN_AFTER_S = 0.03
# How far behind the leader's commit index an entry may be applied and still count as
# applied live (RaftNode.applying_live): a follower in step receives each entry with the
# commit index in the same message; one catching up is further behind.
LIVE_SLACK_ENTRIES = 64
# Stalls this long are logged: half the shortest election timeout, the ones worth knowing
# of when a leader change needs explaining.
STALL_LOGGED_AFTER_S = 0.3
# How long one tick applies committed entries before it lets the tick go on (send the
# leader's appends, answer the leader, read the sockets) and leaves the rest to the next
# tick (RaftNode._SyncObj__applyLogEntries). Well under the shortest election timeout.
APPLY_BUDGET_S = 0.1


class SnapshotStore:
    """Custom pysyncobj serializer/deserializer over the state DB.

    Taking a snapshot must not stall the Raft thread: a SQLite backup of a few hundred MB
    takes seconds, long enough for followers to elect someone else (measured in the soak:
    the leader stepped down at every compaction). So `serialize`, called on the Raft thread
    between two applies, only pins a read transaction on a fresh connection - the exact
    state at the applied index it is asked to snapshot - and a background thread copies that
    pinned state into the snapshot file. `check` (pysyncobj's serializeChecker) reports the
    copy in progress; pysyncobj drops journal entries only after it reports success, and does
    not transmit the snapshot file to a follower meanwhile. A crash mid-copy leaves the
    previous snapshot and the whole journal.
    """

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock,
                 db_path: str | None = None) -> None:
        self.conn = conn
        self.lock = lock
        self.db_path = db_path
        self._state = SERIALIZER_STATE.NOT_SERIALIZING
        self._copier: threading.Thread | None = None
        self._copied: tuple[str, int] | None = None  # (final path, installs) once written
        self._installs = 0  # bumped by every snapshot installed from the leader
        self._failed_at = -FAILURE_BACKOFF_S

    def serialize(self, tmp_path: str, raft_meta: Any) -> None:
        """On the Raft thread. Never raises: any failure is reported FAILED by `check`, or
        pysyncobj would stop compacting (and sending snapshots) for good."""
        final_path = tmp_path.removesuffix(".tmp")
        reader: sqlite3.Connection | None = None
        try:
            if os.path.exists(tmp_path):
                os.unlink(tmp_path)  # pysyncobj's own rename of it then fails harmlessly
            if time.monotonic() - self._failed_at < FAILURE_BACKOFF_S:
                self._state = SERIALIZER_STATE.FAILED  # do not retry a failure every tick
                return
            if self.db_path is None:  # no file to pin a reader on: copy right here
                with self.lock:
                    self._copy_now(self.conn, final_path + ".copy", raft_meta)
                durability.durable_replace(final_path + ".copy", final_path)
                self._state = SERIALIZER_STATE.SUCCESS
                return
            reader = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True,
                                     isolation_level=None, check_same_thread=False)
            with self.lock:
                reader.execute("BEGIN")
                reader.execute("SELECT count(*) FROM meta").fetchone()  # pins this state
            self._copied = None
            self._copier = threading.Thread(
                target=self._copy_in_background,
                args=(reader, final_path, raft_meta, self._installs),
                name="snapshot-copy", daemon=True)
            self._copier.start()
            self._state = SERIALIZER_STATE.SERIALIZING
        except Exception:  # noqa: BLE001
            log.exception("cannot start a snapshot")
            if reader is not None and (self._copier is None or not self._copier.is_alive()):
                reader.close()
            self._fail()

    def _fail(self) -> None:
        self._failed_at = time.monotonic()
        self._state = SERIALIZER_STATE.FAILED

    def _copy_now(self, src: sqlite3.Connection, path: str, raft_meta: Any) -> None:
        if os.path.exists(path):
            os.unlink(path)
        dst = sqlite3.connect(path)
        try:
            src.backup(dst)
            dst.execute("CREATE TABLE IF NOT EXISTS _raft (meta BLOB NOT NULL)")
            dst.execute("INSERT INTO _raft (meta) VALUES (?)", (raft_pickle.dumps(raft_meta),))
            dst.commit()
        finally:
            dst.close()
        with open(path, "rb+") as f:
            os.fsync(f.fileno())

    def _copy_in_background(self, reader: sqlite3.Connection, final_path: str,
                            raft_meta: Any, installs: int) -> None:
        """Writes and syncs `<snapshot>.copy`; `check`, on the Raft thread, renames it."""
        try:
            self._copy_now(reader, final_path + ".copy", raft_meta)
            self._copied = (final_path, installs)
        except Exception:  # noqa: BLE001 - a failed snapshot is retried by pysyncobj
            log.exception("snapshot copy failed")
            with contextlib.suppress(OSError):
                os.unlink(final_path + ".copy")
            self._fail()
        finally:
            reader.close()

    def check(self) -> int:
        """pysyncobj's serializeChecker, on the Raft thread: SUCCESS or FAILED once.

        The finished copy is renamed into place here, on the thread that also installs
        snapshots from the leader, so a snapshot installed while the copy ran is never
        overwritten by this older one."""
        if self._state == SERIALIZER_STATE.SERIALIZING and self._copied is not None:
            final_path, installs = self._copied
            self._copied = None
            try:
                if self._installs != installs:  # a newer snapshot arrived meanwhile
                    os.unlink(final_path + ".copy")
                    self._state = SERIALIZER_STATE.FAILED
                else:
                    os.replace(final_path + ".copy", final_path)
                    durability.fsync_dir(final_path)
                    self._state = SERIALIZER_STATE.SUCCESS
            except OSError:
                log.exception("cannot put the snapshot in place")
                self._fail()
        state = self._state
        if state in (SERIALIZER_STATE.SUCCESS, SERIALIZER_STATE.FAILED):
            self._state = SERIALIZER_STATE.NOT_SERIALIZING
        return state

    def deserialize(self, path: str) -> Any:
        src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            meta = raft_pickle.loads(src.execute("SELECT meta FROM _raft").fetchone()[0])
            snap_index = get_meta(src, "last_applied_index")
            with self.lock:
                self._installs += 1
                if snap_index > get_meta(self.conn, "last_applied_index"):
                    log.warning("installing snapshot at index %d", snap_index)
                    src.backup(self.conn)
                    self.conn.execute("DROP TABLE IF EXISTS _raft")
                    # A snapshot from a node of an older version lacks the newer indexes
                    # and columns.
                    ensure_schema(self.conn)
        finally:
            src.close()
        return self._with_members(meta)

    def _with_members(self, meta: Any) -> Any:
        """pysyncobj replaces its topology with the snapshot's (#133), which misses changes
        made after the snapshot was taken: apply the replicated member records to it."""
        try:
            with self.lock:
                members = membership.read_members(self.conn)
            if not members or not isinstance(meta, tuple) or len(meta) < 4:
                return meta
            gone = membership.removed_addrs(members)
            active = {m.raft_addr for m in members if not m.removed}
            cluster = {n for n in meta[3] if n.address not in gone - active}
            known = {n.address for n in cluster}
            cluster |= {TCPNode(addr) for addr in active - known}
            return (*meta[:3], cluster, *meta[4:])
        except Exception:  # noqa: BLE001 - never fail a snapshot load over this
            log.exception("cannot apply member records to the snapshot topology")
            return meta


class RaftNode(ElectionGuard, SyncObj):
    """SyncObj with one replicated method: `submit(command_bytes)`, and pre-vote
    (cluster.election). The `[raft]` option `preVote = false` makes the node behave as a
    version without pre-vote (no rounds, no answers), e.g. to compare or to roll back."""

    def __init__(
        self,
        self_addr: str,
        peer_addrs: list[str],
        machine: StateMachine,
        data_dir: str,
        password: str,
        apply_lock: threading.Lock,
        extra_conf: dict[str, Any] | None = None,
        durable: bool = True,
        db_path: str | None = None,
        port_limits: PortLimits | None = None,
    ) -> None:
        self._machine = machine
        # Read by GuardedTCPTransport: what a stranger on the Raft port may cost.
        self.port_limits = port_limits or PortLimits()
        self._apply_lock = apply_lock
        self.on_members_changed: Callable[[], None] | None = None
        self._store = SnapshotStore(machine.conn, apply_lock, db_path)
        options = {**RAFT_TUNING, **(extra_conf or {})}
        pre_vote = bool(options.pop("preVote", True))
        conf = SyncObjConf(
            password=password,
            journalFile=os.path.join(data_dir, "raft.journal"),
            fullDumpFile=os.path.join(data_dir, "raft.snapshot"),
            serializer=self._store.serialize,
            deserializer=self._store.deserialize,
            serializeChecker=self._store.check,
            **options,
        )
        if durable:
            durability.install_module_patches()
        self._last_tick = time.monotonic()
        self._init_election_guard(pre_vote=pre_vote)
        super().__init__(self_addr, peer_addrs, conf, transportClass=GuardedTCPTransport)
        self.addOnTickCallback(self._forgive_stalls)
        # Sync the journal before any message leaves this node (see cluster.durability).
        self.journal_syncer = durability.make_durable(self) if durable else None

    def _forgive_stalls(self) -> None:
        """Do not count a stalled tick as silence from the other nodes.

        pysyncobj checks its election deadline (follower) and its followers' last answers
        (leader, leaderFallbackTimeout) at the start of a tick, but reads the messages that
        arrived meanwhile only at its end. A tick that took 400 ms (applying a burst of
        large entries such as a herd's claims and leases, a slow journal fsync, or the
        process not being scheduled on a loaded machine) thus made a healthy follower start
        an election, or a healthy leader step down, before it read the heartbeats waiting
        in its sockets: election storms under load (measured: 13 terms in 15 s). The time
        between two ticks beyond a normal tick is added back to those deadlines. Timeouts
        govern only liveness in Raft: no safety property changes. An idle node's ticks are
        ~10 ms apart, so a dead leader is still detected on time.
        """
        now = time.monotonic()
        stall, self._last_tick = now - self._last_tick - NORMAL_TICK_S, now
        if stall < STALL_FORGIVEN_AFTER_S:
            return
        self.note_stall(stall)
        if stall >= STALL_LOGGED_AFTER_S:
            log.info("Raft thread stalled %.2f s (applying entries, syncing the journal or "
                     "not scheduled); forgiven in the election timers", stall)
        if self._isLeader():
            last = self._SyncObj__lastResponseTime
            for node in last:
                last[node] += stall
        else:
            self._SyncObj__raftElectionDeadline += stall

    def _SyncObj__applyLogEntries(self) -> bool:  # noqa: N802 - pysyncobj's
        """pysyncobj's own loop over the committed entries, stopped once APPLY_BUDGET_S
        has passed: the rest are applied in the next ticks.

        pysyncobj applies every committed entry in one tick, and only then does the leader
        send its appends (heartbeats) and a follower read and answer them. A herd's
        completions (33 entries of 1,000 runs, up to 0.2 s each on a loaded machine) made
        one tick last longer than the election timeout: the followers heard nothing and
        elected a new leader, in the middle of the herd (seen in bench/herd.py). Entries
        are applied in order and exactly once either way; only the tick they are applied
        in changes."""
        commit = self._SyncObj__raftCommitIndex
        if commit <= self._SyncObj__raftLastApplied:
            return False
        waiting = self._SyncObj__commandsWaitingCommit
        entries = self._SyncObj__getEntries(self._SyncObj__raftLastApplied + 1,
                                            commit - self._SyncObj__raftLastApplied)
        until = time.monotonic() + APPLY_BUDGET_S
        for entry in entries:
            try:
                term_of_entry = entry[2]
                subscribers = waiting.pop(entry[1], [])
                result = self._SyncObj__doApplyCommand(entry[0])
                for subscribed_term, callback in subscribers:
                    if subscribed_term == term_of_entry:
                        callback(result, FAIL_REASON.SUCCESS)
                    else:
                        callback(None, FAIL_REASON.DISCARDED)
                self._SyncObj__raftLastApplied += 1
            except SyncObjExceptionWrongVer as e:
                log.error("request to switch to unsupported code version (self version: "
                          "%d, requested version: %d)", self._SyncObj__selfCodeVersion, e.ver)
            if time.monotonic() >= until:
                break
        return not self._SyncObj__conf.appendEntriesUseBatch

    def _SyncObj__sendNextNodeIdx(self, node: Any, reset: bool = False,  # noqa: N802
                                  nextNodeIdx: int | None = None,  # noqa: N803
                                  success: bool = False) -> None:
        """Answer a refused append with an index the leader can converge on.

        pysyncobj's follower answers a refused append (its entry at `prevLogIdx` has
        another term, or it has no entry there) with `prevLogIdx`, or with its own last
        index + 1. Its leader sends the whole log tail every heartbeat, in several
        messages, and takes the *last* answer as the next index. A follower holding
        entries of a dead term (a leader cut off while it still appended) is then told
        "my last + 1" by the later messages after "prevLogIdx" by the first: the leader
        never goes below the follower's stale tail, and the follower stays stuck at its
        commit index until the leader compacts its log and sends a snapshot (minutes;
        a chaos run saw 6 min, during which one more fault left no majority).

        Every entry up to the follower's commit index is committed, so the leader has the
        same entries there (Raft's log matching): answering commit index + 1 to every
        refused append is always a point the leader can resume from, and every refused
        message of one round gives the same answer. Acknowledgements and snapshot
        transmissions (reset False) are left as they are."""
        if reset and not success:
            committed = min(self._SyncObj__raftCommitIndex, self.last_log_index())
            fallback = committed + 1
            nextNodeIdx = fallback if nextNodeIdx is None else min(nextNodeIdx, fallback)
        SyncObj._SyncObj__sendNextNodeIdx(self, node, reset=reset, nextNodeIdx=nextNodeIdx,
                                          success=success)

    def last_log_index(self) -> int:
        """The index of the newest entry in this node's log, committed or not."""
        return int(self._SyncObj__getCurrentLogIndex())

    @replicated
    def submit(self, data: bytes) -> dict[str, Any]:
        # The entry being applied is raftLastApplied + 1 (never read the term here:
        # it is not deterministic during replay).
        index = self.raftLastApplied + 1
        try:
            if membership.is_member_op(data):
                with self._apply_lock:
                    result = retry_resource_errors(
                        index, lambda: membership.apply_op(self._machine.conn, index, data))
                if self.on_members_changed is not None and not result.get("replayed"):
                    self.on_members_changed()
                return result
            with self._apply_lock:
                return retry_resource_errors(
                    index, lambda: self._machine.apply_bytes(index, data))
        except UndecodableCommand as e:
            _fatal(f"log entry {index} cannot be decoded by this build: {e}")
        except Exception as e:  # noqa: BLE001
            log.exception("apply failed at index %d", index)
            _fatal(f"apply failed at index {index}: {e!r}; stopping to avoid divergence")
        raise AssertionError("unreachable")

    def applying_live(self) -> bool:
        """Whether the entry being applied now (call it from the apply path) is applied
        live: this node finished its startup replay and is within `LIVE_SLACK_ENTRIES` of
        the commit index the leader last told it. An entry replayed from the journal or
        applied while catching up was proposed long before it is applied here."""
        leader_commit = self._SyncObj__leaderCommitIndex
        if not self.isReady() or leader_commit is None:
            return False
        return int(self.raftLastApplied) + 1 >= int(leader_commit) - LIVE_SLACK_ENTRIES

    # Read-only views used by the node (called from other threads; plain attribute reads).
    def is_leader(self) -> bool:
        return self._isLeader()

    def term(self) -> int:
        return self._getTerm()

    def leader_addr(self) -> str | None:
        leader = self._getLeader()
        return leader.address if leader is not None else None

    def on_tick(self, callback: Callable[[], None]) -> None:
        self.addOnTickCallback(callback)

    def submit_raw(self, data: bytes, callback: Callable[[Any, int], None]) -> None:
        """Propose already encoded bytes (member operations use this)."""
        self.submit(data, callback=callback)

    def other_addrs(self) -> set[str] | None:
        """The Raft addresses this node currently counts as voters besides itself; None
        when the status could not be read (callers must not take that as "no voters")."""
        for _ in range(3):
            try:
                status = self.getStatus()
            except RuntimeError:  # a dict changed size under the tick thread
                continue
            prefix = "partner_node_status_server_"
            return {k[len(prefix):] for k in status if k.startswith(prefix)}
        return None
