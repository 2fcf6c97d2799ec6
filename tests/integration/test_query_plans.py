"""The leader's periodic queries read indexes, never whole tables.

They run every half second to every second for the life of a leadership, so a table scan
grows with retention: the sweeper's scan of every attempt took 180 ms of event loop every
half second at 90,000 attempts (found by the one-hour soak)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from raftcron.core import identity
from raftcron.leader import deadlines, dispatch, outbox, run_bounds, sweeper
from raftcron.state.db import open_writer
from raftcron.state.queries import job_occurrence_page, recent_occurrences

OCC_PK = "sqlite_autoindex_occurrences_1"  # the primary key: occurrence ids
# name: (sql, parameters, what the plan must use, tables it may scan whole). Only the
# alerts table (open alerts, a handful) may be scanned.
PERIODIC = {
    "sweeper candidates": (sweeper.CANDIDATES_SQL, sweeper.candidate_params(0, 1),
                           ["att_running"], set()),
    "deadline jobs": (deadlines.JOBS_SQL, (), ["jobs_deadline"], set()),
    "deadline rows": (deadlines.ROWS_SQL, ("j@0", "j@:", 0, 1, 10), [OCC_PK], set()),
    "open deadline alerts": (deadlines.OPEN_SQL, (), [OCC_PK], {"a"}),
    "start deadline jobs": (deadlines.START_JOBS_SQL, (), ["jobs_start_deadline"], set()),
    "start deadline rows": (deadlines.START_ROWS_SQL, ("j@0", "j@:", 0, 1, 10), [OCC_PK],
                            set()),
    "open start alerts": (deadlines.START_OPEN_SQL, (), [OCC_PK], {"a"}),
    "slow runs": (run_bounds.SLOW_SQL, (0,), ["att_running"], set()),
    "open run alerts": (run_bounds.OPEN_SQL, (), ["alerts_open_job"], set()),
    "outbox fresh": (outbox.FRESH_SQL, (10,), ["outbox_pending"], set()),
    # The window over the due deliveries (found through the index) is materialized: its
    # scans read that subquery, not a table.
    "outbox due": (outbox.DUE_SQL, (0, 16), ["outbox_deliveries_due"],
                   {"d", "(subquery-3)"}),
    "dispatch due": (
        "SELECT id, tenant, job_id, not_before_ms FROM attempts WHERE status = 'pending' "
        "AND queue IN (?) AND not_before_ms <= ? ORDER BY not_before_ms, id LIMIT ?",
        ("q", 0, 10), ["att_pending"], set()),
}


@pytest.fixture(scope="module")
def conn(tmp_path_factory: pytest.TempPathFactory) -> sqlite3.Connection:
    path = Path(tmp_path_factory.mktemp("plans")) / "state.db"
    return open_writer(str(path))


@pytest.mark.parametrize("name", sorted(PERIODIC))
def test_periodic_query_uses_an_index(conn: sqlite3.Connection, name: str) -> None:
    sql, params, indexes, may_scan = PERIODIC[name]
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    for index in indexes:
        assert any(index in step for step in plan), f"{name} does not use {index}: {plan}"
    scans = [step.split()[1] for step in plan if step.startswith("SCAN ")
             and " USING INDEX " + next(iter(indexes)) not in step]
    assert set(scans) <= may_scan, f"{name} scans {scans}: {plan}"


def test_dispatch_module_query_is_the_one_checked() -> None:
    """The dispatch query above is copied from Dispatcher._select: keep them in step."""
    import inspect

    source = inspect.getsource(dispatch.Dispatcher._select)
    assert "ORDER BY not_before_ms, id LIMIT ?" in source and "status = 'pending'" in source


# Per-job reads take a job's id range (core.identity) and apply's per-job checks read the
# partial indexes of live attempts: none of them grows with the history of other jobs.
PER_JOB = {
    "recent occurrences": (*recent_occurrences("j", 30), [OCC_PK]),
    "overlap counts": (
        "SELECT (SELECT count(*) FROM attempts WHERE job_id = ?1 AND status = 'running'), "
        "(SELECT count(*) FROM attempts WHERE job_id = ?1 AND status = 'pending')",
        ("j",), ["att_job_running", "att_job_pending"]),
    "newest scheduled instant": (
        "SELECT scheduled_for_ms FROM occurrences WHERE id >= ? AND id < ? "
        "ORDER BY id DESC LIMIT 1", identity.job_scheduled_occurrences("j"), [OCC_PK]),
    "attempts of an occurrence": (
        "SELECT id FROM attempts WHERE id >= ? AND id < ?",
        identity.occurrence_attempts("j@2026-01-01T00:00:00Z"),
        ["sqlite_autoindex_attempts_1"]),
}


@pytest.mark.parametrize("name", sorted(PER_JOB))
def test_per_job_read_uses_a_range_or_live_index(conn: sqlite3.Connection, name: str) -> None:
    sql, params, indexes = PER_JOB[name]
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    for index in indexes:
        assert any(index in step for step in plan), f"{name} does not use {index}: {plan}"
    scans = [step for step in plan if step.startswith("SCAN ") and "subquery" not in step
             and step != "SCAN CONSTANT ROW"]
    assert not scans, f"{name} scans a table: {plan}"


@pytest.mark.parametrize("kind", [None, "scheduled"])
def test_a_page_of_scheduled_occurrences_is_read_in_index_order(conn: sqlite3.Connection,
                                                                kind: str | None) -> None:
    """The scheduled part of a job's page stops after `limit` rows: it is read in id order,
    by the primary key, even with a status filter (which would otherwise pick the status
    index and walk every job's rows of that status)."""
    sql, params = job_occurrence_page("j", ["status = ?", "job_id = ?"], ["succeeded", "j"],
                                      51, kind=kind, since_ms=1000, until_ms=10**12)
    plan = conn.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
    coroutine = next(row[0] for row in plan if row[3].startswith("CO-ROUTINE"))
    inside = [row[3] for row in plan if row[1] == coroutine]
    assert inside and all(OCC_PK in step for step in inside), plan


@pytest.mark.parametrize("kind", [None, "backfill"])
def test_a_page_of_backfill_occurrences_is_read_from_its_job_and_instant_index(
        conn: sqlite3.Connection, kind: str | None) -> None:
    """The backfill part of a job's page reads the job's end of `occ_backfill` within the
    instant bounds, not the job's whole backfill history (a backfill of a year, hourly, is
    8,760 rows)."""
    sql, params = job_occurrence_page("j", ["status = ?", "job_id = ?"], ["succeeded", "j"],
                                      51, kind=kind, since_ms=1000, until_ms=10**12)
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
    assert any(step.startswith("SEARCH occurrences USING INDEX occ_backfill (job_id=? AND "
                               "scheduled_for_ms>? AND scheduled_for_ms<?)")
               for step in plan), plan
