"""Tenant quotas are decided in apply: the same on every node, from the command alone."""

from __future__ import annotations

from pathlib import Path

from raftcron.core import commands as c
from raftcron.core.model import parse_job
from raftcron.state.db import open_writer
from raftcron.state.digest import digest
from raftcron.state.machine import StateMachine

T0 = 1_767_225_600_000


class Node:
    def __init__(self, path: Path) -> None:
        self.m = StateMachine(open_writer(str(path)))
        self.i = 0
        self.apply(c.BeginEpoch(1, "n1", T0))

    def apply(self, cmd: c.Command) -> dict:
        self.i += 1
        return self.m.apply(self.i, cmd)

    def job(self, job_id: str, tenant: str = "acme", **extra: object) -> dict:
        spec = parse_job({"id": job_id, "tenant": tenant, "schedule": "* * * * * *",
                          "target": {"shell": "true"}, **extra}).to_spec()
        return self.apply(c.PutJob(f"put-{job_id}", T0, spec, True))


def test_max_jobs_refuses_one_more(tmp_path: Path) -> None:
    n = Node(tmp_path / "a.db")
    n.apply(c.PutTenant("t1", T0, "acme", max_jobs=2))
    assert n.job("a")["ok"] and n.job("b")["ok"]
    r = n.job("c")
    assert (r["rejected"], r["quota"], r["field"]) == ("quota_exceeded", "max_jobs", "tenant")
    assert n.job("d", tenant="other")["ok"]  # other tenants are not affected


def test_fires_per_minute_skips_scheduled_and_rate_limits_triggers(tmp_path: Path) -> None:
    n = Node(tmp_path / "a.db")
    n.apply(c.PutTenant("t1", T0, "acme", max_fires_per_minute=3))
    n.job("a")
    items = [["a", 1, T0 + s * 1000, T0 + s * 1000, "fire"] for s in range(1, 6)]
    r = n.apply(c.Claim(1, T0, items))
    assert (r["fired"], r["skipped"]) == (3, 2)
    reasons = [row[0] for row in n.m.conn.execute(
        "SELECT reason FROM occurrences ORDER BY scheduled_for_ms")]
    assert reasons == [None, None, None, "quota", "quota"]
    limited = n.apply(c.TriggerManual("trig-1", T0 + 30_000, "a", "key-1"))
    assert (limited["rejected"], limited["quota"]) == ("rate_limited", "max_fires_per_minute")
    # A rate limit passes: the same request a minute later is applied, not replayed.
    later = n.apply(c.TriggerManual("trig-1", T0 + 60_000, "a", "key-1"))
    assert later["ok"] and later["status"] == "pending"


def test_max_concurrent_runs_holds_leases_back(tmp_path: Path) -> None:
    n = Node(tmp_path / "a.db")
    n.apply(c.PutTenant("t1", T0, "acme", max_concurrent_runs=2))
    n.job("a")
    at = T0 + 1000
    n.apply(c.Claim(1, T0, [["a", 1, at + k, at + k, "fire"] for k in range(4)]))
    ids = [r[0] for r in n.m.conn.execute("SELECT id FROM attempts ORDER BY id")]
    first = n.apply(c.Lease(1, at + 10, "w1", ids))
    assert len(first["leases"]) == 2
    assert n.apply(c.Lease(1, at + 10, "w2", ids))["leases"] == []
    done = first["leases"][0]
    n.apply(c.Complete(at + 20, "w1", [[done["attempt_id"], done["fencing_token"],
                                        "succeeded", 0, ""]]))
    assert len(n.apply(c.Lease(1, at + 30, "w2", ids))["leases"]) == 1


def test_quota_decisions_are_identical_on_two_nodes(tmp_path: Path) -> None:
    a, b = Node(tmp_path / "a.db"), Node(tmp_path / "b.db")
    for n in (a, b):
        n.apply(c.PutTenant("t1", T0, "acme", max_fires_per_minute=2, max_jobs=1))
        n.job("a")
        n.job("b")
        n.apply(c.Claim(1, T0, [["a", 1, T0 + s * 1000, T0 + s * 1000, "fire"]
                                for s in range(1, 4)]))
    assert digest(a.m.conn) == digest(b.m.conn)
