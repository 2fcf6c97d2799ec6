"""Backups of the replicated state and restoring them into a fresh cluster.

A backup is a consistent copy of one node's state database (`VACUUM INTO` from a read
transaction: every committed apply is in it or not, never half), taken without pausing
the Raft tick thread. It holds the logical state (jobs with their watermarks, occurrences,
attempts, alerts, idempotency records, the cluster clock and the last epoch) and the index
of the last applied log entry of the cluster it came from.

Restoring prepares the data directory of each node of a NEW cluster (every node gets the
same file). The new cluster starts with an empty Raft journal whose first entry is index 1,
while the backup says "applied up to N"; the state machine skips every index <= the
stored one, so a restored database keeping N would silently ignore the new cluster's first
N entries. Restore therefore:

- stores `last_applied_index = 0` and keeps all logical content (the digest excludes that
  key, so every restored node has the same digest as the source node had);
- drops the member records of the old cluster (its peers are not the new cluster's);
- seeds the new node's Raft term (`raft.journal.meta`) with the backup's epoch. Epochs are
  Raft terms and `begin_epoch` only accepts a newer one, so the new cluster's first leader
  opens epoch > the old last epoch: fencing tokens keep growing across the restore, and a
  worker still holding a lease of the old cluster is refused.

Watermarks and the cluster clock are restored as they were: instants already claimed are
never fired again, and instants that passed while no cluster ran are handled by each job's
misfire policy, as after any outage.

A backup is as secret as the state (webhook key, target headers): the file and everything
restore writes are mode 0600, the directories it makes 0700, from the moment they exist
(`raftcron.private_files`), whatever the umask of the process.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from dataclasses import dataclass

from pysyncobj import pickle as raft_pickle

from raftcron.cluster import membership
from raftcron.private_files import create_private_empty, make_private_dirs, open_private
from raftcron.state.db import META_EPOCH, META_LAST_APPLIED, get_meta, set_meta

STATE_FILE = "state.db"
JOURNAL_FILE = "raft.journal"
SNAPSHOT_FILE = "raft.snapshot"
REQUIRED_TABLES = {"meta", "jobs", "occurrences", "attempts", "epochs"}


class BackupError(Exception):
    pass


@dataclass(frozen=True)
class BackupInfo:
    last_applied_index: int
    epoch: int
    jobs: int
    occurrences: int
    size_bytes: int


def write_backup(db_path: str, out_path: str) -> BackupInfo:
    """Copy the state database at `db_path` into a new file `out_path`, consistently.

    `out_path` is made empty with mode 0600 first: `VACUUM INTO` fills an empty file and
    keeps its mode, where a file of its own would be 0644 minus the umask."""
    if os.path.lexists(out_path):
        os.unlink(out_path)
    create_private_empty(out_path)
    src = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        src.execute("VACUUM INTO ?", (out_path,))
    finally:
        src.close()
    return inspect(out_path)


def inspect(path: str) -> BackupInfo:
    """Check that `path` is a raftcron state database and describe it."""
    if os.path.isdir(path):
        raise BackupError(f"{path!r} is a directory, not a backup file")
    if not os.path.isfile(path):
        raise BackupError(f"{path!r} does not exist")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as e:
        raise BackupError(f"{path!r} is not a SQLite database: {e}") from None
    try:
        try:
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            tables = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as e:
            raise BackupError(f"{path!r} is not a SQLite database: {e}") from None
        if check != "ok":
            raise BackupError(f"{path!r} is damaged: {check}")
        missing = REQUIRED_TABLES - tables
        if missing:
            raise BackupError(f"{path!r} is not a raftcron backup (no table "
                              f"{', '.join(sorted(missing))})")
        return BackupInfo(
            last_applied_index=get_meta(conn, META_LAST_APPLIED),
            epoch=get_meta(conn, META_EPOCH),
            jobs=conn.execute("SELECT count(*) FROM jobs").fetchone()[0],
            occurrences=conn.execute("SELECT count(*) FROM occurrences").fetchone()[0],
            size_bytes=os.path.getsize(path),
        )
    finally:
        conn.close()


def _occupied(data_dir: str) -> list[str]:
    names = (STATE_FILE, f"{STATE_FILE}-wal", JOURNAL_FILE, f"{JOURNAL_FILE}.meta",
             SNAPSHOT_FILE)
    return [n for n in names if os.path.exists(os.path.join(data_dir, n))]


def restore(backup_path: str, data_dir: str, force: bool = False) -> BackupInfo:
    """Prepare `data_dir` for a node of a fresh cluster starting from `backup_path`.

    Refuses a data directory that already holds node state unless `force` (which deletes
    that state). Every node of the new cluster must be restored from the same file before
    any of them starts.
    """
    info = inspect(backup_path)
    make_private_dirs(data_dir)
    present = _occupied(data_dir)
    if present and not force:
        raise BackupError(f"{data_dir!r} already holds node state ({', '.join(present)}); "
                          "restore into an empty directory, or pass --force to replace it")
    for name in (*present, f"{STATE_FILE}-shm"):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            os.unlink(path)
    tmp = os.path.join(data_dir, f".restore-{uuid.uuid4().hex}.db")
    create_private_empty(tmp)  # SQLite keeps its mode, and gives it to the journal
    src = sqlite3.connect(f"file:{backup_path}?mode=ro", uri=True)
    dst = sqlite3.connect(tmp, isolation_level=None)
    try:
        src.backup(dst)
        dst.execute("BEGIN IMMEDIATE")
        set_meta(dst, META_LAST_APPLIED, 0)
        dst.execute(f"DROP TABLE IF EXISTS {membership.TABLE}")
        dst.execute("DROP TABLE IF EXISTS _raft")
        dst.execute("COMMIT")
        dst.execute("PRAGMA journal_mode=DELETE")
    finally:
        dst.close()
        src.close()
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(data_dir, STATE_FILE))
    # The new cluster's terms start above the restored epoch (see the module docstring).
    meta = {"currentTerm": info.epoch, "votedForNodeId": None, "raftCommitIndex": 1}
    meta_path = os.path.join(data_dir, f"{JOURNAL_FILE}.meta")
    fd = open_private(meta_path + ".tmp", os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "wb") as f:
        f.write(raft_pickle.dumps(meta))
        f.flush()
        os.fsync(f.fileno())
    os.replace(meta_path + ".tmp", meta_path)
    fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return info
