"""The dispatcher looks past a full concurrency group, and keeps live runs ahead of a
large backfill of an `allow` job on the same queue (BACKFILL_SHARE)."""

from __future__ import annotations

from pathlib import Path

from raftcron.core import commands as c
from raftcron.core import identity
from raftcron.core.model import parse_job
from raftcron.leader import dispatch
from raftcron.leader.dispatch import freed_by
from tests.integration.test_dispatch_held import T0, T, lease, setup


def put(p, job_id: str, group: str | None = None) -> None:
    spec = parse_job({"id": job_id, "queue": "q", "concurrency_group": group,
                      "schedule": {"cron": "0 0 1 1 *"}, "target": {"shell": "true"}}).to_spec()
    assert p.node.apply(c.PutJob(f"put-{job_id}", T0, spec, True))["ok"]


def test_a_full_group_is_looked_past_and_comes_back_when_a_run_ends(tmp_path: Path) -> None:
    p, d = setup(tmp_path)
    assert p.node.apply(c.PutConcurrencyGroup("g", T0, "default", "db", 2))["ok"]
    for i in range(3):
        put(p, f"g{i}", "db")
    put(p, "other")
    instants = [T0 - i * 60_000 for i in range(1, 101)]
    for i in range(3):
        assert p.node.apply(c.Backfill(f"bf{i}", T0, f"g{i}", "k", instants))["created"] == 100
    first = lease(d, 10)
    assert len(first) == 2 and {x["job_id"] for x in first} <= {"g0", "g1", "g2"}
    assert p.node.apply(c.Claim(1, T, [["other", 1, T, T, "fire"]]))["ok"]
    proposals = len(p.sent)
    got = lease(d, 10)
    assert [x["job_id"] for x in got] == ["other"]  # past 300 runs of a full group
    assert len(p.sent) - proposals <= 2
    done = c.Complete(T + 2000, "w", [[first[0]["attempt_id"], first[0]["fencing_token"],
                                       "succeeded", 0, ""]])
    assert p.node.apply(done)["ok"]
    d.free(*freed_by(done))
    assert len(lease(d, 10)) == 1  # one slot came free
    d.close()


def test_raising_a_groups_limit_frees_it(tmp_path: Path) -> None:
    p, d = setup(tmp_path)
    for i in range(3):
        put(p, f"g{i}", "db")
        assert p.node.apply(c.Backfill(f"bf{i}", T0, f"g{i}", "k", [T0 - 60_000]))["ok"]
    assert len(lease(d, 10)) == 1  # a group nobody set: limit 1
    raise_it = c.PutConcurrencyGroup("g", T0, "default", "db", 3)
    assert p.node.apply(raise_it)["ok"]
    d.free(*freed_by(raise_it))
    assert len(lease(d, 10)) == 2
    d.close()


def test_live_runs_get_most_of_each_batch_during_a_large_backfill(tmp_path: Path) -> None:
    p, d = setup(tmp_path)
    put(p, "bulk")
    live = [f"live{i}" for i in range(24)]  # 8 + 16 live leases below
    for job in live:
        put(p, job)
    instants = [T0 - i * 60_000 for i in range(1, 2001)]
    for i in range(0, 2000, 500):
        assert p.node.apply(c.Backfill(f"bf{i}", T0, "bulk", f"k{i}", instants[i:i + 500]))["ok"]
    assert p.node.apply(c.Claim(1, T, [[job, 1, T, T, "fire"] for job in live]))["ok"]
    got = lease(d, 10)
    backfills = [x for x in got if identity.is_backfill(x["occurrence_id"])]
    assert len(got) == 10 and len(backfills) == int(dispatch.BACKFILL_SHARE * 10)
    # One run at a time: a fifth of the leases go to the backfill, not none, not all.
    kinds = [identity.is_backfill(lease(d, 1)[0]["occurrence_id"]) for _ in range(20)]
    assert sum(kinds) == int(dispatch.BACKFILL_SHARE * 20)
    # Once the live runs are all out, the backfill takes whole batches.
    rest = lease(d, 10)
    assert all(identity.is_backfill(x["occurrence_id"]) for x in rest) and len(rest) == 10
    d.close()


def test_a_backfill_fills_what_the_live_runs_leave(tmp_path: Path) -> None:
    p, d = setup(tmp_path)
    put(p, "bulk")
    put(p, "live")
    assert p.node.apply(c.Backfill("bf", T0, "bulk", "k",
                                   [T0 - i * 60_000 for i in range(1, 101)]))["ok"]
    assert p.node.apply(c.Claim(1, T, [["live", 1, T, T, "fire"]]))["ok"]
    got = lease(d, 10)
    assert len(got) == 10 and [x["job_id"] for x in got].count("live") == 1
    d.close()


