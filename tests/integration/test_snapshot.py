"""Snapshots are SQLite backups; restoring swaps in only a newer state."""

from __future__ import annotations

import threading
from pathlib import Path

from raftcron.cluster.raft import SnapshotStore
from raftcron.core import commands as c
from raftcron.core.model import parse_job
from raftcron.state.db import last_applied, open_writer
from raftcron.state.digest import digest
from raftcron.state.machine import StateMachine

META = ("last-entry", "prev-entry", {"cluster"})


def build(path: Path, jobs: int) -> StateMachine:
    m = StateMachine(open_writer(str(path)))
    index = 1
    m.apply(index, c.BeginEpoch(1, "n1", 1000))
    for i in range(jobs):
        index += 1
        spec = parse_job({"id": f"j{i}", "schedule": {"cron": "* * * * * *"},
                          "target": {"shell": "true"}}).to_spec()
        m.apply(index, c.PutJob(f"r{i}", 1000, spec, True))
    index += 1
    m.apply(index, c.Claim(1, 2000, [[f"j{i}", 1, 2000, 2000, "fire"] for i in range(jobs)]))
    return m


def test_snapshot_installs_into_an_empty_follower(tmp_path: Path) -> None:
    leader = build(tmp_path / "leader.db", 5)
    snap = tmp_path / "snap.db"
    SnapshotStore(leader.conn, threading.Lock()).serialize(str(snap), META)
    follower = open_writer(str(tmp_path / "follower.db"))
    meta = SnapshotStore(follower, threading.Lock()).deserialize(str(snap))
    assert meta == META
    assert last_applied(follower) == last_applied(leader.conn) == 7
    assert digest(follower) == digest(leader.conn)
    assert follower.execute("SELECT count(*) FROM occurrences").fetchone()[0] == 5
    # The restored database keeps applying where the snapshot ended.
    m = StateMachine(follower)
    assert m.apply(7, c.Barrier("again")) == {"ok": True, "replayed": True}
    assert m.apply(8, c.Barrier("next"))["ok"]


