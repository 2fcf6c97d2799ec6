"""The leader's duties below the cluster's protocol level write nothing a member of the
previous build could not read: no ConfirmClock, no lease ahead of its instant, no
deadline on an alert. Their level is what the node sets (`duty.level`); unset, it is
the oldest level (fail closed)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from raftcron.core import commands as c
from raftcron.core.protocol import BASE_LEVEL, PROTOCOL_LEVEL
from raftcron.leader.availability import ClockConfirmations
from raftcron.leader.deadlines import Deadlines
from raftcron.leader.dispatch import Dispatcher
from raftcron.state.db import open_reader
from tests.integration.test_dispatch_herd import T, _CommitAtOnce, cluster_state
from tests.integration.test_machine import MIN, T0, Node
from tests.integration.test_run_alerts import FakeProposer, plan

SEC = 1000


def test_no_clock_confirmation_below_its_level(tmp_path: Path) -> None:
    node = Node(tmp_path / "s.db")
    node.begin(1)
    proposer = FakeProposer(node)
    duty = ClockConfirmations(node.epoch, proposer, clock=lambda: T0)  # type: ignore[arg-type]
    assert duty.level() == BASE_LEVEL, "unset: the oldest level"
    asyncio.run(duty.pass_once())
    assert proposer.sent == []
    duty.level = lambda: PROTOCOL_LEVEL
    asyncio.run(duty.pass_once())
    assert [type(cmd) for cmd in proposer.sent] == [c.ConfirmClock]


def test_no_lease_ahead_below_its_level(tmp_path: Path) -> None:
    """A worker that asks for runs ahead gets them at their instant, as before."""
    db = tmp_path / "s.db"
    cluster_state(db, 0, 3)
    proposer = _CommitAtOnce()
    d = Dispatcher(1, proposer=proposer,  # type: ignore[arg-type]
                   open_reader=lambda: open_reader(str(db)), clock=lambda: T - 100,
                   ahead_ms=2_000)
    assert d.level() == BASE_LEVEL
    assert len(asyncio.run(d.lease("w", ["few"], 10, 0, ahead=True))) == 3
    cmd = proposer.commands[0]
    assert (cmd.now_ms, cmd.ahead_ms) == (T, 0), "stamped at the instant, nothing ahead"
    assert "ahead_ms" not in c.encode(cmd).decode()
    d.close()
    proposer = _CommitAtOnce()
    d = Dispatcher(1, proposer=proposer,  # type: ignore[arg-type]
                   open_reader=lambda: open_reader(str(db)), clock=lambda: T - 100,
                   ahead_ms=2_000)
    d.level = lambda: PROTOCOL_LEVEL
    asyncio.run(d.lease("w", ["few"], 10, 0, ahead=True))
    assert (proposer.commands[0].now_ms, proposer.commands[0].ahead_ms) == (T - 100, 2_000)
    d.close()


def test_no_deadline_on_an_alert_below_its_level(tmp_path: Path) -> None:
    for level, deadline in ((None, None), (PROTOCOL_LEVEL, T0 + MIN + 30 * SEC)):
        node = Node(tmp_path / f"s{level}.db")
        node.begin(1)
        node.create("j", now=T0, deadline_s=30)
        duty = Deadlines(node.epoch, proposer=None, open_reader=None)  # type: ignore[arg-type]
        if level is None:
            assert duty.level() == BASE_LEVEL, "unset: the oldest level"
        else:
            duty.level = lambda: PROTOCOL_LEVEL
        cmds = plan(node, duty, T0 + MIN + 35 * SEC)
        assert [(x.reason, x.deadline_ms) for x in cmds] == [  # type: ignore[attr-defined]
            ("missed", deadline)]
        assert ("deadline_ms" in c.encode(cmds[0]).decode()) == (deadline is not None)
