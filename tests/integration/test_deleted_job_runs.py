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
