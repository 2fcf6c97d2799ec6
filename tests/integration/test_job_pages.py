"""A job's occurrence pages read its id range (no index is led by job): every page must
hold exactly the rows, in exactly the order, of the plain query over `job_id`."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from raftcron.core import identity
from raftcron.state.db import open_writer
from raftcron.state.queries import OCC_SELECT, job_occurrence_page, recent_occurrences

JOBS = ["a", "a.", "a-b", "a_", "a0", "aA", "A", "ab", "b"]
T0 = 1_767_225_600_000
STATUSES = ["pending", "running", "succeeded", "failed", "skipped"]


@pytest.fixture(scope="module")
def conn(tmp_path_factory: pytest.TempPathFactory) -> sqlite3.Connection:
    db = open_writer(str(Path(tmp_path_factory.mktemp("pages")) / "state.db"))
    rnd = random.Random(7)
    rows = []
    for job in JOBS:
        for i in range(rnd.randint(0, 120)):
            t = T0 + i * 60_000
            rows.append((identity.scheduled_occurrence_id(job, t), job, "scheduled", t, None,
                         None))
        for i in range(rnd.randint(0, 8)):
            t = T0 + rnd.randint(0, 120) * 60_000 + rnd.randint(0, 59_999)
            rows.append((identity.manual_occurrence_id(job, f"k{i}"), job, "manual", t, f"k{i}",
                         None))
        for _ in range(rnd.randint(0, 60)):  # several request keys share instants
            t = T0 + rnd.randint(0, 40) * 180_000
            key = f"r{rnd.randint(0, 3)}"
            rows.append((identity.backfill_occurrence_id(job, t, key), job, "backfill", t,
                         None, key))
    db.executemany(
        "INSERT OR IGNORE INTO occurrences (id, job_id, tenant, queue, kind, scheduled_for_ms, "
        "dispatch_at_ms, job_version, status, idempotency_key, request_key, epoch, "
        "created_ms) VALUES (?, ?, 'default', 'default', ?, ?, ?, 1, ?, ?, ?, 1, ?)",
        [(oid, job, kind, t, t, rnd.choice(STATUSES), key, request, t)
         for oid, job, kind, t, key, request in rows])
    return db


def plain(conn: sqlite3.Connection, job: str, where: list[str], params: list[object],
          limit: int) -> list[tuple]:
    clause = "".join(f" AND {w}" for w in where)
    return conn.execute(f"{OCC_SELECT} WHERE job_id = ?{clause} "
                        "ORDER BY scheduled_for_ms DESC, id DESC LIMIT ?",
                        (job, *params, limit)).fetchall()


def test_pages_match_the_plain_query_under_every_filter(conn: sqlite3.Connection) -> None:
    rnd = random.Random(11)
    for _ in range(600):
        job = rnd.choice(JOBS)
        where: list[str] = []
        params: list[object] = []
        kind = rnd.choice([None, None, "scheduled", "manual", "backfill"])
        since = until = None
        if kind:
            where.append("kind = ?")
            params.append(kind)
        if rnd.random() < 0.3:
            where.append("status = ?")
            params.append(rnd.choice(STATUSES))
        if rnd.random() < 0.4:
            since = T0 + rnd.randint(-5, 125) * 60_000 + rnd.choice([0, 1, 999, 30_500])
            where.append("scheduled_for_ms >= ?")
            params.append(since)
        if rnd.random() < 0.4:
            until = T0 + rnd.randint(-5, 125) * 60_000 + rnd.choice([0, 1, 999, 30_500])
            where.append("scheduled_for_ms <= ?")
            params.append(until)
        limit = rnd.choice([1, 3, 10, 51, 500])
        expected = plain(conn, job, where, params, limit)
        sql, args = job_occurrence_page(job, [*where, "job_id = ?"], [*params, job], limit,
                                        kind=kind, since_ms=since, until_ms=until)
        assert conn.execute(sql, args).fetchall() == expected, (job, where, params, limit)


def test_walking_a_job_by_cursor_visits_every_row_once(conn: sqlite3.Connection) -> None:
    for job in JOBS:
        seen: list[tuple] = []
        where: list[str] = []
        params: list[object] = []
        until = None
        while True:
            sql, args = job_occurrence_page(job, [*where, "job_id = ?"], [*params, job], 7,
                                            until_ms=until)
            page = conn.execute(sql, args).fetchall()
            seen += page
            if len(page) < 7:
                break
            ms, occ_id = page[-1][5], page[-1][0]
            where = ["(scheduled_for_ms < ? OR (scheduled_for_ms = ? AND id < ?))"]
            params = [ms, ms, occ_id]
            until = ms
        assert seen == plain(conn, job, [], [], 10_000)


def test_recent_occurrences_are_the_newest(conn: sqlite3.Connection) -> None:
    for job in JOBS:
        assert conn.execute(*recent_occurrences(job, 5)).fetchall() == plain(conn, job, [], [], 5)


def test_bounds_outside_the_years_ids_spell_are_left_out(conn: sqlite3.Connection) -> None:
    far = 10**17
    sql, args = job_occurrence_page("a", ["scheduled_for_ms <= ?", "job_id = ?"], [far, "a"],
                                    5, since_ms=-far, until_ms=far)
    assert conn.execute(sql, args).fetchall() == plain(conn, "a", [], [], 5)
