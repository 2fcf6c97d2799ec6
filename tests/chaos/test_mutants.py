"""chaos/mutants: every planted bug still applies to today's code (a refactor that moved
its text would leave the runner testing nothing), and applying one changes only its file."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.mutants import MUTANTS
from chaos.mutants.__main__ import ROOT, StaleMutant, _verdict, apply, copy_tree


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_mutant_applies_exactly_once(mutant, tmp_path: Path) -> None:
    for edit in mutant.edits:
        target = tmp_path / edit.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text((ROOT / edit.path).read_text())
    apply(mutant, tmp_path)
    for edit in mutant.edits:
        text = (tmp_path / edit.path).read_text()
        assert edit.new in text and text != (ROOT / edit.path).read_text()


def test_a_stale_mutant_is_refused(tmp_path: Path) -> None:
    mutant = MUTANTS[0]
    target = tmp_path / mutant.edits[0].path
    target.parent.mkdir(parents=True)
    target.write_text("nothing to mutate here\n")
    with pytest.raises(StaleMutant):
        apply(mutant, tmp_path)


def test_the_copy_holds_the_tracked_tree(tmp_path: Path) -> None:
    copy_tree(tmp_path)
    for name in ("raftcron/worker/runner.py", "chaos/checker.py", "pyproject.toml"):
        assert (tmp_path / name).read_bytes() == (ROOT / name).read_bytes()
    assert not (tmp_path / ".venv").exists()


def test_the_verdict_is_read_from_the_runs_last_json() -> None:
    out = ('chaos: seed 1\n{\n  "valid": false,\n  "violations": {\n    "early_fire": 3\n'
           '  }\n}\nchaos: report in out/report.md\n')
    assert _verdict(out) == {"valid": False, "violations": {"early_fire": 3}}
    assert _verdict("chaos: crashed\n") is None
