"""The ticker's job load: abandoned with its epoch, and cheap for big fleets."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from raftcron.core.model import parse_job
from raftcron.core.schedule import compile_schedule
from raftcron.leader import ticker as ticker_mod
from raftcron.leader.planner import JobRecord
from raftcron.leader.ticker import Ticker
from raftcron.state.db import open_writer

JOBS = 3000


def _db_with_jobs(path: Path, n: int) -> None:
    conn = open_writer(str(path))
    rows = []
    for i in range(n):
        spec = parse_job({"id": f"j{i}", "schedule": "H H * * *",
                          "target": {"shell": "true"}}).to_spec()
        rows.append((f"j{i}", "default", 1, json.dumps(spec), 0, "default", 0, 0, 0))
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO jobs (id, tenant, version, spec, paused, queue, "
                     "watermark_ms, created_ms, updated_ms) VALUES (?,?,?,?,?,?,?,?,?)", rows)
    conn.execute("COMMIT")
    conn.close()


def test_a_cancelled_load_stops_compiling(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader that loses its epoch mid-load must not leave a thread compiling every job:
    a few quick elections would otherwise stack loads (each holding all records)."""
    db = tmp_path / "state.db"
    _db_with_jobs(db, JOBS)
    compiled: list[str] = []
    started = threading.Event()
    real = JobRecord.from_row

    def slow_from_row(row: tuple) -> JobRecord:
        compiled.append(row[0])
        started.set()
        time.sleep(0.0005)
        return real(row)

    monkeypatch.setattr(ticker_mod.JobRecord, "from_row", staticmethod(slow_from_row))
    ticker = Ticker(1, object(), lambda: sqlite3.connect(db))  # type: ignore[arg-type]

    async def main() -> None:
        task = asyncio.create_task(ticker._reload(None))
        await asyncio.to_thread(started.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())  # waits for the default executor's threads to finish
    assert 0 < len(compiled) < JOBS / 2, len(compiled)
    assert not ticker.planner.jobs


def test_a_load_completes_when_not_cancelled(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    _db_with_jobs(db, 500)
    ticker = Ticker(1, object(), lambda: sqlite3.connect(db))  # type: ignore[arg-type]
    asyncio.run(ticker._reload(None))
    assert len(ticker.planner.jobs) == 500
    assert all(rec.next_ms is not None for rec in ticker.planner.jobs.values())


def test_equal_schedules_are_one_object() -> None:
    a = compile_schedule("*/5 * * * *", "Europe/Berlin", hash_key="job-a")
    b = compile_schedule("*/5 * * * *", "Europe/Berlin", hash_key="job-b")
    assert a is b
    hashed = [compile_schedule("H H * * *", hash_key=f"job-{i}") for i in range(5000)]
    distinct = {id(s) for s in hashed}
    # 5,000 jobs hash into at most 1,440 (minute, hour) pairs, and every pair is shared.
    assert len(distinct) <= 1440
    assert len(distinct) == len({(s.next_after(0)) for s in hashed})


def test_hashed_values_still_differ_per_job() -> None:
    instants = {compile_schedule("H * * * *", hash_key=f"job-{i}").next_after(0)
                for i in range(200)}
    assert len(instants) > 40  # spread over the hour, not all on one minute
