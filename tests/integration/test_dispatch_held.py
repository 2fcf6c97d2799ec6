"""Runs a Lease must hold back (an exclusive job with a run leased, a tenant at its
`max_concurrent_runs`) do not stall the other jobs of their queue, however long their
backlog, and come back once a command frees them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from raftcron.core import commands as c
from raftcron.core.model import parse_job
from raftcron.leader.dispatch import Dispatcher, freed_by
from raftcron.state.db import open_reader
from tests.integration.test_deadlines_outbox import FakeProposer
from tests.integration.test_machine import Node

T0 = 1_767_225_600_000
T = T0 + 3_600_000


def put(p: FakeProposer, job_id: str, tenant: str, overlap: str) -> None:
    spec = parse_job({"id": job_id, "tenant": tenant, "queue": "q", "overlap_policy": overlap,
                      "schedule": {"cron": "0 0 1 1 *"}, "target": {"shell": "true"}}).to_spec()
    assert p.node.apply(c.PutJob(f"put-{job_id}", T0, spec, True))["ok"]


def setup(tmp_path: Path) -> tuple[FakeProposer, Dispatcher]:
    node = Node(tmp_path / "s.db")
    node.begin(1)
    p = FakeProposer(node)
    d = Dispatcher(1, proposer=p, open_reader=lambda: open_reader(node.path),  # type: ignore[arg-type]
                   clock=lambda: T + 1000)
    return p, d


def lease(d: Dispatcher, n: int) -> list[dict[str, Any]]:
    return asyncio.run(d.lease("w", ["q"], n, 2))


def test_a_forbid_jobs_backfill_does_not_stall_the_queue(tmp_path: Path) -> None:
    p, d = setup(tmp_path)
    put(p, "fb", "default", "forbid")
    put(p, "other", "default", "allow")
    instants = [T0 - i * 60_000 for i in range(1, 201)]
    assert p.node.apply(c.Backfill("bf", T0, "fb", "k", instants))["created"] == 200
    first = lease(d, 10)
    assert [x["job_id"] for x in first] == ["fb"]  # one at a time
    # Due after the whole backlog: the oldest 40 pending runs are all the forbid job's.
    assert p.node.apply(c.Claim(1, T, [["other", 1, T, T, "fire"]]))["ok"]
    proposals = len(p.sent)
    got = lease(d, 10)
    assert [x["job_id"] for x in got] == ["other"]
    # One refused Lease at most, then the held job is looked past (no loop of proposals).
    assert len(p.sent) - proposals <= 2
    # Its run ends: the job is free, and its next run goes out.
    done = c.Complete(T + 2000, "w", [[first[0]["attempt_id"], first[0]["fencing_token"],
                                       "succeeded", 0, ""]])
    assert p.node.apply(done)["ok"]
    d.free(*freed_by(done))
    assert [x["job_id"] for x in lease(d, 10)] == ["fb"]
    d.close()


def test_a_tenant_at_its_run_limit_does_not_stall_the_queue(tmp_path: Path) -> None:
    p, d = setup(tmp_path)
    assert p.node.apply(c.PutTenant("t", T0, "busy", None, 1, None))["ok"]
    put(p, "b", "busy", "allow")
    put(p, "other", "default", "allow")
    instants = [T0 - i * 60_000 for i in range(1, 201)]
    assert p.node.apply(c.Backfill("bf", T0, "b", "k", instants))["created"] == 200
    first = lease(d, 10)
    assert [x["job_id"] for x in first] == ["b"]  # the tenant's one slot
    assert p.node.apply(c.Claim(1, T, [["other", 1, T, T, "fire"]]))["ok"]
    assert [x["job_id"] for x in lease(d, 10)] == ["other"]
    done = c.Complete(T + 2000, "w", [[first[0]["attempt_id"], first[0]["fencing_token"],
                                       "succeeded", 0, ""]])
    assert p.node.apply(done)["ok"]
    d.free(*freed_by(done))
    assert [x["job_id"] for x in lease(d, 10)] == ["b"]
    d.close()


def test_a_hold_ends_by_itself_when_what_freed_it_came_first(tmp_path: Path) -> None:
    """The command that frees a job can be handled before the Lease that held it returns
    (same Raft tick): the hold then ends after HELD_FOR_S, and a waiting poll looks again
    then rather than at the end of its long poll."""
    p, d = setup(tmp_path)
    put(p, "fb", "default", "forbid")
    assert p.node.apply(c.Backfill("bf", T0, "fb", "k", [T0 - 60_000, T0 - 120_000]))["ok"]
    [first] = lease(d, 10)

    async def poll_while_the_run_ends() -> list[dict[str, Any]]:
        poll = asyncio.create_task(d.lease("w", ["q"], 10, 20))
        await asyncio.sleep(0.3)  # the poll's Lease held "fb" back; it waits now
        assert not poll.done() and "fb" in d.held_jobs
        done = c.Complete(T + 2000, "w", [[first["attempt_id"], first["fencing_token"],
                                           "succeeded", 0, ""]])
        assert p.node.apply(done)["ok"]  # and no `free`, no notify: they came before the hold
        return await asyncio.wait_for(poll, 15)

    got = asyncio.run(poll_while_the_run_ends())
    assert [x["job_id"] for x in got] == ["fb"]
    d.close()
