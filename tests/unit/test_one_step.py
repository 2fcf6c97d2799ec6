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


@pytest.mark.parametrize("distinct", [1, 3, 40], ids=["one value set", "few", "many"])
def test_update_all_matches_executemany(conn: sqlite3.Connection, distinct: int) -> None:
    other = sqlite3.connect(":memory:", isolation_level=None)
    other.execute("CREATE TABLE t (id TEXT PRIMARY KEY, a INTEGER, b TEXT, c INTEGER)")
    other.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", conn.execute("SELECT * FROM t"))
    rows = [(f"r{i:03d}", f"new {i % distinct}", None if i % 3 else i % distinct)
            for i in range(0, 300, 7)]
    rows.append(("missing", "x", 1))  # no such row: nothing happens, as in executemany
    update_all(conn, "t", "a = ?", ("b", "c"), rows, leading=(-1,))
    other.executemany("UPDATE t SET a = ?, b = ?, c = ? WHERE id = ?",
                      [(-1, b, c, i) for i, b, c in rows])
    assert conn.execute("SELECT * FROM t ORDER BY id").fetchall() == \
        other.execute("SELECT * FROM t ORDER BY id").fetchall()


@pytest.mark.parametrize("distinct", [1, 40], ids=["few value sets", "many"])
def test_update_all_last_row_of_an_id_wins(conn: sqlite3.Connection, distinct: int) -> None:
    rows = [(f"r{i:03d}", f"v{i % distinct}") for i in range(100, 140)]
    update_all(conn, "t", "a = 0", ("b",), [("r001", "first"), *rows, ("r001", "last")])
    assert conn.execute("SELECT b FROM t WHERE id = 'r001'").fetchone() == ("last",)


@pytest.mark.parametrize("distinct", [1, 40], ids=["few value sets", "many"])
def test_update_all_writes_text_holding_a_nul_whole(conn: sqlite3.Connection,
                                                    distinct: int) -> None:
    rows = [("r001", "before\x00after"), *((f"r{i:03d}", f"plain {i % distinct}")
                                           for i in range(100, 140))]
    assert has_nul(rows[0]) and not has_nul(rows[1])
    update_all(conn, "t", "a = 0", ("b",), rows)
    assert conn.execute("SELECT b FROM t WHERE id = 'r001'").fetchone() == ("before\x00after",)
    assert conn.execute("SELECT b FROM t WHERE id = 'r139'").fetchone() == \
        (f"plain {139 % distinct}",)


def test_update_all_with_no_columns_sets_the_fixed_part(conn: sqlite3.Connection) -> None:
    update_all(conn, "t", "a = ?, b = 'done'", (), [("r001",), ("r002",)], leading=(7,))
    assert conn.execute("SELECT id, a, b FROM t WHERE b = 'done' ORDER BY id").fetchall() == \
        [("r001", 7, "done"), ("r002", 7, "done")]


def test_update_all_of_no_rows_writes_nothing(conn: sqlite3.Connection) -> None:
    before = conn.total_changes
    update_all(conn, "t", "a = 0", ("b",), [])
    assert conn.total_changes == before


def test_update_all_last_row_wins_over_an_earlier_one_holding_a_nul(
        conn: sqlite3.Connection) -> None:
    update_all(conn, "t", "a = 0", ("b",), [("r001", "with\x00nul"), ("r001", "plain")])
    assert conn.execute("SELECT b FROM t WHERE id = 'r001'").fetchone() == ("plain",)
    update_all(conn, "t", "a = 0", ("b",), [("r002", "plain"), ("r002", "with\x00nul")])
    assert conn.execute("SELECT b FROM t WHERE id = 'r002'").fetchone() == ("with\x00nul",)
