"""The dispatcher leases a herd further ahead than single runs, never before its instant."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from raftcron.core import commands as c
from raftcron.core.model import parse_job
from raftcron.leader.dispatch import HERD_LEASE_LEAD_MS, HERD_SIZE, LEASE_LEAD_MS, Dispatcher
from raftcron.leader.ticker import LostEpoch
from raftcron.state.db import open_reader, open_writer
from raftcron.state.machine import StateMachine

T0 = 1_767_225_600_000
T = T0 + 60_000


def cluster_state(path: Path, herd: int, few: int) -> None:
    m = StateMachine(open_writer(str(path)))
    m.apply(1, c.BeginEpoch(1, "n1", T0))
    index = 1
    jobs = [(f"h{i:05d}", "herd") for i in range(herd)] + [(f"f{i}", "few") for i in range(few)]
    for k in range(0, len(jobs), 250):
        index += 1
        specs = [parse_job({"id": j, "queue": q, "schedule": {"cron": "0 0 1 1 *"},
                            "target": {"shell": "true"}}).to_spec() for j, q in jobs[k:k + 250]]
        assert m.apply(index, c.CreateJobs(f"r{k}", T0, specs))["created"] == len(specs)
    for k in range(0, len(jobs), 1000):
        index += 1
        items = [[j, 1, T, T, "fire"] for j, _ in jobs[k:k + 1000]]
        assert m.apply(index, c.Claim(1, T0 + 1, items))["rejected_items"] == []
    m.conn.close()


def test_a_herd_is_chosen_a_second_ahead_and_stamped_with_its_instant(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    cluster_state(db, HERD_SIZE + 200, 5)
    d = Dispatcher(1, proposer=None, open_reader=lambda: open_reader(str(db)))  # type: ignore[arg-type]
    # Too early even for a herd: look again when the herd lead opens.
    ids, _, wake = d._select(["herd"], 1000, T - HERD_LEASE_LEAD_MS - 500)
    assert ids == [] and wake == T - HERD_LEASE_LEAD_MS
    # Within the herd lead: chosen now, stamped T (handed out at T, not before).
    ids, stamp, _ = d._select(["herd"], 1000, T - 800)
    assert len(ids) == 1000 and stamp == T
    # The herd's remainder, once most of it is reserved by other polls, is still a herd.
    d.reserved.update(ids)
    ids2, stamp2, _ = d._select(["herd"], 1000, T - 700)
    assert len(ids2) == 200 and stamp2 == T and not set(ids2) & set(ids)
    # A handful of runs at the same instant waits for the ordinary lead.
    few, _, wake = d._select(["few"], 1000, T - 800)
    assert few == [] and wake == T - LEASE_LEAD_MS
    few, stamp, _ = d._select(["few"], 1000, T - 100)
    assert len(few) == 5 and stamp == T
    d.close()


class _CommitAtOnce:
    """Commits every Lease at once, answering with one lease per attempt id."""

    def __init__(self) -> None:
        self.commands: list[c.Lease] = []

    async def propose_leader(self, cmd: c.Lease) -> dict:
        self.commands.append(cmd)
        return {"ok": True, "leases": [{"attempt_id": a} for a in cmd.attempt_ids]}


def test_leases_are_prepared_at_commit_and_handed_out_at_their_instant(
        tmp_path: Path) -> None:
    """The response is encoded while waiting for the instant, not after it."""
    db = tmp_path / "s.db"
    cluster_state(db, HERD_SIZE, 0)
    wall_t = time.time() + 0.9  # the herd's instant, 900 ms from now on the wall clock
    offset = T - int(wall_t * 1000)
    proposer = _CommitAtOnce()
    d = Dispatcher(1, proposer=proposer,  # type: ignore[arg-type]
                   open_reader=lambda: open_reader(str(db)),
                   clock=lambda: int(time.time() * 1000) + offset)
    prepared_at: list[float] = []

    def prepare(leases: list[dict]) -> bytes:
        prepared_at.append(time.time())
        return f"{len(leases)} leases".encode()

    got = asyncio.run(d.lease("w", ["herd"], 1000, 5, prepare=prepare))
    returned_at = time.time()
    d.close()
    assert got == b"1000 leases"
    assert proposer.commands[0].now_ms == T  # stamped with the herd's instant
    # Order, not speed: prepared right after the commit, before T; handed out at T.
    assert prepared_at[0] < wall_t - 0.1
    assert returned_at >= wall_t - 0.005


def test_a_waiting_poll_ends_when_leadership_ends(tmp_path: Path) -> None:
    """Even with an untrusted clock (which never proposes, so never fails), a poll waiting
    at a leader that steps down ends at once: its worker asks another node."""
    db = tmp_path / "s.db"
    cluster_state(db, 0, 1)
    d = Dispatcher(1, proposer=_CommitAtOnce(),  # type: ignore[arg-type]
                   open_reader=lambda: open_reader(str(db)))
    d.gate = lambda: False

    async def main() -> None:
        poll = asyncio.create_task(d.lease("w", ["few"], 10, 30))
        await asyncio.sleep(0.2)
        assert not poll.done()
        d.close()
        with pytest.raises(LostEpoch):
            await asyncio.wait_for(poll, 5)

    asyncio.run(main())


def test_runs_reserved_by_leases_in_flight_are_left_out_however_many(tmp_path: Path) -> None:
    # Sixteen pollers' Leases in flight reserve far more runs than the rows one choice reads
    # (4 x its batch): the choice still finds the free ones, ahead and at the instant.
    db = tmp_path / "s.db"
    cluster_state(db, 6000, 0)
    d = Dispatcher(1, proposer=None, open_reader=lambda: open_reader(str(db)),  # type: ignore[arg-type]
                   ahead_ms=2000, herd_ahead_ms=10_000)
    first, _, _ = d._select_ahead(["herd"], 5000, T - 9000)
    assert len(first) == 5000
    d.reserved.update(first)
    rest, lead, _ = d._select_ahead(["herd"], 100, T - 8000)
    assert len(rest) == 100 and lead == 10_000 and not set(rest) & set(first)
    due, _, _ = d._select(["herd"], 100, T)
    assert len(due) == 100 and not set(due) & set(first)
    d.close()
