"""chaos/checks_chains.py on synthetic node reads: one downstream run per upstream end."""

from __future__ import annotations

from typing import Any

from chaos.checks_chains import check_chains
from chaos.report_model import Report
from tests.chaos.test_checker import T0, iso

END = T0 + 100
# The followers' creations, acknowledged just before the first upstream end.
CREATED = [{"f": "create", "invoke": {"job": job}, "done": {"type": "ok", "cluster_wall": T0}}
           for job in ("chain-down", "chain-alarm")]


def occ(job: str, n: int, status: str, finished: float | None = None,
        upstream: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": f"{job}@{n}", "job_id": job, "kind": "chained" if upstream else "scheduled",
            "status": status, "finished_at": iso(finished if finished is not None else T0 + n),
            "upstream": upstream}


def down(job: str, n: int, upstream_id: str, outcome: str) -> dict[str, Any]:
    return occ(job, n, "succeeded", upstream={"job_id": upstream_id.split("@")[0],
                                              "occurrence_id": upstream_id,
                                              "outcome": outcome})


def run(occurrences: list[dict[str, Any]]) -> tuple[dict[str, list], int]:
    rep = Report()
    judged = check_chains(rep, {"n1": {"occurrences": occurrences}}, CREATED, END)
    return dict(rep.violations), judged


def test_each_end_with_its_one_run_is_valid_and_counted() -> None:
    v, judged = run([
        occ("chain-up", 1, "succeeded"), down("chain-down", 2, "chain-up@1", "succeeded"),
        occ("chain-up", 3, "failed"), down("chain-down", 4, "chain-up@3", "failed"),
        occ("fail-4s", 5, "failed"), down("chain-alarm", 6, "fail-4s@5", "failed"),
        occ("chain-up", 7, "cancelled"), occ("chain-up", 8, "running"),
    ])
    assert v == {} and judged == 3


def test_a_missing_run_is_flagged_unless_the_end_was_at_the_read() -> None:
    v, _ = run([occ("chain-up", 1, "succeeded"),
                occ("chain-up", 2, "succeeded", finished=END - 0.5)])
    assert [x["upstream"] for x in v["chain_missing"]] == ["chain-up@1"]


def test_a_second_run_for_one_end_is_flagged() -> None:
    v, _ = run([occ("chain-up", 1, "succeeded"),
                down("chain-down", 2, "chain-up@1", "succeeded"),
                down("chain-down", 3, "chain-up@1", "succeeded")])
    assert set(v) == {"chain_duplicate"}


def test_a_run_for_an_end_not_followed_or_not_held_is_an_orphan() -> None:
    v, _ = run([occ("fail-4s", 1, "succeeded"), down("chain-alarm", 2, "fail-4s@1", "succeeded"),
                down("chain-down", 3, "chain-up@9", "succeeded")])
    assert sorted(x["upstream"] for x in v["chain_orphan"]) == ["chain-up@9", "fail-4s@1"]


def test_a_wrong_recorded_outcome_is_flagged() -> None:
    v, _ = run([occ("chain-up", 1, "failed"), down("chain-down", 2, "chain-up@1", "succeeded")])
    assert set(v) == {"chain_outcome_wrong"}


def test_an_end_before_the_follower_existed_owes_nothing() -> None:
    rep = Report()
    late = [{"f": "create", "invoke": {"job": "chain-down"},
             "done": {"type": "ok", "cluster_wall": T0 + 5}}]
    check_chains(rep, {"n1": {"occurrences": [occ("chain-up", 1, "succeeded"),
                                              occ("chain-up", 9, "succeeded")]}}, late, END)
    assert [x["upstream"] for x in rep.violations["chain_missing"]] == ["chain-up@9"]
