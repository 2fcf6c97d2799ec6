"""A fault whose target is not running did not happen: the nemesis records `fail`, and the
checker turns that into fault_not_started (unit test: the process table is a stand-in)."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest

from chaos.checker import check_run
from chaos.checks_inputs import check_faults
from chaos.history import History, read_history
from chaos.nemesis import Nemesis, Planned
from chaos.report_model import Report


class NoProcesses:
    """Three node ids, none running, one leader as far as views go."""

    ids = ["n1", "n2", "n3"]
    workers: dict[str, Any] = {}

    def wait_leader(self, timeout: float = 0) -> str:
        return "n1"

    def view(self, nid: str, timeout: float = 0) -> dict[str, Any]:
        return {"epoch": 3, "term": 3}

    def node_pid(self, nid: str) -> None:
        return None

    def kill_node(self, nid: str, *args: Any, **kw: Any) -> None:
        return None


@pytest.mark.parametrize("kind", ["kill-leader", "kill-follower", "pause-leader",
                                  "pause-two"])
def test_fault_on_a_dead_target_is_recorded_as_not_started(tmp_path: Path, kind: str) -> None:
    history = History(tmp_path / "history.jsonl", 7, 0.0)
    nemesis = Nemesis(NoProcesses(), None, history)  # type: ignore[arg-type]
    nemesis.heal_all = lambda: {}  # type: ignore[method-assign]
    nemesis.run(Planned(kind, 0.0, 0.0, random.Random(1)), threading.Event())
    history.close()
    lines = read_history(tmp_path / "history.jsonl")
    assert [h["type"] for h in lines] == ["invoke", "fail"]
    assert "no running process" in lines[1]["error"]
    rep = Report()
    check_faults(rep, lines)
    assert [v["kind"] for v in rep.violations["fault_not_started"]] == [kind]
    assert "fault_not_started" in check_run({"history": lines})["verdict"]["violations"]


def test_long_profile_plans_overlapping_pairs_for_its_budget() -> None:
    from chaos.nemesis import CLOCK_KINDS, PAIR_FIRST_KINDS, PAIR_SECOND_KINDS, plan

    pairs = plan(5, "long", 1800)
    assert pairs and all(p.partner is not None for p in pairs)
    for p in pairs:
        assert p.partner is not None
        assert p.kind in PAIR_FIRST_KINDS and p.partner.kind in PAIR_SECOND_KINDS
        assert not (p.kind in CLOCK_KINDS and p.partner.kind in CLOCK_KINDS)
        assert p.partner_after_s <= max(p.duration_s, 0.5) * 0.7  # starts while p is on
    planned = sum(max(p.duration_s, p.partner_after_s + p.partner.duration_s) + p.gap_s + 10
                  for p in pairs if p.partner)
    assert 1800 <= planned < 1800 + 80
    assert [p.kinds() for p in plan(5, "long", 1800)] == [p.kinds() for p in pairs]
    # ci: one fault after another; only the worker clock bump rides on one of them.
    assert [p.partner.kind for p in plan(5, "ci", 300) if p.partner] == ["clock-bump-worker"]


class Recorder(Nemesis):
    """Records when each fault's run begins and ends instead of causing it."""

    def __init__(self) -> None:
        self.spans: dict[str, tuple[float, float]] = {}

    def run(self, p: Planned, stop_requested: threading.Event) -> None:
        import time

        began = time.monotonic()
        stop_requested.wait(p.duration_s)
        self.spans[p.kind] = (began, time.monotonic())


def test_a_pair_runs_both_faults_at_once() -> None:
    first = Planned("kill-leader", 0.6, 0.0, random.Random(1))
    first.partner = Planned("ack-loss", 0.3, 0.0, random.Random(2))
    first.partner_after_s = 0.1
    nemesis = Recorder()
    nemesis.run_planned(first, threading.Event())
    (a0, a1), (b0, b1) = nemesis.spans["kill-leader"], nemesis.spans["ack-loss"]
    assert a0 < b0 < a1 and b1 <= a1 + 0.05
