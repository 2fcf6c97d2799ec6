"""ElectionGuard's wiring (raftcron.cluster.election) over a stand-in for pysyncobj's
SyncObj that keeps only the state and the election check the guard works with."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from pysyncobj.monotonic import monotonic as raft_clock
from pysyncobj.syncobj import _RAFT_STATE

from raftcron.cluster import prevote
from raftcron.cluster.election import ElectionGuard

PEERS = ("b", "c")


class FakeTransport:
    ready = True

    def __init__(self) -> None:
        self.sent: list[tuple[Any, dict[str, Any]]] = []

    def send(self, node: Any, message: dict[str, Any]) -> None:
        self.sent.append((node, message))

    def of_type(self, mtype: str) -> list[tuple[Any, dict[str, Any]]]:
        return [(n, m) for n, m in self.sent if m.get("type") == mtype]


class FakeSyncObj:
    """The parts of SyncObj the guard reads, and pysyncobj's own election check."""

    def __init__(self) -> None:
        self._SyncObj__raftState = _RAFT_STATE.FOLLOWER
        self._SyncObj__raftCurrentTerm = 5
        self._SyncObj__raftElectionDeadline = raft_clock() + 100
        self._SyncObj__transferInProgress = False
        self._SyncObj__selfNode = "a"
        self._SyncObj__otherNodes = set(PEERS)
        self._SyncObj__connectedNodes = set(PEERS)
        self._SyncObj__lastResponseTime: dict[Any, float] = {}
        self._SyncObj__transport = FakeTransport()
        self._SyncObj__votedForNodeId: Any = None
        self._SyncObj__conf = SimpleNamespace(raftMinTimeout=0.3, raftMaxTimeout=0.6,
                                              leaderFallbackTimeout=0.6)
        self.delivered: list[dict[str, Any]] = []
        self.log_position = (5, 100)

    def _onTick(self, timeToWait: float = 0.0) -> None:  # noqa: N802,N803
        if (self._SyncObj__raftState != _RAFT_STATE.LEADER
                and self._SyncObj__raftElectionDeadline < raft_clock()
                and self._SyncObj__connectedNodes):
            self._SyncObj__raftElectionDeadline = raft_clock() + 0.4
            self._SyncObj__setState(_RAFT_STATE.CANDIDATE)
            self._SyncObj__raftCurrentTerm += 1

    def _SyncObj__generateRaftTimeout(self) -> float:  # noqa: N802
        return 0.4

    def _SyncObj__onNodeConnected(self, node: Any) -> None:  # noqa: N802
        self._SyncObj__connectedNodes.add(node)

    def _SyncObj__onNodeDisconnected(self, node: Any) -> None:  # noqa: N802
        self._SyncObj__connectedNodes.discard(node)

    def _SyncObj__setState(self, state: int) -> None:  # noqa: N802
        self._SyncObj__raftState = state

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:  # noqa: N802
        self.delivered.append(message)
        if message.get("type") == "append_entries":
            if message["term"] > self._SyncObj__raftCurrentTerm:
                self._SyncObj__raftCurrentTerm = message["term"]
            self._SyncObj__setState(_RAFT_STATE.FOLLOWER)
            self._SyncObj__raftElectionDeadline = raft_clock() + 0.4

    def _SyncObj__getCurrentLogTerm(self) -> int:  # noqa: N802
        return self.log_position[0]

    def _SyncObj__getCurrentLogIndex(self) -> int:  # noqa: N802
        return self.log_position[1]


class Node(ElectionGuard, FakeSyncObj):
    def __init__(self, pre_vote: bool = True, announced: tuple[str, ...] = PEERS) -> None:
        self._init_election_guard(pre_vote)
        FakeSyncObj.__init__(self)
        for peer in PEERS:
            self._SyncObj__onNodeConnected(peer)
            self._connected_since[peer] -= 10  # connected long ago
        for peer in announced:
            self._SyncObj__onMessageReceived(peer, {"type": prevote.HELLO})

    @property
    def term(self) -> int:
        return self._SyncObj__raftCurrentTerm

    @property
    def transport(self) -> FakeTransport:
        return self._SyncObj__transport

    def fire_timer(self) -> None:
        self._SyncObj__raftElectionDeadline = raft_clock() - 0.01

    def answer(self, peer: str, granted: bool, reason: str = "",
               retry_after_s: float | None = None, **override: Any) -> None:
        request = self.transport.of_type(prevote.REQUEST)[-1][1]
        self._SyncObj__onMessageReceived(peer, {
            "type": prevote.RESPONSE, "term": request["term"], "round": request["round"],
            "granted": granted, "reason": reason, "retry_after_s": retry_after_s,
            **override})


