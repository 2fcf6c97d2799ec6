"""The node refuses an SQLite library older than the statements it runs need."""

import sqlite3

from raftcron.state.db import MIN_SQLITE, sqlite_too_old


def test_an_older_sqlite_is_named_with_what_is_needed():
    assert sqlite_too_old((3, 31, 1)) == (
        "raftcron needs SQLite 3.33.0 or newer; this Python uses SQLite 3.31.1")
    assert sqlite_too_old((3, 32, 99)) is not None


def test_this_sqlite_and_newer_ones_are_accepted():
    assert sqlite_too_old(MIN_SQLITE) is None
    assert sqlite_too_old((3, 45, 0)) is None
    assert sqlite_too_old(sqlite3.sqlite_version_info) is None
