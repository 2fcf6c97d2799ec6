"""Digest marks: this node's state digest at one exact log index.

Nodes that keep applying are seldom at the same index when asked for `/v1/digest`, so
two digests read at the same moment usually describe different indexes and prove nothing.
A digest mark names the index instead: it is an ordinary `Barrier` entry whose
`request_id` starts with `digest-mark-` (no new command, no protocol level: a build that
knows nothing of marks applies it as a plain barrier and records nothing).

Every entry is applied in one SQLite transaction, so right after the mark's transaction
commits the database is exactly at the mark's index. There, still on the applying thread
(under the apply lock, before the next entry), `DigestMarks.on_applied` opens a read-only
connection and pins that state in a read transaction (a WAL snapshot: a millisecond).
The digest of the pinned state is computed on a thread of its own, so a large state never
stalls the Raft thread, and kept in memory only: a table would change the state the
digest describes. The registry is a side effect outside the replicated state; `apply`
itself reads no clock and no randomness. It keeps the newest `capacity` marks per node.

A mark applied twice (a proposal retried after an unknown outcome) keeps its first
index: every node applies the same log, so every node keeps the same one.
"""

from __future__ import annotations

import logging
import queue
import re
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from raftcron.core import commands as c
from raftcron.state.db import last_applied
from raftcron.state.digest import digest

log = logging.getLogger("raftcron.digest_marks")

MARK_PREFIX = "digest-mark-"
MARK_RE = re.compile(r"digest-mark-[0-9a-f]{32}")
MARK_PATTERN = f"^{MARK_RE.pattern}$"
DEFAULT_CAPACITY = 32


def new_mark() -> str:
    """A fresh mark id (the request id of the barrier that makes it)."""
    return MARK_PREFIX + uuid.uuid4().hex


def is_mark_id(text: str) -> bool:
    return MARK_RE.fullmatch(text) is not None


def mark_of(cmd: c.Command) -> str | None:
    """The mark a command makes, or None: a barrier whose request id is a mark id."""
    if isinstance(cmd, c.Barrier) and is_mark_id(cmd.request_id):
        return cmd.request_id
    return None


@dataclass(frozen=True, slots=True)
class MarkDigest:
    """One mark on this node: its index and, once computed, the digest or the error."""

    mark: str
    index: int
    digest: str | None = None
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.digest is not None or self.error is not None


class DigestMarks:
    """The marks this node applied, newest `capacity` of them, with their digests.

    `on_applied` runs on the applying thread right after an entry committed (the state
    machine's listener); `get` and `wait` from any thread. `open_snapshot` opens a
    read-only connection to the state database; `compute` hashes a connection's state
    (`state.digest.digest`, replaceable in tests)."""

    def __init__(self, open_snapshot: Callable[[], sqlite3.Connection],
                 capacity: int = DEFAULT_CAPACITY,
                 compute: Callable[[sqlite3.Connection], str] = digest) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._open_snapshot = open_snapshot
        self._compute = compute
        self.capacity = capacity
        self._marks: OrderedDict[str, MarkDigest] = OrderedDict()
        self._changed = threading.Condition()
        self._work: queue.Queue[tuple[str, sqlite3.Connection] | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._closed = False
        self._stopping = threading.Event()

    # --- the applying thread ---------------------------------------------------------------

    def on_applied(self, cmd: c.Command, result: dict[str, Any]) -> None:
        """Pin the state of a mark just applied and queue its digest. Never raises: the
        entry is committed, and a failure here is recorded as the mark's error."""
        mark = mark_of(cmd)
        if mark is None or not result.get("ok") or result.get("replayed"):
            return  # a replayed entry: the database is already past its index
        index = result.get("index")
        if not isinstance(index, int):
            return
        with self._changed:
            if mark in self._marks or self._closed:
                return
        try:
            conn = self._pin(index)
        except Exception as e:  # noqa: BLE001 - recorded, never raised into apply
            log.warning("digest mark %s at index %d: cannot pin the state: %s", mark,
                        index, e)
            self._record(MarkDigest(mark, index, error=f"cannot pin the state: {e}"))
            return
        self._record(MarkDigest(mark, index))
        self._start_worker()
        self._work.put((mark, conn))

    def _pin(self, index: int) -> sqlite3.Connection:
        """A connection inside a read transaction at exactly `index`."""
        conn = self._open_snapshot()
        try:
            conn.execute("BEGIN")
            pinned = last_applied(conn)  # the first read fixes the WAL snapshot
            if pinned != index:
                raise RuntimeError(f"the snapshot is at index {pinned}, not {index}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _record(self, entry: MarkDigest) -> None:
        with self._changed:
            self._marks[entry.mark] = entry
            while len(self._marks) > self.capacity:
                self._marks.popitem(last=False)  # the oldest; a pending one is skipped
            self._changed.notify_all()

    # --- the digest thread -----------------------------------------------------------------

    def _start_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._run, name="digest-marks",
                                            daemon=True)
            self._worker.start()

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            mark, conn = item
            try:
                self._digest_one(mark, conn)
            finally:
                conn.close()

    def _digest_one(self, mark: str, conn: sqlite3.Connection) -> None:
        with self._changed:
            entry = self._marks.get(mark)
        if entry is None or self._closed:
            return  # evicted while it waited
        started = time.monotonic()
        try:
            done = replace(entry, digest=self._compute(conn))
        except Exception as e:  # noqa: BLE001 - recorded as the mark's error
            log.warning("digest mark %s at index %d: the digest failed: %s", mark,
                        entry.index, e)
            done = replace(entry, error=f"the digest failed: {type(e).__name__}: {e}")
        with self._changed:
            if mark in self._marks:
                self._marks[mark] = done
                self._changed.notify_all()
        # Hashing holds the GIL, which the Raft thread needs for its heartbeats: the next
        # digest waits as long as this one took, so marks take at most half a core.
        self._stopping.wait(time.monotonic() - started)

    # --- readers -----------------------------------------------------------------------------

    def get(self, mark: str) -> MarkDigest | None:
        """The mark as this node holds it (None: not applied here, evicted, or unknown)."""
        with self._changed:
            return self._marks.get(mark)

    def wait(self, mark: str, timeout_s: float) -> MarkDigest | None:
        """The mark once its digest is done, waiting up to `timeout_s`; else as it is."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                entry = self._marks.get(mark)
                left = deadline - time.monotonic()
                if entry is None or entry.done or left <= 0 or self._closed:
                    return entry
                self._changed.wait(left)

    def close(self) -> None:
        """Stop the digest thread; marks still waiting are dropped (their snapshots
        released)."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._stopping.set()
        self._work.put(None)
        worker = self._worker
        if worker is not None:
            worker.join(timeout=5)
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                item[1].close()
