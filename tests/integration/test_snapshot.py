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


def test_an_older_snapshot_never_replaces_newer_state(tmp_path: Path) -> None:
    old = build(tmp_path / "old.db", 2)
    snap = tmp_path / "snap.db"
    SnapshotStore(old.conn, threading.Lock()).serialize(str(snap), META)
    newer = build(tmp_path / "newer.db", 6)
    before = digest(newer.conn)
    SnapshotStore(newer.conn, threading.Lock()).deserialize(str(snap))
    assert digest(newer.conn) == before
    assert last_applied(newer.conn) == 8