def test_a_fired_timer_asks_the_peers_instead_of_raising_the_term() -> None:
    n = Node()
    n.fire_timer()
    n._onTick()
    assert n.term == 5 and n._SyncObj__raftState == _RAFT_STATE.FOLLOWER
    asked = n.transport.of_type(prevote.REQUEST)
    assert sorted(p for p, _ in asked) == ["b", "c"]
    assert all(m["term"] == 6 and m["last_log_index"] == 100 and m["last_log_term"] == 5
               for _, m in asked)
    assert n.pre_vote_rounds == 1 and n.elections_started == 0


def test_one_grant_of_two_peers_is_a_majority_and_the_election_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    n = Node()
    n.fire_timer()
    n._onTick()
    with caplog.at_level(logging.INFO, logger="raftcron.raft"):
        n.answer("b", True)
        n._onTick()
    assert n.term == 6 and n._SyncObj__raftState == _RAFT_STATE.CANDIDATE
    assert n.elections_started == 1
    line = next(r.getMessage() for r in caplog.records if "starting an election" in r.getMessage())
    assert "for term 6" in line and "pre-vote granted by b" in line
    assert "since this node started" in line and "election timeout drawn" in line


def test_refusals_and_silence_keep_the_term_and_a_lease_refusal_is_asked_again() -> None:
    n = Node()
    n.fire_timer()
    n._onTick()
    before = len(n.transport.of_type(prevote.REQUEST))
    n.answer("c", False, prevote.REFUSED_LOG)
    n.answer("b", False, prevote.REFUSED_LEASE, retry_after_s=0.05)
    n._onTick()
    assert len(n.transport.of_type(prevote.REQUEST)) == before  # not due yet
    n._round.ask_again_at["b"] -= 0.05  # type: ignore[union-attr] - the 50 ms passed
    for _ in range(3):
        n._onTick()
    assert n.term == 5
    again = n.transport.of_type(prevote.REQUEST)[before:]
    assert [p for p, _ in again] == ["b"]  # asked once more; c's log answer stands


def test_answers_to_an_earlier_round_or_another_term_do_not_count() -> None:
    n = Node()
    n.fire_timer()
    n._onTick()
    n.answer("b", True, round=999)
    n.answer("c", True, term=9)
    n._onTick()
    assert n.term == 5


def test_leader_contact_ends_the_round() -> None:
    n = Node()
    n.fire_timer()
    n._onTick()
    n._SyncObj__onMessageReceived("b", {"type": "append_entries", "term": 5})
    n.answer("c", True)
    n._onTick()
    assert n.term == 5 and n._round is None


def test_a_leadership_transfer_starts_the_election_without_asking() -> None:
    n = Node()
    n._SyncObj__transferInProgress = True
    n.fire_timer()
    n._onTick()
    assert n.term == 6 and not n.transport.of_type(prevote.REQUEST)


def test_a_peer_that_never_announced_pre_vote_counts_after_the_grace_only() -> None:
    n = Node(announced=("c",))  # b runs a version without pre-vote
    n.fire_timer()
    n._onTick()
    assert n.term == 6  # b: connected 10 s, silent about pre-vote: its vote is plain Raft

    fresh = Node(announced=("c",))
    fresh._connected_since["b"] = raft_clock()  # b just connected; its HELLO may follow
    fresh.fire_timer()
    fresh._onTick()
    assert fresh.term == 5


def test_a_peer_that_announced_pre_vote_and_is_silent_counts_as_no() -> None:
    n = Node()
    n.fire_timer()
    for _ in range(3):
        n._onTick()
    assert n.term == 5
    n._SyncObj__onNodeDisconnected("b")
    n._SyncObj__onNodeConnected("b")  # a new connection: it must announce again
    assert "b" not in n._speaks_pre_vote
    assert n.transport.sent[-1] == ("b", {"type": prevote.HELLO})


