"""The leader's periodic queries read indexes, never whole tables.

They run every half second to every second for the life of a leadership, so a table scan
grows with retention: the sweeper's scan of every attempt took 180 ms of event loop every
half second at 90,000 attempts (found by the one-hour soak)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from raftcron.leader import deadlines, dispatch, outbox, sweeper
from raftcron.state.db import open_writer

# name: (sql, parameters, what the plan must use, tables it may scan whole). Only the
# alerts table (open alerts, a handful) may be scanned.
PERIODIC = {
    "sweeper candidates": (sweeper.CANDIDATES_SQL, (0, 0), ["att_running"], set()),
    "deadline jobs": (deadlines.JOBS_SQL, (), ["jobs_deadline"], set()),
    "deadline rows": (deadlines.ROWS_SQL, ("j", 0, 1, 10), ["occ_job_time"], set()),
    "open deadline alerts": (deadlines.OPEN_SQL, (), ["occ_job_time"], {"a"}),
    "outbox pending": (outbox.PENDING_SQL, (10,), ["outbox_pending"], set()),
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
