"""Fair ordering of due runs across tenants and jobs."""

from __future__ import annotations

from raftcron.leader.dispatch import fair_order


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
