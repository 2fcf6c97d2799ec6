"""The cluster's protocol level in the state machine (core.protocol, state.cluster_level):
a state without a committed level is at level 1, apply rejects a gated command below its
level (a normal rejected result, identical on every node), `SetClusterLevel` raises the
level and never lowers it, and a node that speaks a lower level stops on an entry above
it as a build of that level would."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftcron.core import commands as c
from raftcron.core import protocol
from raftcron.state.cluster_level import committed_level
from raftcron.state.machine import StateMachine
from tests.integration.test_machine import MIN, T0, Node, att, occ
from tests.unit.test_commands import JOB_SPEC


@pytest.fixture
def old_state(tmp_path: Path) -> Node:
    """A state written before levels existed: no committed level."""
    n = Node(tmp_path / "state.db", level=None)
    n.begin(1)
    n.create("j")
    return n


def gated(n: Node) -> list[c.Command]:
    """One command of each level-2 feature, valid at level 2."""
    n.fire("j", T0 + MIN)
    multi = {**JOB_SPEC, "id": "m", "schedules": [dict(JOB_SPEC["schedule"], name="a")]}
    return [
        c.PutCalendar(n.rid(), T0, {"name": "h", "tenant": "default", "timezone": "UTC",
                                    "exclude": [{"date": "2026-12-25"}]}),
        c.PutConcurrencyGroup(n.rid(), T0, "default", "g", 2),
        c.BulkPause(n.rid(), T0, {"tenant": "default"}, True, "ops", "freeze"),
        c.CancelOccurrence(n.rid(), T0, occ("j", T0 + MIN), "ops", "wrong month"),
        c.ConfirmClock(n.epoch, T0 + MIN, 2500),
        c.Lease(n.epoch, T0 + MIN, "w", [att("j", T0 + MIN)], ahead_ms=2000),
        c.Heartbeat(T0 + MIN, "w", [[att("j", T0 + MIN), 1]], before_start=True),
        c.RaiseAlert(n.epoch, T0 + MIN, "deadline:x", "deadline", job_id="j",
                     occurrence_id=occ("j", T0 + MIN), reason="missed",
                     scheduled_for_ms=T0 + MIN, deadline_ms=T0 + 2 * MIN),
        c.PutJob(n.rid(), T0, {**JOB_SPEC, "id": "k", "labels": {"team": "billing"}}, True),
        c.PutJob(n.rid(), T0, multi, True),
        c.Claim(n.epoch, T0 + MIN, [["j", 1, T0 + 2 * MIN, T0 + 2 * MIN, "fire", ["a"]]]),
    ]


def test_a_state_without_a_committed_level_is_at_level_1(old_state: Node) -> None:
    assert committed_level(old_state.conn) == protocol.BASE_LEVEL == 1


def test_apply_rejects_every_gated_command_below_its_level(old_state: Node) -> None:
    n = old_state
    for cmd in gated(n):
        before = n.q("SELECT * FROM requests")
        index = n.index
        result = n.apply(cmd)
        req = protocol.required(cmd)
        assert req is not None
        assert result == {
            "ok": False, "rejected": "cluster_not_upgraded",
            "message": f"{req.feature} needs protocol level 2: cluster not fully upgraded "
                       "(level 1 of 2)",
            **({"field": req.field} if req.field else {}),
            "feature": req.feature, "cluster_level": 1, "required_level": 2}, cmd
        assert n.index == index + 1  # applied (as a rejection) at its index, not a crash
        assert n.q("SELECT * FROM requests") == before, "not recorded: retried later"
    assert n.q("SELECT * FROM calendars") == []
    assert n.q("SELECT * FROM cluster_availability") == []
    assert n.one("SELECT paused FROM jobs WHERE id = 'j'") == (0,)
    assert n.one("SELECT count(*) FROM jobs") == (1,)


def test_after_set_cluster_level_the_same_commands_apply(old_state: Node,
                                                         tmp_path: Path) -> None:
    n = old_state
    assert n.apply(c.SetClusterLevel(n.epoch, T0, 2)) == {
        "ok": True, "level": 2, "raised": True, "previous": 1}
    results = [n.apply(cmd) for cmd in gated(n)]
    assert all(r.get("rejected") != "cluster_not_upgraded" for r in results), results
    assert n.one("SELECT count(*) FROM calendars") == (1,)
    assert n.one("SELECT count(*) FROM cluster_availability") == (1,)
    assert n.one("SELECT count(*) FROM jobs") == (3,)


def test_the_level_never_goes_down_and_is_fenced_by_the_epoch(old_state: Node) -> None:
    n = old_state
    assert n.apply(c.SetClusterLevel(n.epoch + 5, T0, 2))["rejected"] == "stale_epoch"
    assert committed_level(n.conn) == 1
    assert n.apply(c.SetClusterLevel(n.epoch, T0, 2))["raised"]
    assert n.apply(c.SetClusterLevel(n.epoch, T0, 1)) == {"ok": True, "level": 2,
                                                          "raised": False}
    assert committed_level(n.conn) == 2


def test_two_nodes_applying_the_same_log_agree(tmp_path: Path) -> None:
    """The rejection is state, decided from the committed level alone."""
    a, b = Node(tmp_path / "a.db", level=None), Node(tmp_path / "b.db", level=None)
    for n in (a, b):
        n.begin(1)
        n.create("j")
        for cmd in gated(n):
            n.apply(cmd)
        n.apply(c.SetClusterLevel(1, T0, 2))
        n.apply(c.PutConcurrencyGroup(n.rid(), T0, "default", "g", 3))
    assert a.digest() == b.digest()


def test_a_node_speaking_level_1_stops_on_an_entry_above_it(tmp_path: Path) -> None:
    """As a build of level 1 would: UndecodableCommand, which cluster.raft turns into exit
    70, whatever the level the cluster committed. Level-1 entries apply as usual."""
    n = Node(tmp_path / "s.db")
    old = StateMachine(n.conn, speaks=1)
    first = old.apply_bytes(1, c.encode(c.BeginEpoch(1, "n1", T0)))
    assert first["ok"]
    for i, cmd in enumerate([c.ConfirmClock(1, T0, 2500),
                             c.Lease(1, T0, "w", ["a~1"], ahead_ms=1),
                             c.SetClusterLevel(1, T0, 2)]):
        with pytest.raises(c.UndecodableCommand, match="needs protocol level 2; this node "
                                                       "speaks level 1"):
            old.apply_bytes(2 + i, c.encode(cmd))
    assert old.last_applied == 1
    assert old.apply_bytes(2, c.encode(c.Lease(1, T0, "w", [])))["ok"]


def test_a_node_speaking_level_1_stops_on_a_newer_field_even_at_its_default(
        tmp_path: Path) -> None:
    """As the level-1 build stopped on every lease of an upgraded node that wrote
    `"ahead_ms": 0`; this build applies the same bytes."""
    from tests.unit.test_protocol_levels import LEASE_WITH_DEFAULT

    old = StateMachine(Node(tmp_path / "old.db").conn, speaks=1)
    old.apply_bytes(1, c.encode(c.BeginEpoch(3, "n1", T0)))
    with pytest.raises(c.UndecodableCommand, match="dispatch ahead"):
        old.apply_bytes(2, LEASE_WITH_DEFAULT)
    new = Node(tmp_path / "new.db")
    new.sm.apply_bytes(1, c.encode(c.BeginEpoch(3, "n1", T0)))
    assert new.sm.apply_bytes(2, LEASE_WITH_DEFAULT)["ok"]


def test_this_build_stops_on_an_entry_of_a_newer_level(tmp_path: Path) -> None:
    n = Node(tmp_path / "s.db")
    with pytest.raises(c.UndecodableCommand, match="needs protocol level 3"):
        n.sm.apply_bytes(1, c.encode(c.SetClusterLevel(1, T0, protocol.PROTOCOL_LEVEL + 1)))