def test_with_pre_vote_off_the_timer_raises_the_term_and_requests_go_to_pysyncobj() -> None:
    n = Node(pre_vote=False)
    n.fire_timer()
    n._onTick()
    assert n.term == 6 and not n.transport.of_type(prevote.REQUEST)
    n._SyncObj__onMessageReceived("b", {"type": prevote.REQUEST, "term": 9, "round": 1,
                                        "last_log_index": 1, "last_log_term": 1})
    assert not n.transport.of_type(prevote.RESPONSE)
    assert n.delivered[-1]["type"] == prevote.REQUEST


def _request(term: int = 6, log_term: int = 5, log_index: int = 100) -> dict[str, Any]:
    return {"type": prevote.REQUEST, "term": term, "round": 7,
            "last_log_index": log_index, "last_log_term": log_term}


def test_answers_say_no_while_a_leader_is_heard_and_yes_once_it_is_silent() -> None:
    n = Node()
    n._SyncObj__onMessageReceived("c", {"type": "append_entries", "term": 5})
    n._SyncObj__onMessageReceived("b", _request())
    answer = n.transport.of_type(prevote.RESPONSE)[-1][1]
    assert answer["granted"] is False and answer["reason"] == prevote.REFUSED_LEASE
    assert 0 < answer["retry_after_s"] <= 0.3 and answer["round"] == 7
    n._last_leader_contact = raft_clock() - 0.31
    n._SyncObj__onMessageReceived("b", _request())
    assert n.transport.of_type(prevote.RESPONSE)[-1][1]["granted"] is True
    assert n.term == 5 and n._round is None  # answering changes nothing here


def test_a_leader_refuses_and_so_does_a_node_with_a_newer_log() -> None:
    n = Node()
    n._SyncObj__raftState = _RAFT_STATE.LEADER
    n._SyncObj__onMessageReceived("b", _request())
    assert n.transport.of_type(prevote.RESPONSE)[-1][1]["reason"] == prevote.REFUSED_LEADER
    m = Node()
    m._SyncObj__onMessageReceived("b", _request(log_index=99))
    assert m.transport.of_type(prevote.RESPONSE)[-1][1]["reason"] == prevote.REFUSED_LOG


@pytest.mark.parametrize("bad", [{"type": prevote.REQUEST},
                                 {"type": prevote.REQUEST, "term": "x", "round": 1,
                                  "last_log_index": 1, "last_log_term": 1},
                                 {"type": prevote.RESPONSE, "round": None}])
def test_malformed_pre_vote_messages_are_ignored(bad: dict[str, Any]) -> None:
    n = Node()
    n.fire_timer()
    n._onTick()
    n._SyncObj__onMessageReceived("b", bad)
    n._onTick()
    assert not n.transport.of_type(prevote.RESPONSE) and n.term == 5


def test_a_request_from_a_node_outside_the_cluster_is_not_answered() -> None:
    n = Node()
    n._SyncObj__onMessageReceived("stranger", _request())
    assert not n.transport.of_type(prevote.RESPONSE)


def test_step_downs_are_logged_with_their_cause(caplog: pytest.LogCaptureFixture) -> None:
    n = Node()
    n._SyncObj__setState(_RAFT_STATE.LEADER)
    with caplog.at_level(logging.INFO, logger="raftcron.raft"):
        n._SyncObj__onMessageReceived("c", {"type": "append_entries", "term": 8})
        n._SyncObj__setState(_RAFT_STATE.LEADER)
        n._SyncObj__lastResponseTime = {"b": raft_clock() - 0.7, "c": raft_clock() - 0.7}
        n._SyncObj__setState(_RAFT_STATE.FOLLOWER)  # pysyncobj's fallback check did this
    lines = [r.getMessage() for r in caplog.records if "stepping down" in r.getMessage()]
    assert lines[0] == ("stepping down as leader of term 5: append_entries at the higher "
                        "term 8 from c")
    assert lines[1].startswith("stepping down as leader of term 8: no answer from a majority "
                               "within leaderFallbackTimeout 0.6 s (last answers: b 0.70 s")
    assert n.leader_step_downs == 2


def test_a_failing_gate_leaves_the_tick_to_pysyncobj(caplog: pytest.LogCaptureFixture) -> None:
    n = Node()
    n._SyncObj__otherNodes = None  # type: ignore[assignment] - breaks the gate
    n.fire_timer()
    with caplog.at_level(logging.ERROR, logger="raftcron.raft"):
        n._onTick()
    assert n.term == 6 and "election gate failed (1 times)" in caplog.text


