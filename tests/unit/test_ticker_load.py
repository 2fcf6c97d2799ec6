"""The ticker's job load: abandoned with its epoch, and cheap for big fleets."""

from __future__ import annotations

import asyncio
import gc
import json
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftcron.core.model import parse_job
from raftcron.core.schedule import compile_schedule
from raftcron.core.schedule_set import FleetSchedules
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


def test_a_cancelled_load_stops_compiling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          collector_restored: None) -> None:
    """A leader that loses its epoch mid-load must not leave a thread compiling every job:
    a few quick elections would otherwise stack loads (each holding all records). The
    collector, off for the load, is on again."""
    db = tmp_path / "state.db"
    _db_with_jobs(db, JOBS)
    compiled: list[str] = []
    started = threading.Event()
    real = JobRecord.from_row

    def slow_from_row(row: tuple, schedules: FleetSchedules) -> JobRecord:
        compiled.append(row[0])
        started.set()
        time.sleep(0.0005)
        return real(row, schedules)

    monkeypatch.setattr(ticker_mod.JobRecord, "from_row", staticmethod(slow_from_row))
    ticker = Ticker(1, object(), lambda: sqlite3.connect(db))  # type: ignore[arg-type]

    async def main() -> None:
        task = asyncio.create_task(ticker._reload(None))
        await asyncio.to_thread(started.wait, 5)
        assert not gc.isenabled()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert gc.isenabled()

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


class Cycle:
    me: object = None


@pytest.fixture
def collector_restored() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()


def test_the_loaded_jobs_are_kept_out_of_full_collections(
        tmp_path: Path, collector_restored: None) -> None:
    """A full collection walks every tracked object holding the GIL: with a million jobs
    the loaded records made it outlast an election timeout. The load runs with the
    collector off, the records end frozen (out of its reach) with the collector on again,
    and the ticker gives them back when its epoch ends."""
    db = tmp_path / "state.db"
    _db_with_jobs(db, 500)
    gc.unfreeze()

    class NeverCommits:
        async def propose_leader(self, cmd: object) -> dict:
            await asyncio.Event().wait()
            return {}

    ticker = Ticker(1, NeverCommits(), lambda: sqlite3.connect(db))  # type: ignore[arg-type]
    seen_during_load: list[bool] = []
    real = JobRecord.from_row

    def recording_from_row(row: tuple, schedules: FleetSchedules) -> JobRecord:
        seen_during_load.append(gc.isenabled())
        return real(row, schedules)

    async def main() -> None:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(ticker_mod.JobRecord, "from_row", staticmethod(recording_from_row))
            await ticker._reload(None)
            assert seen_during_load == [False] * 500
            assert gc.isenabled()
            assert gc.get_freeze_count() > 500  # the records and what they hold
            # A reload of a few changed jobs keeps the collector on throughout, and frees
            # the garbage cycles of the moment instead of freezing them with the rest.
            cycle = Cycle()
            cycle.me = cycle
            gone = weakref.ref(cycle)
            del cycle
            seen_during_load.clear()
            await ticker._reload({"j1"})
            assert seen_during_load == [True]
            assert gone() is None
        # The epoch ends: the ticker's run is cancelled and unfreezes.
        task = asyncio.create_task(ticker.run())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert gc.get_freeze_count() == 0

    asyncio.run(main())
    assert len(ticker.planner.jobs) == 500


def test_the_event_loop_runs_between_chunks_of_upserts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collector_restored: None) -> None:
    """Putting a million records into the planner takes seconds on the event loop: the
    node's other tasks (its API) must run between chunks, not wait for all of them."""
    db = tmp_path / "state.db"
    _db_with_jobs(db, 500)
    monkeypatch.setattr(ticker_mod, "UPSERT_YIELD_EVERY", 100)
    ticker = Ticker(1, object(), lambda: sqlite3.connect(db))  # type: ignore[arg-type]
    done = 0
    real = ticker.planner.upsert

    def counting_upsert(rec: JobRecord) -> None:
        nonlocal done
        done += 1
        real(rec)

    ticker.planner.upsert = counting_upsert  # type: ignore[method-assign]
    seen: list[int] = []

    async def other_task() -> None:
        while True:
            seen.append(done)
            await asyncio.sleep(0)

    async def main() -> None:
        other = asyncio.create_task(other_task())
        await ticker._reload(None)
        other.cancel()

    asyncio.run(main())
    assert len(ticker.planner.jobs) == 500
    assert {100, 200, 300, 400} <= set(seen), sorted(set(seen))
