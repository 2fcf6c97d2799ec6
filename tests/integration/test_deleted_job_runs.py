"""A run stopped because its job was deleted ends `cancelled` with reason `job deleted`,
like the job's waiting runs; a cluster still at protocol level 1 says `replaced`, as a
level-1 build does, so mixed builds keep one state."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftcron.core import commands as c
from raftcron.core import identity
from tests.integration.test_machine import MIN, T0, Node


@pytest.mark.parametrize(("level", "reason"), [(2, "job deleted"), (1, "replaced")])
def test_a_running_run_of_a_deleted_job_ends_job_deleted(tmp_path: Path, level: int,
                                                         reason: str) -> None:
    node = Node(tmp_path / "state.db", level=level)
    node.begin(1)
    node.create("j", now=T0)
    at = T0 + MIN
    node.fire("j", at)
    attempt = identity.attempt_id(identity.scheduled_occurrence_id("j", at), 1)
    lease = node.lease([attempt], at)["leases"][0]
    assert node.apply(c.DeleteJob(node.rid(), at + 100, "j"))["ok"]
    # The worker is told to stop; the killed process reports a failure.
    done = node.apply(c.Complete(at + 2000, "w1", [[lease["attempt_id"],
                                                    lease["fencing_token"], "failed", -9,
                                                    ""]]))
    assert done["results"][0]["status"] == "cancelled"
    assert node.one("SELECT status, reason FROM occurrences WHERE id = ?",
                    lease["occurrence_id"]) == ("cancelled", reason)


def unacknowledged_lease(node: Node, at: int) -> dict:
    node.fire("j", at)
    attempt = identity.attempt_id(identity.scheduled_occurrence_id("j", at), 1)
    result = node.apply(c.Lease(epoch=node.epoch, now_ms=at, worker_id="w1",
                                attempt_ids=[attempt], acknowledge=True))
    return result["leases"][0]


@pytest.mark.parametrize(("level", "ends"), [(2, True), (1, False)])
def test_an_unacknowledged_lease_of_a_deleted_job_ends_rather_than_waits(
        tmp_path: Path, level: int, ends: bool) -> None:
    """Found by the chaos suite: a job deleted while its run's lease awaited its
    acknowledgement; the sweep handed the lease back and the run waited, pending, for a
    job that no longer exists, forever. Now it ends `job deleted` (level 2)."""
    node = Node(tmp_path / "state.db", level=level)
    node.begin(1)
    node.create("j", now=T0)
    at = T0 + MIN
    lease = unacknowledged_lease(node, at)
    assert node.apply(c.DeleteJob(node.rid(), at + 100, "j"))["ok"]
    swept = node.sweep([lease["attempt_id"]], at + 60_000)
    assert swept["unacknowledged"] == [lease["attempt_id"]]
    occ = node.one("SELECT status, reason FROM occurrences WHERE id = ?",
                   lease["occurrence_id"])
    att = node.one("SELECT status FROM attempts WHERE id = ?", lease["attempt_id"])
    if ends:
        assert (occ, att) == (("cancelled", "job deleted"), ("cancelled",))
    else:  # a level-1 build's state, kept until the cluster is at level 2
        assert (occ, att) == (("pending", None), ("pending",))


def test_a_released_lease_of_a_run_a_person_cancelled_is_not_run_after_all(
        tmp_path: Path) -> None:
    """A person cancels a running run, and its worker hands the lease back unrun (it was
    shutting down): the run ends cancelled by that person, never leased again."""
    node = Node(tmp_path / "state.db")
    node.begin(1)
    node.create("j", now=T0)
    at = T0 + MIN
    lease = unacknowledged_lease(node, at)
    assert node.apply(c.CancelOccurrence(node.rid(), at + 50, lease["occurrence_id"],
                                         who="ops", note="wrong data"))["ok"]
    released = node.apply(c.Release(at + 80, "w1", [[lease["attempt_id"],
                                                     lease["fencing_token"]]]))
    assert released["results"][0]["ok"]
    assert node.one("SELECT status FROM occurrences WHERE id = ?",
                    lease["occurrence_id"]) == ("cancelled",)
    assert node.one("SELECT status FROM attempts WHERE id = ?",
                    lease["attempt_id"]) == ("cancelled",)
    assert node.lease([lease["attempt_id"]], at + 200)["leases"] == []
