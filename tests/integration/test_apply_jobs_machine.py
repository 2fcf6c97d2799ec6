"""`ApplyJobs` in the state machine: a plan applies whole, or nothing of it does."""

from __future__ import annotations

from pathlib import Path

from raftcron.core import commands as c
from tests.integration.test_machine import T0, Node, spec


def versions(node: Node) -> dict[str, int]:
    return dict(node.q("SELECT id, version FROM jobs ORDER BY id"))


def put(node: Node, job_id: str, **kw: object) -> None:
    assert node.apply(c.PutJob(node.rid(), T0, spec(job_id, **kw), True))["ok"]


def test_a_plan_creates_edits_and_deletes_in_one_entry(tmp_path: Path) -> None:
    node = Node(tmp_path / "s.db")
    put(node, "keep")
    put(node, "edit")
    put(node, "gone")
    result = node.apply(c.ApplyJobs(
        node.rid(), T0, puts=[[spec("new"), 0], [spec("edit", queue="q2"), 1]],
        deletes=[["gone", 1]], unchanged=[["keep", 1]]))
    assert result["ok"], result
    assert (result["created"], result["changed"], result["deleted"]) == (
        ["new"], ["edit"], ["gone"])
    assert versions(node) == {"edit": 2, "keep": 1, "new": 1}
    # Each change is in its job's history, like a single PUT's.
    kinds = [r[0] for r in node.q("SELECT kind FROM job_history ORDER BY seq")]
    assert kinds[-3:] == ["create", "edit", "delete"]


def test_one_job_moved_since_the_plan_changes_nothing(tmp_path: Path) -> None:
    node = Node(tmp_path / "s.db")
    put(node, "a")
    put(node, "b")
    jobs_before = node.q("SELECT * FROM jobs ORDER BY id")
    history_before = node.q("SELECT count(*) FROM job_history")
    # Each plan read a version the job is not at (it moved since): nothing is written,
    # including the creates and edits listed before the job that moved.
    for puts, deletes, unchanged, moved in (
        ([[spec("new"), 0], [spec("a", queue="x"), 1], [spec("b", queue="y"), 2]], [], [],
         "b"),
        ([[spec("new"), 0]], [["a", 3]], [], "a"),
        ([[spec("new"), 0]], [], [["b", 2]], "b"),
        ([[spec("a", queue="z"), 0]], [], [], "a"),   # the plan thought `a` absent
        ([[spec("ghost", queue="z"), 4]], [], [], "ghost"),  # and `ghost` present
    ):
        result = node.apply(c.ApplyJobs(node.rid(), T0, puts, deletes, unchanged))
        assert not result["ok"] and result["rejected"] == "version_conflict", result
        assert result["field"] == f"expect.{moved}"
        assert "nothing was applied" in result["message"]
        assert node.q("SELECT * FROM jobs ORDER BY id") == jobs_before
        assert node.q("SELECT count(*) FROM job_history") == history_before


def test_an_item_the_state_refuses_rolls_back_the_items_before_it(tmp_path: Path) -> None:
    node = Node(tmp_path / "s.db")
    put(node, "a")
    jobs_before = node.q("SELECT id, version, spec FROM jobs ORDER BY id")
    history_before = node.q("SELECT count(*) FROM job_history")
    # The second put names a calendar that does not exist: the first is undone too.
    result = node.apply(c.ApplyJobs(node.rid(), T0, puts=[
        [spec("new"), 0], [spec("a", calendars=["no-such-calendar"]), 1]]))
    assert not result["ok"], result
    assert result["field"].startswith("jobs.1"), result
    assert node.q("SELECT id, version, spec FROM jobs ORDER BY id") == jobs_before
    assert node.q("SELECT count(*) FROM job_history") == history_before


def test_the_same_request_replays_its_result(tmp_path: Path) -> None:
    node = Node(tmp_path / "s.db")
    cmd = c.ApplyJobs("apply-1", T0, puts=[[spec("new"), 0]])
    first = node.apply(cmd)
    again = node.apply(cmd)
    assert first["ok"] and again["replayed_request"] is True
    assert versions(node) == {"new": 1}
