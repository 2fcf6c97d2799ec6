"""Skip reasons and outcomes against the job's spec (issue 37, item 3): job `j` of the
synthetic run is `allow`, not paused by any operation, and its command always exits 0."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.workload import effect_cmd, group_cmd
from tests.chaos.test_checker import JOB_SPEC, T0, check, clean_run, hist_op, iso, nodes_occ


def ended(status: str, reason: str | None, *, spec: dict[str, Any] | None = None,
          at: int = T0 + 20) -> dict[str, Any]:
    """The clean run with j's instant `at` ending (status, reason) on every node."""
    run = clean_run()
    if spec is not None:
        for h in run["history"]:
            if h.get("f") == "create":
                h["spec"] = {**JOB_SPEC, **spec}
    for occs in nodes_occ(run):
        for o in occs:
            if o["scheduled_for"] == iso(at):
                o.update(status=status, reason=reason)
    return run


@pytest.mark.parametrize(("status", "reason", "spec", "flagged"), [
    ("skipped", "overlap", None, "skip_reason_wrong"),
    ("skipped", "overlap", {"overlap_policy": "replace"}, "skip_reason_wrong"),
    ("skipped", "overlap", {"overlap_policy": "forbid"}, None),
    ("skipped", "overlap", {"overlap_policy": "buffer_one"}, None),
    ("skipped", "paused", None, "skip_reason_wrong"),
    ("skipped", "calendar:other", None, "skip_reason_wrong"),
    ("skipped", "bogus", None, "unexplained_skip"),
    ("failed", "exit code 1", None, "outcome_wrong"),
    ("failed", "heartbeat timeout", None, None),
    ("failed", "max runtime exceeded", None, None),
    ("cancelled", "replaced", None, "outcome_wrong"),
    ("cancelled", "replaced", {"overlap_policy": "replace"}, None),
    ("cancelled", "job deleted", None, "outcome_wrong"),
    ("cancelled", "cancelled by ops", None, "outcome_wrong"),
    ("succeeded", None, {"target": {"shell": effect_cmd(0, 1)}}, "outcome_wrong"),
])
def test_skip_reasons_and_outcomes_the_job_cannot_have(
        status: str, reason: str, spec: dict[str, Any] | None, flagged: str | None) -> None:
    v = check(ended(status, reason, spec=spec))["violations"]
    assert set(v) == ({flagged} if flagged else set()), v
    if flagged:
        assert {x["node"] for x in v[flagged]} >= {"n1", "n2", "n3"}
        assert f"j@{iso(T0 + 20)}" in {x["occurrence"] for x in v[flagged]}


def test_a_pause_or_a_cancel_in_the_run_permits_its_skip_or_end() -> None:
    run = ended("skipped", "paused")
    run["history"] += hist_op(60, "pause", "info", T0 + 15, job="j")
    assert check(run)["violations"] == {}
    run = ended("cancelled", "cancelled by chaos-admin")
    run["history"] += hist_op(61, "cancel", "ok", T0 + 21, job="j",
                              occurrence=f"j@{iso(T0 + 20)}")
    assert check(run)["violations"] == {}


def test_the_workloads_targets_have_a_fixed_exit() -> None:
    from chaos.checks_outcomes import expected_exit

    assert expected_exit({"shell": effect_cmd(3)}) == 0
    assert expected_exit({"shell": effect_cmd(0, 1)}) == 1
    assert expected_exit({"shell": group_cmd(0.3)}) == 0
    assert expected_exit({"http": {"url": "http://10.0.0.1:9100/effect"}}) == 0
    assert expected_exit({"shell": "true"}) is None
