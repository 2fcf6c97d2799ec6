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
