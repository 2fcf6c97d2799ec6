"""Fair ordering of due runs across tenants and jobs; what frees held-back runs."""

from __future__ import annotations

from raftcron.core import commands as c
from raftcron.leader.dispatch import fair_order, freed_by


def test_one_tenants_herd_cannot_starve_another() -> None:
    rows = [(f"big-{i}", "big", f"job-{i % 50}") for i in range(10_000)]
    rows.append(("small-1", "small", "lonely"))  # the oldest-last row of a second tenant
    batch = fair_order(rows, 10)
    assert "small-1" in batch
    assert len(batch) == 10 and len(set(batch)) == 10


def test_round_robin_over_jobs_within_a_tenant_keeps_age_order_per_job() -> None:
    rows = [("a1", "t", "a"), ("a2", "t", "a"), ("a3", "t", "a"), ("b1", "t", "b")]
    assert fair_order(rows, 4) == ["a1", "b1", "a2", "a3"]


def test_limit_and_empty() -> None:
    assert fair_order([], 5) == []
    rows = [(f"x{i}", f"t{i % 3}", f"j{i}") for i in range(9)]
    out = fair_order(rows, 3)
    assert sorted(out) == ["x0", "x1", "x2"]


def test_ended_runs_free_their_jobs_and_tenant_slots() -> None:
    assert freed_by(c.Complete(1, "w", [["a.b@2026-01-01T00:00:00Z~1", 7, "succeeded", 0, ""],
                                        ["c@manual-x~2", 8, "failed", 1, ""]])) == (
        {"a.b", "c"}, True)
    assert freed_by(c.Release(1, "w", [["a@2026-01-01T00:00:00Z~1", 7]])) == ({"a"}, True)
    assert freed_by(c.Sweep(1, 1, ["s@backfill-0-2026-01-01T00:00:00Z~3"])) == ({"s"}, True)


def test_edits_free_their_job_or_every_tenant() -> None:
    assert freed_by(c.PutJob("r", 1, {"id": "j"}, False)) == ({"j"}, False)
    assert freed_by(c.DeleteJob("r", 1, "j")) == ({"j"}, False)
    assert freed_by(c.PutTenant("r", 1, "t", None, 5, None)) == (set(), True)
    assert freed_by(c.Claim(1, 1, [])) == (set(), False)


def test_every_command_that_frees_runs_reaches_the_dispatcher() -> None:
    """node._handle_applied calls `free` only for WORK_COMMANDS."""
    from raftcron.node import WORK_COMMANDS

    for cmd in (c.Complete(1, "w", []), c.Release(1, "w", []), c.Sweep(1, 1, []),
                c.PutJob("r", 1, {"id": "j"}, False), c.DeleteJob("r", 1, "j"),
                c.PutTenant("r", 1, "t")):
        assert isinstance(cmd, WORK_COMMANDS), type(cmd).__name__
