"""What a node knows of protocol levels (cluster.levels) and the leader's raising of the
cluster's level (leader.cluster_level): fail closed, a member whose level is not known
(unreachable, not probed yet, stale, silent) counts as the oldest level."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from raftcron.cluster import levels as levels_mod
from raftcron.cluster.levels import TEST_LEVEL_ENV, ClusterLevels, spoken_level
from raftcron.core import commands as c
from raftcron.core.protocol import BASE_LEVEL, PROTOCOL_LEVEL
from raftcron.leader.clock import ClockGuard
from raftcron.leader.cluster_level import ClusterLevelRaiser
from raftcron.node import Node

PEERS = ["http://p0", "http://p1"]


def test_the_level_spoken_is_this_builds_unless_a_test_lowers_it() -> None:
    assert spoken_level({}) == PROTOCOL_LEVEL == 2
    assert spoken_level({TEST_LEVEL_ENV: "1"}) == 1
    assert spoken_level({TEST_LEVEL_ENV: " "}) == PROTOCOL_LEVEL
    for bad in ("0", "3", "x", "-1", "1.5"):
        with pytest.raises(ValueError, match=TEST_LEVEL_ENV):
            spoken_level({TEST_LEVEL_ENV: bad})


def test_the_target_is_the_lowest_level_of_every_member() -> None:
    lv = ClusterLevels(speaks=2)
    lv.record_answer(PEERS[0], {"protocol_level": 2})
    lv.record_answer(PEERS[1], {"protocol_level": 2})
    assert lv.target(PEERS) == 2
    lv.record_answer(PEERS[1], {"protocol_level": 1})
    assert lv.target(PEERS) == 1
    assert ClusterLevels(speaks=1).target([]) == 1, "this node counts too"


@pytest.mark.parametrize("answer", [{}, {"protocol_level": None}, {"protocol_level": "2"},
                                    {"protocol_level": True}, {"protocol_level": 0}, [2]])
def test_an_answer_without_a_valid_level_is_the_oldest_level(answer: Any) -> None:
    """A build older than levels announces none."""
    lv = ClusterLevels(speaks=2)
    lv.record_answer(PEERS[0], {"protocol_level": 2})
    lv.record_answer(PEERS[1], answer)
    assert lv.announced(PEERS[1]) == BASE_LEVEL
    assert lv.target(PEERS) == BASE_LEVEL


def test_an_unknown_member_counts_as_the_oldest_level(monkeypatch: pytest.MonkeyPatch) -> None:
    lv = ClusterLevels(speaks=2)
    lv.record_answer(PEERS[0], {"protocol_level": 2})
    assert lv.announced(PEERS[1]) is None
    assert lv.target(PEERS) == BASE_LEVEL, "never probed"
    lv.record_answer(PEERS[1], {"protocol_level": 2})
    assert lv.target(PEERS) == 2
    lv.record_answer(PEERS[1], None)  # its probe failed
    assert lv.target(PEERS) == BASE_LEVEL
    lv.record_answer(PEERS[1], {"protocol_level": 2})
    later = time.monotonic() + levels_mod.ANNOUNCED_FRESH_S + 1
    monkeypatch.setattr(levels_mod.time, "monotonic", lambda: later)
    assert lv.announced(PEERS[1]) is None and lv.target(PEERS) == BASE_LEVEL, "stale"


def test_a_voter_without_a_member_record_yet_counts_as_the_oldest_level() -> None:
    """Adding a node commits it to Raft first, then its record: in between it is a voter
    nobody probes."""
    members = levels_mod.level_members(PEERS, {"10.0.0.1:7000", "10.0.0.9:7000"},
                                       {"10.0.0.1:7000": object()})
    assert members == [*PEERS, "raft://10.0.0.9:7000"]
    lv = ClusterLevels(speaks=2)
    for u in PEERS:
        lv.record_answer(u, {"protocol_level": 2})
    assert lv.target(PEERS) == 2
    assert lv.target(members) == BASE_LEVEL


def test_the_writable_level_is_the_committed_one_never_above_what_the_node_speaks() -> None:
    lv = ClusterLevels(speaks=2)
    assert lv.writable() == BASE_LEVEL, "nothing committed yet"
    lv.note_committed(2)
    assert lv.writable() == 2
    lv.note_committed(1)
    assert lv.committed == 2, "it only rises"
    old = ClusterLevels(speaks=1, committed=2)
    assert old.writable() == 1


def test_an_applied_raise_moves_the_level_the_node_writes_at_and_a_refused_one_does_not() -> None:
    """What the API writes at (NodeView.writable_level) is the node's in-memory level. It
    moves when this node applies a SetClusterLevel (Node._on_applied, on the Raft thread
    right after the entry's transaction), to the level the apply result names, and only
    then: a refused raise, or one whose result names no level, leaves it where it was. No
    state is read (the stand-in has none)."""
    held = SimpleNamespace(levels=ClusterLevels(speaks=2), loop=None,
                           digest_marks=SimpleNamespace(on_applied=lambda cmd, result: None))
    assert Node.writable_level(held) == BASE_LEVEL  # type: ignore[arg-type]
    raise_to_2 = c.SetClusterLevel(3, 1000, 2)
    Node._on_applied(held, raise_to_2, {"ok": False, "message": "not leader"})  # type: ignore[arg-type]
    Node._on_applied(held, raise_to_2, {"ok": True})  # type: ignore[arg-type]
    assert Node.writable_level(held) == BASE_LEVEL  # type: ignore[arg-type]
    Node._on_applied(held, raise_to_2, {"ok": True, "level": 2, "raised": True})  # type: ignore[arg-type]
    assert Node.writable_level(held) == 2  # type: ignore[arg-type]


def test_the_clock_probe_hands_each_answer_and_each_failure_over() -> None:
    g = ClockGuard(PEERS, 3)
    lv = ClusterLevels(speaks=2)
    g.on_answer = lv.record_answer

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "p1":
            return httpx.Response(503)
        return httpx.Response(200, json={"now_ms": int(time.time() * 1000),
                                         "protocol_level": 2})

    lv.record_answer(PEERS[1], {"protocol_level": 2})  # known before its probe fails

    async def probe_all() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            await asyncio.gather(*(g._probe(client, u) for u in PEERS))

    asyncio.run(probe_all())
    assert lv.announced(PEERS[0]) == 2
    assert lv.announced(PEERS[1]) is None


class RecordingProposer:
    def __init__(self, result: dict[str, Any] | None = None) -> None:
        self.commands: list[c.Command] = []
        self.result = result

    async def propose_leader(self, cmd: c.Command) -> dict[str, Any]:
        self.commands.append(cmd)
        assert isinstance(cmd, c.SetClusterLevel)
        return self.result or {"ok": True, "level": cmd.level, "raised": True}


def _raiser(lv: ClusterLevels, proposer: RecordingProposer) -> ClusterLevelRaiser:
    return ClusterLevelRaiser(lv, lambda: PEERS, proposer, clock=lambda: 1234)  # type: ignore[arg-type]


def test_the_leader_commits_the_level_once_every_member_announced_it() -> None:
    lv, proposer = ClusterLevels(speaks=2), RecordingProposer()
    raiser = _raiser(lv, proposer)
    lv.record_answer(PEERS[0], {"protocol_level": 2})
    assert asyncio.run(raiser.pass_once(7)) is False
    assert proposer.commands == [], "p1 not known: counts as level 1"
    lv.record_answer(PEERS[1], {"protocol_level": 1})
    assert asyncio.run(raiser.pass_once(7)) is False and proposer.commands == []
    lv.record_answer(PEERS[1], {"protocol_level": 2})
    assert asyncio.run(raiser.pass_once(7)) is True
    assert proposer.commands == [c.SetClusterLevel(7, 1234, 2)]
    assert lv.committed == 2
    assert asyncio.run(raiser.pass_once(7)) is False
    assert len(proposer.commands) == 1, "committed: nothing more to raise"


def test_a_node_speaking_the_old_level_never_raises_it() -> None:
    lv, proposer = ClusterLevels(speaks=1), RecordingProposer()
    for u in PEERS:
        lv.record_answer(u, {"protocol_level": 2})
    assert asyncio.run(_raiser(lv, proposer).pass_once(7)) is False
    assert proposer.commands == []


def test_a_refused_raise_leaves_the_level_as_it_was() -> None:
    lv = ClusterLevels(speaks=2)
    for u in PEERS:
        lv.record_answer(u, {"protocol_level": 2})
    proposer = RecordingProposer({"ok": False, "rejected": "stale_epoch", "message": "old"})
    assert asyncio.run(_raiser(lv, proposer).pass_once(7)) is False
    assert lv.committed == BASE_LEVEL and len(proposer.commands) == 1


def test_members_that_cannot_be_listed_raise_no_level() -> None:
    """The Raft voters could not be read: a voter left out of the list would count as
    upgraded, so the round raises nothing (fail closed) and the next one asks again."""
    lv, proposer = ClusterLevels(speaks=2), RecordingProposer()
    for u in PEERS:
        lv.record_answer(u, {"protocol_level": 2})
    listing: list[list[str] | None] = [None]
    raiser = ClusterLevelRaiser(lv, lambda: listing[0], proposer,  # type: ignore[arg-type]
                                clock=lambda: 1234)
    assert asyncio.run(raiser.pass_once(7)) is False and proposer.commands == []
    listing[0] = list(PEERS)
    assert asyncio.run(raiser.pass_once(7)) is True
