"""The digest-mark registry (state.digest_marks) over a real state machine and SQLite file:
a mark's digest is the state at exactly its index, however many entries follow before
the digest is computed; the registry is bounded; a failure is recorded, never raised
into apply."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from raftcron.core import commands as c
from raftcron.core import protocol
from raftcron.core.model import parse_job
from raftcron.state import db
from raftcron.state.digest import digest
from raftcron.state.digest_marks import DigestMarks, MarkDigest, is_mark_id, new_mark
from raftcron.state.machine import StateMachine
from raftcron.testing import commit_protocol_level, wait_until

NOW = 1_767_225_600_000
WAIT_S = 10.0


class Machine:
    """A state machine on `path` whose listener is a `DigestMarks`."""

    def __init__(self, path: Path, compute: Callable[[sqlite3.Connection], str] = digest,
                 capacity: int = 32,
                 open_snapshot: Callable[[], sqlite3.Connection] | None = None) -> None:
        self.path = str(path)
        self.conn = db.open_writer(self.path)
        commit_protocol_level(self.conn)
        self.marks = DigestMarks(open_snapshot or (lambda: db.open_reader(self.path)),
                                 capacity=capacity, compute=compute)
        self.sm = StateMachine(self.conn, listener=self.marks.on_applied)
        self.index = 0

    def apply(self, cmd: c.Command) -> dict:
        self.index += 1
        return self.sm.apply(self.index, cmd)

    def put_job(self, job_id: str) -> dict:
        job = parse_job({"id": job_id, "schedule": "* * * * *",
                         "target": {"shell": "true"}}).to_spec()
        return self.apply(c.PutJob(request_id=f"put-{job_id}", job=job, now_ms=NOW,
                                   create=True))

    def mark(self, mark: str | None = None) -> str:
        mark = mark or new_mark()
        result = self.apply(c.Barrier(request_id=mark))
        assert result == {"ok": True, "index": self.index}
        return mark

    def close(self) -> None:
        self.marks.close()
        self.conn.close()


@pytest.fixture
def machine(tmp_path: Path):
    made: list[Machine] = []

    def make(**kw) -> Machine:
        m = Machine(tmp_path / f"state-{len(made)}.db", **kw)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def test_the_digest_is_the_state_at_the_marks_index_not_later(machine) -> None:
    release = threading.Event()

    def held_digest(conn: sqlite3.Connection) -> str:
        assert release.wait(WAIT_S)
        return digest(conn)

    m = machine(compute=held_digest)
    m.put_job("a")
    mark = m.mark()
    at_mark = digest(m.conn), m.index
    # Entries applied before the digest is computed do not reach it.
    m.put_job("b")
    m.put_job("c")
    assert digest(m.conn) != at_mark[0]
    assert m.marks.get(mark) == MarkDigest(mark, at_mark[1])  # pending
    release.set()
    done = m.marks.wait(mark, WAIT_S)
    assert done == MarkDigest(mark, at_mark[1], digest=at_mark[0])


def test_two_nodes_applying_the_same_log_keep_the_same_digest_at_the_mark(machine) -> None:
    one, two = machine(), machine()
    mark = new_mark()
    for m in (one, two):
        m.put_job("a")
        m.mark(mark)
    one.put_job("only-on-one")  # one is further along; the mark still compares
    a, b = one.marks.wait(mark, WAIT_S), two.marks.wait(mark, WAIT_S)
    assert a is not None and b is not None
    assert (a.index, a.digest) == (b.index, b.digest) and a.digest is not None


def test_the_registry_keeps_the_newest_marks_only(machine) -> None:
    m = machine(capacity=3)
    marks = [m.mark() for _ in range(5)]
    for mark in marks[2:]:
        assert m.marks.wait(mark, WAIT_S).digest is not None
    assert [m.marks.get(x) for x in marks[:2]] == [None, None]


def test_a_mark_evicted_before_its_digest_is_never_computed(machine) -> None:
    entered, release = threading.Event(), threading.Event()
    computed: list[int] = []

    def held_digest(conn: sqlite3.Connection) -> str:
        entered.set()
        assert release.wait(WAIT_S)
        computed.append(db.last_applied(conn))
        return digest(conn)

    m = machine(capacity=2, compute=held_digest)
    first = m.mark()
    assert entered.wait(WAIT_S)  # taken by the digest thread, held there
    second, third, fourth = m.mark(), m.mark(), m.mark()
    release.set()
    assert m.marks.wait(fourth, WAIT_S).digest is not None
    assert m.marks.get(first) is None and m.marks.get(second) is None
    assert m.marks.wait(third, WAIT_S).digest is not None
    # The first was already being computed; the second, evicted while it waited, was not.
    assert 2 not in computed and sorted(computed) == [1, 3, 4]


def test_unknown_ids_and_plain_barriers_record_nothing(machine) -> None:
    m = machine()
    m.apply(c.Barrier(request_id="barrier-0123"))
    m.apply(c.Barrier(request_id="digest-mark-not-hex"))
    assert m.marks.get(new_mark()) is None
    assert m.marks.get("digest-mark-not-hex") is None
    assert m.marks._marks == {}
    assert not is_mark_id("digest-mark-not-hex") and is_mark_id(new_mark())


def test_a_failed_digest_is_recorded_as_the_marks_error(machine) -> None:
    def broken(conn: sqlite3.Connection) -> str:
        raise sqlite3.OperationalError("disk I/O error")

    m = machine(compute=broken)
    mark = m.mark()
    entry = m.marks.wait(mark, WAIT_S)
    assert entry is not None and entry.digest is None
    assert entry.error == "the digest failed: OperationalError: disk I/O error"
    assert m.put_job("after")["ok"]  # the machine goes on


def test_a_snapshot_that_cannot_be_pinned_is_recorded_not_raised_into_apply(machine) -> None:
    def no_reader() -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    m = machine(open_snapshot=no_reader)
    mark = m.mark()  # apply returned its ordinary result
    entry = m.marks.get(mark)
    assert entry is not None and entry.done and entry.digest is None
    assert "unable to open database file" in (entry.error or "")
    assert db.last_applied(m.conn) == m.index


def test_a_replayed_mark_records_nothing_and_a_repeated_one_keeps_its_first_index(
        machine) -> None:
    m = machine()
    mark = new_mark()
    # Replay after a restart: the database is past the entry's index.
    m.put_job("a")
    m.put_job("b")
    assert m.sm.apply(1, c.Barrier(request_id=mark)) == {"ok": True, "replayed": True}
    assert m.marks.get(mark) is None
    # The same mark committed twice (a proposal retried): the first index stays.
    m.mark(mark)
    first = m.index
    m.put_job("c")
    m.mark(mark)
    assert m.marks.wait(mark, WAIT_S).index == first


def test_a_mark_is_a_plain_barrier_on_the_wire() -> None:
    """No new command and no protocol level: a build without marks applies it."""
    cmd = c.Barrier(request_id=new_mark())
    assert c.decode(c.encode(cmd)) == cmd
    assert protocol.required(cmd) is None


def test_closing_releases_waiting_snapshots_and_records_no_more(machine) -> None:
    entered, release = threading.Event(), threading.Event()

    def held_digest(conn: sqlite3.Connection) -> str:
        entered.set()
        assert release.wait(WAIT_S)
        return digest(conn)

    m = machine(compute=held_digest)
    m.mark()
    assert entered.wait(WAIT_S)
    waiting = m.mark()
    closing = threading.Thread(target=m.marks.close)
    closing.start()
    wait_until(lambda: m.marks._closed, WAIT_S, interval=0.01, message="closed")
    release.set()  # the digest thread finishes the mark it holds, and stops
    closing.join(WAIT_S)
    assert not closing.is_alive()
    assert m.marks.get(waiting) == MarkDigest(waiting, m.index)  # never computed
    later = m.mark()
    assert m.marks.get(later) is None
    # No read transaction is left open: a checkpoint can reset the whole WAL.
    busy, _, _ = m.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    assert busy == 0