def test_a_snapshot_from_an_older_version_gets_the_current_indexes(tmp_path: Path) -> None:
    leader = build(tmp_path / "leader.db", 3)
    leader.conn.execute("DROP INDEX jobs_deadline")  # as written by a node before it existed
    snap = tmp_path / "snap.db"
    SnapshotStore(leader.conn, threading.Lock()).serialize(str(snap), META)
    follower = open_writer(str(tmp_path / "follower.db"))
    SnapshotStore(follower, threading.Lock()).deserialize(str(snap))
    indexes = {r[0] for r in follower.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert "jobs_deadline" in indexes
    assert digest(follower) == digest(leader.conn)


def test_indexes_of_an_older_version_are_replaced_when_opened(tmp_path: Path) -> None:
    """A database (or snapshot) written before the time-led indexes: opening it drops the
    job-led ones, which every claim would otherwise keep paying for."""
    path = tmp_path / "old.db"
    m = build(path, 3)
    m.conn.executescript(
        "DROP INDEX occ_scheduled_time; DROP INDEX att_job_pending; DROP INDEX att_job_running;"
        "CREATE UNIQUE INDEX occ_scheduled ON occurrences (job_id, scheduled_for_ms) "
        "WHERE kind = 'scheduled';"
        "CREATE INDEX occ_job_time ON occurrences (job_id, scheduled_for_ms);"
        "CREATE INDEX att_job_status ON attempts (job_id, status);"
        "CREATE INDEX att_occurrence ON attempts (occurrence_id, number);")
    before = digest(m.conn)
    m.conn.close()
    reopened = open_writer(str(path))
    indexes = {r[0] for r in reopened.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"occ_scheduled_time", "att_job_pending", "att_job_running"} <= indexes
    assert not {"occ_scheduled", "occ_job_time", "att_job_status", "att_occurrence"} & indexes
    assert digest(reopened) == before


def test_an_older_snapshot_never_replaces_newer_state(tmp_path: Path) -> None:
    old = build(tmp_path / "old.db", 2)
    snap = tmp_path / "snap.db"
    SnapshotStore(old.conn, threading.Lock()).serialize(str(snap), META)
    newer = build(tmp_path / "newer.db", 6)
    before = digest(newer.conn)
    SnapshotStore(newer.conn, threading.Lock()).deserialize(str(snap))
    assert digest(newer.conn) == before
    assert last_applied(newer.conn) == 8


def wait_check(store: SnapshotStore) -> int:
    """The first state other than SERIALIZING that the serializeChecker reports."""
    import time

    from pysyncobj.serializer import SERIALIZER_STATE

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = store.check()
        if state != SERIALIZER_STATE.SERIALIZING:
            return state
        time.sleep(0.01)
    raise AssertionError("snapshot copy did not finish")


def test_background_snapshot_holds_the_state_at_the_serialize_call(tmp_path: Path) -> None:
    from pysyncobj.serializer import SERIALIZER_STATE

    db = tmp_path / "live.db"
    m = build(db, 50)
    at_serialize = digest(m.conn)
    lock = threading.Lock()
    store = SnapshotStore(m.conn, lock, str(db))
    final = tmp_path / "raft.snapshot"
    store.serialize(str(final) + ".tmp", META)
    # The Raft thread goes on applying while the copy runs.
    late = parse_job({"id": "late", "schedule": {"cron": "* * * * *"},
                      "target": {"shell": "true"}}).to_spec()
    with lock:
        assert m.apply(last_applied(m.conn) + 1, c.PutJob("late", 3000, late, True))["ok"]
    assert wait_check(store) == SERIALIZER_STATE.SUCCESS
    assert store.check() == SERIALIZER_STATE.NOT_SERIALIZING  # reported once
    assert not (tmp_path / "raft.snapshot.tmp").exists()
    restored = open_writer(str(tmp_path / "restored.db"))
    assert SnapshotStore(restored, threading.Lock()).deserialize(str(final)) == META
    assert digest(restored) == at_serialize != digest(m.conn)
    assert last_applied(restored) == last_applied(m.conn) - 1


class SlowCopy(SnapshotStore):
    """Holds the background copy until `go` is set, so a test can act while it runs."""

    go = threading.Event()

    def _copy_now(self, src, path, raft_meta):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "snapshot-copy":
            assert self.go.wait(10)
        super()._copy_now(src, path, raft_meta)


def test_a_snapshot_installed_during_the_copy_wins(tmp_path: Path) -> None:
    from pysyncobj.serializer import SERIALIZER_STATE

    db = tmp_path / "live.db"
    m = build(db, 3)
    store = SlowCopy(m.conn, threading.Lock(), str(db))
    final = tmp_path / "raft.snapshot"
    newer = build(tmp_path / "newer.db", 8)
    SnapshotStore(newer.conn, threading.Lock()).serialize(str(tmp_path / "incoming"), META)
    store.serialize(str(final) + ".tmp", META)
    assert store.check() == SERIALIZER_STATE.SERIALIZING
    # The leader's snapshot arrives (pysyncobj renames it into place, then deserializes).
    (tmp_path / "incoming").replace(final)
    store.deserialize(str(final))
    store.go.set()
    assert wait_check(store) == SERIALIZER_STATE.FAILED
    assert not (tmp_path / "raft.snapshot.copy").exists()
    # the installed snapshot is still the one on disk, and it is what was installed
    assert digest(m.conn) == digest(newer.conn)
    restored = open_writer(str(tmp_path / "check.db"))
    SnapshotStore(restored, threading.Lock()).deserialize(str(final))
    assert digest(restored) == digest(newer.conn)


def test_a_snapshot_that_cannot_start_is_reported_failed_not_stuck(tmp_path: Path) -> None:
    from pysyncobj.serializer import SERIALIZER_STATE

    m = build(tmp_path / "live.db", 1)
    store = SnapshotStore(m.conn, threading.Lock(), str(tmp_path / "missing" / "state.db"))
    final = tmp_path / "raft.snapshot"
    store.serialize(str(final) + ".tmp", META)  # the reader cannot open: must not raise
    assert store.check() == SERIALIZER_STATE.FAILED
    assert store.check() == SERIALIZER_STATE.NOT_SERIALIZING
    # pysyncobj asks again on its next tick: refused at once (backoff), still reported
    store.serialize(str(final) + ".tmp", META)
    assert store.check() == SERIALIZER_STATE.FAILED
    assert not final.exists()