def _named(name: str) -> Node:
    """A node called `name` among a, b and c (every pair of them is connected)."""
    n = Node()
    n._SyncObj__selfNode = name
    others = {"a", "b", "c"} - {name}
    n._SyncObj__otherNodes = set(others)
    n._SyncObj__connectedNodes = set(others)
    for peer in others:
        n._connected_since[peer] = raft_clock() - 10
        n._speaks_pre_vote.add(peer)
    return n


def _deliver(sender: Node, receiver: Node, mtype: str) -> None:
    """Hand `receiver` the last message of type `mtype` that `sender` sent to it."""
    me = receiver._SyncObj__selfNode
    message = [m for p, m in sender.transport.of_type(mtype) if p == me][-1]
    receiver._SyncObj__onMessageReceived(sender._SyncObj__selfNode, message)


def _rounds_cross(a: Node, b: Node) -> list[str]:
    """a's and b's timers fire together, their pre-vote requests and answers cross on the
    wire, and both tick: the nodes that became candidates."""
    for n in (a, b):
        n.fire_timer()
        n._onTick()
    _deliver(b, a, prevote.REQUEST)
    _deliver(a, b, prevote.REQUEST)
    _deliver(a, b, prevote.RESPONSE)
    _deliver(b, a, prevote.RESPONSE)
    for n in (a, b):
        n._onTick()
    return [n._SyncObj__selfNode for n in (a, b)
            if n._SyncObj__raftState == _RAFT_STATE.CANDIDATE]


def test_two_followers_whose_timers_fire_together_do_not_split_the_vote() -> None:
    """The leader c died; a and b ask for term 6 at the same moment. Only one of them may
    get the other's yes, or both become candidates with their own vote and nobody wins."""
    a, b = _named("a"), _named("b")
    assert _rounds_cross(a, b) == ["a"]  # the order of addresses breaks the tie, the same on both
    assert b.term == 5 and b._round is None
    refusal = [m for p, m in a.transport.of_type(prevote.RESPONSE) if p == "b"][-1]
    assert refusal["granted"] is False and refusal["reason"] == prevote.REFUSED_COMPETING


def test_two_followers_whose_tie_winner_is_behind_still_elect_the_one_ahead() -> None:
    """The leader c died after one more entry reached b than a; a and b ask for term 6 at
    the same moment, a is the tie winner by address. b refuses a (a's log is behind: a
    cannot win the real election), so a must not refuse b for competing, or both refuse
    each other in every round and no leader is ever elected (a ci run of the failover
    test: 13 s without an election)."""
    a, b = _named("a"), _named("b")
    a.log_position = (5, 99)
    assert _rounds_cross(a, b) == ["b"]
    to_a = [m for p, m in b.transport.of_type(prevote.RESPONSE) if p == "a"][-1]
    assert to_a["granted"] is False and to_a["reason"] == prevote.REFUSED_LOG


def test_a_yes_pushes_this_nodes_own_election_back() -> None:
    asker, c = _named("a"), _named("c")
    asker.fire_timer()
    asker._onTick()
    c.fire_timer()  # c's own timer is due too, but it has not ticked yet
    _deliver(asker, c, prevote.REQUEST)
    assert [m for p, m in c.transport.of_type(prevote.RESPONSE) if p == "a"][-1]["granted"]
    c._onTick()
    assert c.term == 5 and c._round is None and not c.transport.of_type(prevote.REQUEST)
    assert c._SyncObj__raftElectionDeadline > raft_clock()


def test_a_node_that_voted_for_another_in_a_term_refuses_a_pre_vote_for_it() -> None:
    voter, asker = _named("c"), _named("b")
    voter._SyncObj__raftCurrentTerm = 6
    voter._SyncObj__votedForNodeId = "a"  # voted for a at term 6
    asker.fire_timer()
    asker._onTick()  # b, at term 5, asks for term 6
    _deliver(asker, voter, prevote.REQUEST)
    answer = [m for p, m in voter.transport.of_type(prevote.RESPONSE) if p == "b"][-1]
    assert answer["granted"] is False and answer["reason"] == prevote.REFUSED_VOTED
