from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from raftcron.fencing import FencedStore, ensure_table, fenced_write


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "fence.db"


def test_lower_refused_equal_and_higher_accepted(db: Path) -> None:
    with FencedStore(db) as s:
        assert s.highest("k") is None
        assert s.accept("k", 5)
        assert s.accept("k", 5)
        assert not s.accept("k", 4)
        assert s.highest("k") == 5
        assert s.accept("k", 9)
        assert not s.accept("k", 5)
        assert s.highest("k") == 9


def test_keys_are_independent(db: Path) -> None:
    with FencedStore(db) as s:
        assert s.accept("a", 10)
        assert s.accept("b", 1)
        assert not s.accept("b", 0)
        assert s.highest("a") == 10
        assert s.highest("b") == 1


def test_across_two_connections(db: Path) -> None:
    with FencedStore(db) as old, FencedStore(db) as new:
        assert old.accept("job", 3)
        assert new.accept("job", 4)
        assert not old.accept("job", 3)
        assert old.highest("job") == 4
        assert new.accept("job", 4)


def test_fenced_write_runs_only_when_accepted(db: Path) -> None:
    conn = sqlite3.connect(db)
    ensure_table(conn)
    conn.execute("CREATE TABLE data (k TEXT, v TEXT)")

    def put(v: str):
        return lambda c: c.execute("INSERT INTO data VALUES ('k', ?)", (v,)).rowcount

    assert fenced_write(conn, "k", 7, put("new")) == (True, 1)
    assert fenced_write(conn, "k", 6, put("zombie")) == (False, None)
    other = sqlite3.connect(db)
    rows = other.execute("SELECT v FROM data").fetchall()
    assert rows == [("new",)]
    assert other.execute("SELECT token FROM raftcron_fencing").fetchall() == [(7,)]


def test_fenced_write_rolls_back_token_when_write_fails(db: Path) -> None:
    conn = sqlite3.connect(db)
    ensure_table(conn)
    assert fenced_write(conn, "k", 1)[0]

    def boom(c: sqlite3.Connection) -> None:
        raise RuntimeError("write failed")

    with pytest.raises(RuntimeError):
        fenced_write(conn, "k", 2, boom)
    assert not conn.in_transaction
    assert FencedStore(db).highest("k") == 1


def test_fenced_write_inside_callers_transaction(db: Path) -> None:
    conn = sqlite3.connect(db)
    ensure_table(conn)
    conn.execute("CREATE TABLE data (v TEXT)")
    conn.execute("INSERT INTO data VALUES ('before')")
    assert conn.in_transaction
    assert fenced_write(conn, "k", 2, lambda c: c.execute("INSERT INTO data VALUES ('x')"))[0]
    assert conn.in_transaction
    conn.rollback()
    assert FencedStore(db).highest("k") is None
    assert conn.execute("SELECT count(*) FROM data").fetchone() == (0,)


def test_bad_arguments(db: Path) -> None:
    with FencedStore(db) as s:
        with pytest.raises(TypeError):
            s.accept("k", "3")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            s.accept("", 3)
