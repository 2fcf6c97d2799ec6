"""A duty's reader connection is closed only after the query running on it finishes."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from raftcron.state.db import ThreadReader


async def test_cancelling_the_caller_mid_query_does_not_close_the_connection_under_it(
        tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    with sqlite3.connect(path) as setup:
        setup.execute("CREATE TABLE t (x)")
        setup.executemany("INSERT INTO t VALUES (?)", [(1,), (2,), (3,)])
    started, go = threading.Event(), threading.Event()
    seen: list[object] = []

    def slow_query(conn: sqlite3.Connection) -> int:
        started.set()
        assert go.wait(5)
        try:
            seen.append(conn.execute("SELECT count(*) FROM t").fetchone()[0])
        except sqlite3.Error as e:  # what closing under the query used to give (or SIGSEGV)
            seen.append(e)
        return 0

    reader = ThreadReader(lambda: sqlite3.connect(path, check_same_thread=False), "test")
    task = asyncio.create_task(reader.run(slow_query))
    assert await asyncio.to_thread(started.wait, 5)
    task.cancel()  # leadership lost: the duty's task is cancelled mid-query...
    with pytest.raises(asyncio.CancelledError):
        await task
    reader.close()  # ...and its finally closes the reader
    go.set()
    reader._pool.shutdown(wait=True)
    assert seen == [3]
    assert reader._conn is None  # closed, after the query


async def test_queries_run_in_order_on_one_connection(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    sqlite3.connect(path).close()
    opened: list[sqlite3.Connection] = []

    def open_reader() -> sqlite3.Connection:
        conn = sqlite3.connect(path, check_same_thread=False)
        opened.append(conn)
        return conn

    reader = ThreadReader(open_reader, "test")
    ids = await asyncio.gather(*(reader.run(lambda conn, i: (id(conn), i), i)
                                 for i in range(5)))
    reader.close()
    assert [i for _, i in ids] == list(range(5))
    assert len({c for c, _ in ids}) == 1 and len(opened) == 1
