"""The state machine on real SQLite: every change of a job writes its history row, in
the change's transaction, from the command alone (state.job_history)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from raftcron.core import commands as c
from raftcron.core.model import parse_job
from raftcron.core.protocol import PROTOCOL_LEVEL
from raftcron.state.db import open_writer
from raftcron.state.digest import digest
from raftcron.state.job_history import MAX_VERSIONS_PER_JOB, PRUNE_JOBS_PER_COMMAND
from raftcron.state.machine import StateMachine
from raftcron.testing import commit_protocol_level

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY = 86_400_000


def spec(job_id: str = "invoices", cron: str = "0 9 * * 1-5", **kw: Any) -> dict[str, Any]:
    return parse_job({"id": job_id, "tenant": kw.pop("tenant", "acme"),
                      "schedule": {"cron": cron, "timezone": "Europe/Berlin"},
                      "target": {"shell": "./send.sh"}, **kw}).to_spec()


class Node:
    def __init__(self, path: Path, level: int | None = PROTOCOL_LEVEL) -> None:
        """`level`: the committed protocol level (None: none, a cluster mid-upgrade)."""
        self.conn = open_writer(str(path))
        if level is not None:
            commit_protocol_level(self.conn, level)
        self.sm = StateMachine(self.conn)
        self.index = 0
        self.req = 0

    def apply(self, cmd: c.Command) -> dict[str, Any]:
        self.index += 1
        return self.sm.apply(self.index, cmd)

    def rid(self) -> str:
        self.req += 1
        return f"req-{self.req}"

    def history(self, job_id: str = "invoices") -> list[tuple]:
        return self.conn.execute(
            "SELECT seq, version, kind, tenant, who, note, at_ms FROM job_history "
            "WHERE job_id = ? ORDER BY seq", (job_id,)).fetchall()

    def spec_at(self, seq: int, job_id: str = "invoices") -> dict[str, Any]:
        row = self.conn.execute("SELECT spec FROM job_history WHERE job_id = ? AND seq = ?",
                                (job_id, seq)).fetchone()
        return json.loads(row[0])


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path / "state.db")


def changes_of_every_kind(node: Node) -> None:
    """Create, edit, pause, resume (one by one and in bulk), a pause of a paused job (no
    change), and delete, by named principals."""
    assert node.apply(c.PutJob(node.rid(), T0, spec(), True, who="alice"))["ok"]
    assert node.apply(c.PutJob(node.rid(), T0 + 1000, spec(cron="0 10 * * 1-5"), False,
                               expected_version=1, who="bob"))["ok"]
    assert node.apply(c.PauseJob(node.rid(), T0 + 2000, "invoices", who="carol"))["ok"]
    assert node.apply(c.PauseJob(node.rid(), T0 + 2500, "invoices", who="carol"))["ok"]
    assert node.apply(c.ResumeJob(node.rid(), T0 + 3000, "invoices", who="dave"))["ok"]
    assert node.apply(c.BulkPause(node.rid(), T0 + 4000, {"tenant": "acme"}, True, "erin",
                                  "month-end freeze"))["changed"] == 1
    assert node.apply(c.BulkPause(node.rid(), T0 + 5000, {"tenant": "acme"}, False, "erin",
                                  "thawed"))["changed"] == 1
    assert node.apply(c.DeleteJob(node.rid(), T0 + 6000, "invoices", who="frank"))["ok"]


def test_each_kind_of_change_writes_its_row_with_who_when_and_the_spec_after(
        node: Node) -> None:
    changes_of_every_kind(node)
    assert node.history() == [
        (1, 1, "create", "acme", "alice", None, T0),
        (2, 2, "edit", "acme", "bob", None, T0 + 1000),
        (3, 2, "pause", "acme", "carol", None, T0 + 2000),  # the second pause changed nothing
        (4, 2, "resume", "acme", "dave", None, T0 + 3000),
        (5, 2, "bulk_pause", "acme", "erin", "month-end freeze", T0 + 4000),
        (6, 2, "bulk_resume", "acme", "erin", "thawed", T0 + 5000),
        (7, 2, "delete", "acme", "frank", None, T0 + 6000),
    ]
    assert node.spec_at(1)["schedule"]["cron"] == "0 9 * * 1-5"
    assert node.spec_at(2)["schedule"]["cron"] == "0 10 * * 1-5"
    assert [node.spec_at(s)["paused"] for s in (3, 4, 5, 6)] == [True, False, True, False]
    assert node.spec_at(7) == node.spec_at(6)  # a delete keeps the last spec


def test_a_batch_create_writes_one_row_per_job_created(node: Node) -> None:
    assert node.apply(c.PutJob(node.rid(), T0, spec("a"), True, who="alice"))["ok"]
    result = node.apply(c.CreateJobs(node.rid(), T0 + 1, [spec("a"), spec("b"), spec("c")],
                                     who="importer"))
    assert [r["ok"] for r in result["results"]] == [False, True, True]
    assert node.history("a") == [(1, 1, "create", "acme", "alice", None, T0)]
    assert node.history("b") == [(1, 1, "create", "acme", "importer", None, T0 + 1)]
    assert node.history("c") == [(1, 1, "create", "acme", "importer", None, T0 + 1)]


def test_refused_and_replayed_changes_write_nothing(node: Node) -> None:
    assert node.apply(c.PutJob("create", T0, spec(), True, who="alice"))["ok"]
    stale = node.apply(c.PutJob(node.rid(), T0 + 1, spec(cron="5 * * * *"), False,
                                expected_version=7, who="mallory"))
    assert stale["rejected"] == "version_conflict"
    other = node.apply(c.PutJob(node.rid(), T0 + 2, spec(tenant="other"), False, who="m"))
    assert other["rejected"] == "invalid_state"
    assert node.apply(c.PauseJob(node.rid(), T0 + 3, "nope", who="m"))["rejected"] == "not_found"
    # The same request again (a retry whose first outcome was unknown) is answered from
    # its record: no second row.
    assert node.apply(c.PutJob("create", T0, spec(), True, who="alice"))["replayed_request"]
    assert node.history() == [(1, 1, "create", "acme", "alice", None, T0)]


def test_at_most_max_versions_are_kept_per_job(node: Node) -> None:
    assert node.apply(c.PutJob(node.rid(), T0, spec(), True, who="alice"))["ok"]
    edits = MAX_VERSIONS_PER_JOB + 20
    for i in range(edits):
        assert node.apply(c.PutJob(node.rid(), T0 + i + 1, spec(cron=f"{i % 60} 9 * * *"),
                                   False, who="bot"))["ok"]
    rows = node.history()
    assert len(rows) == MAX_VERSIONS_PER_JOB
    # The newest are kept, numbered on: the oldest went first.
    assert [r[0] for r in rows] == list(range(edits + 2 - MAX_VERSIONS_PER_JOB, edits + 2))
    assert rows[-1][1] == edits + 1 and rows[-1][2] == "edit"


def test_a_recreated_job_id_continues_the_sequence(node: Node) -> None:
    assert node.apply(c.PutJob(node.rid(), T0, spec(), True, who="alice"))["ok"]
    assert node.apply(c.DeleteJob(node.rid(), T0 + 1, "invoices", who="bob"))["ok"]
    assert node.apply(c.PutJob(node.rid(), T0 + 2, spec(cron="0 8 * * *"), True,
                               who="carol"))["ok"]
    assert [(r[0], r[1], r[2]) for r in node.history()] == [
        (1, 1, "create"), (2, 1, "delete"), (3, 1, "create")]


def test_retention_prunes_the_history_of_jobs_deleted_before_it_only(node: Node) -> None:
    for job_id in ("gone", "recreated", "kept", "deleted-late"):
        assert node.apply(c.PutJob(node.rid(), T0, spec(job_id), True, who="a"))["ok"]
    for job_id in ("gone", "recreated"):
        assert node.apply(c.DeleteJob(node.rid(), T0 + DAY, job_id, who="b"))["ok"]
    assert node.apply(c.PutJob(node.rid(), T0 + 2 * DAY, spec("recreated"), True,
                               who="c"))["ok"]
    assert node.apply(c.DeleteJob(node.rid(), T0 + 9 * DAY, "deleted-late", who="b"))["ok"]
    node.apply(c.Prune(node.rid(), T0 + 10 * DAY, before_ms=T0 + 8 * DAY))
    left = {r[0] for r in node.conn.execute("SELECT DISTINCT job_id FROM job_history")}
    # A job deleted before the cut goes; one that lives again, one alive and one deleted
    # after the cut keep theirs.
    assert left == {"recreated", "kept", "deleted-late"}
    assert len(node.history("recreated")) == 3


def test_retention_prunes_a_bounded_number_of_jobs_per_command(node: Node) -> None:
    count = PRUNE_JOBS_PER_COMMAND + 5
    for i in range(count):
        assert node.apply(c.PutJob(node.rid(), T0, spec(f"j{i:03d}"), True))["ok"]
        assert node.apply(c.DeleteJob(node.rid(), T0 + 1, f"j{i:03d}"))["ok"]

    def jobs_left() -> int:
        return node.conn.execute("SELECT count(DISTINCT job_id) FROM job_history").fetchone()[0]

    node.apply(c.Prune(node.rid(), T0 + 2 * DAY, before_ms=T0 + DAY))
    assert jobs_left() == 5
    node.apply(c.Prune(node.rid(), T0 + 2 * DAY, before_ms=T0 + DAY))
    assert jobs_left() == 0


def test_replaying_the_same_log_writes_the_same_history_on_every_node(tmp_path: Path) -> None:
    log = []
    first = Node(tmp_path / "a.db")
    original = first.apply
    first.apply = lambda cmd: (log.append(c.encode(cmd)), original(cmd))[1]  # type: ignore[method-assign]
    changes_of_every_kind(first)
    second = Node(tmp_path / "b.db")
    for data in log:  # the same entries, decoded as a follower decodes them
        second.apply(c.decode(data))
    rows = "SELECT * FROM job_history ORDER BY job_id, seq"
    assert first.conn.execute(rows).fetchall() == second.conn.execute(rows).fetchall()
    assert digest(first.conn) == digest(second.conn)
    # A restart replays entries already applied: they change nothing.
    for index, data in enumerate(log, start=1):
        assert second.sm.apply(index, c.decode(data)) == {"ok": True, "replayed": True}
    assert first.conn.execute(rows).fetchall() == second.conn.execute(rows).fetchall()


def test_old_log_entries_without_who_decode_and_record_no_principal(node: Node) -> None:
    old = {"request_id": "r1", "now_ms": T0, "job": spec(), "create": True,
           "expected_version": None}
    entry = json.dumps({"v": 1, "t": "put_job", "a": old}).encode()
    assert node.sm.apply_bytes(1, entry)["ok"]
    pause = json.dumps({"v": 1, "t": "pause_job",
                        "a": {"request_id": "r2", "now_ms": T0 + 1, "job_id": "invoices"}})
    assert node.sm.apply_bytes(2, pause.encode())["ok"]
    assert node.history() == [(1, 1, "create", "acme", None, None, T0),
                              (2, 1, "pause", "acme", None, None, T0 + 1)]


def test_a_database_from_before_history_opens_gains_the_table_and_digests_alike(
        tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = Node(path)
    assert old.apply(c.PutJob("r1", T0, spec(), True))["ok"]
    # The job as the previous version stored it: no history table at all.
    old.conn.execute("DROP TABLE job_history")
    assert old.conn.execute("SELECT name FROM sqlite_master WHERE name = 'job_history'"
                            ).fetchone() is None
    before = digest(old.conn)
    old.conn.close()

    upgraded = Node(path)
    upgraded.index = 1
    assert digest(upgraded.conn) == before  # the new, empty table changes nothing
    assert upgraded.apply(c.PutJob("r2", T0 + 1, spec(cron="0 7 * * *"), False,
                                   expected_version=1, who="bob"))["version"] == 2
    assert upgraded.history() == [(1, 2, "edit", "acme", "bob", None, T0 + 1)]
    assert digest(upgraded.conn) != before


def test_retention_proposes_a_prune_for_old_deleted_job_history_alone(node: Node) -> None:
    from raftcron.leader.retention import Retention

    assert node.apply(c.PutJob(node.rid(), T0, spec(), True))["ok"]
    assert node.apply(c.DeleteJob(node.rid(), T0 + 1, "invoices"))["ok"]
    node.conn.execute("DELETE FROM requests")  # nothing else is old enough to prune
    assert not Retention._anything_to_prune(node.conn, T0 + 1)
    assert Retention._anything_to_prune(node.conn, T0 + 2)
    node.apply(c.Prune(node.rid(), T0 + 3, before_ms=T0 + 2))
    assert not Retention._anything_to_prune(node.conn, T0 + 2)


def test_no_history_is_recorded_until_the_cluster_level_has_it(tmp_path: Path) -> None:
    """Mid-upgrade (no level committed: a level-1 member cannot record history) the state
    stays what the older build writes; from the committed level 2 on, changes are kept."""
    node = Node(tmp_path / "state.db", level=None)
    assert node.apply(c.PutJob(node.rid(), 1_000, spec(), True))["ok"]
    assert node.apply(c.PauseJob(node.rid(), 2_000, "invoices"))["ok"]
    assert node.history() == []
    assert node.apply(c.BeginEpoch(1, "n1", 2_500))["ok"]
    assert node.apply(c.SetClusterLevel(1, 3_000, PROTOCOL_LEVEL))["ok"]
    assert node.apply(c.ResumeJob(node.rid(), 4_000, "invoices", who="ops"))["ok"]
    assert [(r[0], r[2], r[4]) for r in node.history()] == [(1, "resume", "ops")]
