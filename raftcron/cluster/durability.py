"""Closing pysyncobj's fsync gap (ARCHITECTURE §4: its journal is never fsynced).

Raft's safety needs an entry to be on stable storage before a node *acknowledges* it, and
`currentTerm`/`votedFor` to be stable before a vote is granted. pysyncobj writes its journal
through an mmap and never calls msync/fsync, stores the term and vote with a plain rename,
and renames snapshot files without syncing them. A process crash loses nothing (the page
cache survives), but an OS crash or power loss can.

This module makes the file journal durable at the one point that matters: every message a
node sends goes out only after the journal writes before it are synced (a follower's
append-entries acknowledgement, a leader's replication, a vote). Writes are tracked so an
idle node does not sync; a burst of entries in one tick costs one sync. It also syncs the
term/vote meta file and snapshot files (file + directory) when they are replaced.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from typing import Any

import pysyncobj.journal as pj
import pysyncobj.serializer as ps

log = logging.getLogger("raftcron.raft")
# A journal sync this slow is logged (a third of the shortest election timeout).
SLOW_SYNC_S = 0.1

_installed = False


def fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_replace(src: str, dst: str) -> bool:
    """Rename `src` over `dst` with the data and the directory entry on stable storage."""
    with open(src, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(src, dst)
    fsync_dir(dst)
    return True


def _durable_store_meta(self: Any, meta: Any) -> None:
    path = self.getPath()
    with open(path + ".tmp", "wb") as f:
        f.write(pj.dumps(meta))
        f.flush()
        os.fsync(f.fileno())
    shutil.move(path + ".tmp", path)
    fsync_dir(path)


def install_module_patches() -> None:
    """Patch pysyncobj's meta store and snapshot rename (once per process)."""
    global _installed
    if _installed:
        return
    pj.MetaStorer.storeMeta = _durable_store_meta  # type: ignore[method-assign]
    ps.atomicReplace = durable_replace
    _installed = True


class JournalSyncer:
    """Tracks writes to a FileJournal and syncs them before any outgoing message."""

    def __init__(self, journal: Any) -> None:
        self.journal = journal
        self.dirty = False
        self.syncs = 0
        for name in ("add", "clear", "deleteEntriesFrom", "deleteEntriesTo"):
            self._wrap(name)

    def _wrap(self, name: str) -> None:
        original = getattr(self.journal, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.dirty = True
            return original(*args, **kwargs)

        setattr(self.journal, name, wrapper)

    def sync(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        resizable = self.journal._FileJournal__journalFile
        started = time.monotonic()
        resizable.flush()  # msync(MS_SYNC) of the mapping
        os.fsync(resizable._ResizableFile__f.fileno())  # and the file's size/metadata
        self.syncs += 1
        took = time.monotonic() - started
        if took >= SLOW_SYNC_S:
            # The Raft thread waits for it before sending anything, heartbeats included.
            log.warning("journal sync took %.2f s", took)


def make_durable(raft: Any) -> JournalSyncer | None:
    """Install the sync-before-send hook on a constructed SyncObj with a file journal."""
    journal = raft._SyncObj__raftLog
    if not isinstance(journal, pj.FileJournal):
        return None
    syncer = JournalSyncer(journal)
    transport = raft._SyncObj__transport
    original_send = transport.send

    def send(node: Any, message: Any) -> Any:
        syncer.sync()
        return original_send(node, message)

    transport.send = send
    # A single-node cluster sends nothing: sync at the end of every tick as well.
    raft.addOnTickCallback(syncer.sync)
    syncer.sync()
    return syncer
