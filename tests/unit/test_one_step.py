"""state.one_step: bulk reads and writes in one SQLite step give what the row-by-row
statements give, NUL-holding text included."""

from __future__ import annotations

import sqlite3

import pytest

from raftcron.state.one_step import decode_rows, has_nul, select_all, update_all, wrap_select


@pytest.fixture()
def conn() -> sqlite3.Connection:
    c = sqlite3.connect(":memory:", isolation_level=None)
    c.execute("CREATE TABLE t (id TEXT PRIMARY KEY, a INTEGER, b TEXT, c INTEGER)")
    c.executemany("INSERT INTO t VALUES (?, ?, ?, ?)",
                  [(f"r{i:03d}", i, f"text {i}", None if i % 2 else 2**62 + i)
                   for i in range(300)])
    return c


def test_select_all_returns_the_rows_of_the_query(conn: sqlite3.Connection) -> None:
    sql = "SELECT id, a, b, c FROM t WHERE a >= ? ORDER BY a DESC LIMIT ?"
    expected = sorted(conn.execute(sql, (10, 50)).fetchall())
    assert sorted(select_all(conn, sql, (10, 50), 4)) == expected


def test_select_all_keeps_unicode_nulls_and_large_integers(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO t VALUES ('u', -5, ?, ?)", ("é \u2028 😀 \" \\ \n", 2**63 - 1))
    assert select_all(conn, "SELECT id, a, b, c FROM t WHERE id = 'u'", (), 4) == \
        [("u", -5, "é \u2028 😀 \" \\ \n", 2**63 - 1)]
    assert select_all(conn, "SELECT id, c FROM t WHERE id = 'r001'", (), 2) == [("r001", None)]


def test_select_all_of_nothing_is_empty(conn: sqlite3.Connection) -> None:
    assert select_all(conn, "SELECT id, a FROM t WHERE a < 0", (), 2) == []
    assert decode_rows(None) == []


def test_wrap_select_is_one_row_of_one_column(conn: sqlite3.Connection) -> None:
    rows = conn.execute(wrap_select("SELECT id, a FROM t", 2)).fetchall()
    assert len(rows) == 1 and len(rows[0]) == 1
    assert len(decode_rows(rows[0][0])) == 300


def test_update_all_matches_executemany(conn: sqlite3.Connection) -> None:
    other = sqlite3.connect(":memory:", isolation_level=None)
    other.execute("CREATE TABLE t (id TEXT PRIMARY KEY, a INTEGER, b TEXT, c INTEGER)")
    other.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", conn.execute("SELECT * FROM t"))
    rows = [(f"r{i:03d}", f"new {i}", None if i % 3 else i) for i in range(0, 300, 7)]
    rows.append(("missing", "x", 1))  # no such row: nothing happens, as in executemany
    fallback = "UPDATE t SET a = ?, b = ?, c = ? WHERE id = ?"
    update_all(conn, "t", "a = ?, b = u.b, c = u.c", ("id", "b", "c"), rows, fallback,
               leading=(-1,))
    other.executemany(fallback, [(-1, b, c, i) for i, b, c in rows])
    assert conn.execute("SELECT * FROM t ORDER BY id").fetchall() == \
        other.execute("SELECT * FROM t ORDER BY id").fetchall()


def test_update_all_last_row_of_an_id_wins(conn: sqlite3.Connection) -> None:
    update_all(conn, "t", "b = u.b", ("id", "b"), [("r001", "first"), ("r001", "last")],
               "UPDATE t SET b = ? WHERE id = ?")
    assert conn.execute("SELECT b FROM t WHERE id = 'r001'").fetchone() == ("last",)


def test_update_all_writes_text_holding_a_nul_whole(conn: sqlite3.Connection) -> None:
    rows = [("r001", "before\x00after"), ("r002", "plain")]
    assert has_nul(rows[0]) and not has_nul(rows[1])
    update_all(conn, "t", "b = u.b", ("id", "b"), rows, "UPDATE t SET b = ? WHERE id = ?")
    assert conn.execute("SELECT b FROM t WHERE id IN ('r001', 'r002') ORDER BY id").fetchall() \
        == [("before\x00after",), ("plain",)]


def test_update_all_of_no_rows_writes_nothing(conn: sqlite3.Connection) -> None:
    before = conn.total_changes
    update_all(conn, "t", "b = u.b", ("id", "b"), [], "UPDATE t SET b = ? WHERE id = ?")
    assert conn.total_changes == before
