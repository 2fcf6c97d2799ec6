"""The overview search's kept words (state.job_search): filled for a database written
before they existed, equal to what the triggers keep, and outside the digest."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from raftcron.core.model import parse_job
from raftcron.state import job_search
from raftcron.state.db import open_writer
from raftcron.state.digest import digest


def _put_jobs(conn: sqlite3.Connection, n: int) -> None:
    for i in range(n):
        spec = parse_job({"id": f"j{i}", "schedule": {"cron": "H 3 * * *",
                                                       "timezone": "Europe/Berlin"},
                          "labels": {"team": f"T{i % 3}"}, "target": {"shell": "true"}}
                         ).to_spec()
        conn.execute("INSERT INTO jobs (id, tenant, version, spec, paused, queue, "
                     "watermark_ms, created_ms, updated_ms) VALUES (?,?,?,?,?,?,?,?,?)",
                     (f"j{i}", "acme", 1, json.dumps(spec), i % 2, "default", 0, 0, 0))


def _words(conn: sqlite3.Connection) -> list[tuple]:
    return conn.execute("SELECT id, tenant, words FROM job_search ORDER BY id").fetchall()


def test_an_older_database_gets_the_words_of_every_job_when_opened(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    conn = open_writer(path)
    _put_jobs(conn, 50)
    kept = _words(conn)  # written by the triggers
    assert len(kept) == 50
    assert kept[1] == ("j1", "acme",
                       'j1 acme default h 3 * * *  europe/berlin  {"team":"t1"} paused')
    digest_before = digest(conn)
    # As a database written before the table existed (or a snapshot of such a node).
    for trigger in ("job_search_added", "job_search_changed", "job_search_deleted"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE job_search")
    assert digest(conn) == digest_before, "derived words are not replicated state"
    conn.close()

    conn = open_writer(path)
    assert _words(conn) == kept
    # Opened again, nothing is filled twice and the triggers keep it from here.
    conn.close()
    conn = open_writer(path)
    assert _words(conn) == kept
    conn.execute("DELETE FROM jobs WHERE id = 'j7'")
    conn.execute("UPDATE jobs SET paused = 0 WHERE id = 'j1'")
    words = dict((i, w) for i, _, w in _words(conn))
    assert "j7" not in words and words["j1"].endswith(" active")


def test_a_claim_does_not_rewrite_the_words(tmp_path: Path) -> None:
    """The claim path updates only `watermark_ms`, which no trigger watches: a claim of
    thousands of jobs must not recompute their words."""
    conn = open_writer(str(tmp_path / "state.db"))
    _put_jobs(conn, 3)
    # total_changes counts the rows that trigger programs write as well.
    before = conn.total_changes
    conn.execute("UPDATE jobs SET watermark_ms = 5 WHERE id = 'j1'")
    assert conn.total_changes - before == 1  # the job's row alone
    before = conn.total_changes
    conn.execute("UPDATE jobs SET queue = 'other' WHERE id = 'j1'")
    assert conn.total_changes - before > 1  # and its words
    assert "other" in conn.execute("SELECT words FROM job_search WHERE id = 'j1'"
                                   ).fetchone()[0]


def test_the_statements_are_the_schema_a_node_opens_with() -> None:
    assert all("IF NOT EXISTS" in s for s in job_search.STATEMENTS)
