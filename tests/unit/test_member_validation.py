"""Membership safety (issue 32), without processes: the fields of an add are checked in full
before anything is proposed, the live-majority rule refuses what would cost the quorum and
counts the unknown as down, and `add_member` / `remove_member` refuse before they touch Raft.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftcron.cluster import membership
from raftcron.cluster.membership import (
    LIVE_ANSWER_S,
    LIVE_SLACK_ENTRIES,
    MembershipError,
    VoterState,
    VotersView,
)
from raftcron.config import Peer
from raftcron.ops import node_ops
from raftcron.state.db import open_writer

OK_ADDR, OK_URL = "10.0.0.4:7000", "http://10.0.0.4:8700"


def refused(member_id: Any = "n4", raft_addr: Any = OK_ADDR, http_url: Any = OK_URL
            ) -> MembershipError:
    with pytest.raises(MembershipError) as e:
        membership.validate(member_id, raft_addr, http_url)
    return e.value


def one_line(message: str) -> bool:
    return "\n" not in message and "\r" not in message and message.isascii()


# --- the request of the issue ----------------------------------------------------------------

def test_the_request_that_took_the_cluster_down_is_refused_naming_the_field() -> None:
    body = json.loads('{"raft_addr": "aS1BF:05035", "id": "VAz0G6Rwze-DA", '
                      '"http_url": "https://y\\u009f/\\udaed\\udcab"}')
    e = refused(body["id"], body["raft_addr"], body["http_url"])
    assert e.field == "raft_addr"
    assert "leading zero" in e.message and "5035" in e.message
    # Its URL alone is refused too: a control character and a non-ASCII host.
    e = refused("VAz0G6Rwze-DA", "aS1BF:5035", body["http_url"])
    assert e.field == "http_url" and "not ASCII" in e.message


# --- raft_addr -------------------------------------------------------------------------------

@pytest.mark.parametrize("addr, why", [
    ("", "empty"),
    ("n4", "no port"),
    ("n4:", "no port"),
    (":7000", "no host"),
    ("n4:0", "outside 1-65535"),
    ("n4:65536", "outside 1-65535"),
    ("n4:99999999999999999999", "outside 1-65535"),
    ("n4:05035", "leading zero"),
    ("n4:00", "leading zero"),
    ("n4:7000 ", "space or a control character"),
    ("n4:7000\n", "space or a control character"),
    ("n4 :7000", "space or a control character"),
    ("n4:+80", "not a number"),
    ("n4:-1", "not a number"),
    ("n4:٣٣", "not ASCII"),  # Arabic-Indic digits: isdigit() but not a port
    ("nœud:7000", "not ASCII"),
    ("[::1]:8000", "IPv6"),
    ("::1:8000", "IPv6"),
    ("1234:7000", "not an IPv4 address"),
    ("10.0.0.300:7000", "not an IPv4 address"),
    ("10.0.0.04:7000", "not an IPv4 address"),
    ("10.0.0:7000", "not an IPv4 address"),
    ("0.0.0.0:7000", "not an address a node can be reached at"),
    ("224.0.0.1:7000", "not an address a node can be reached at"),
    ("255.255.255.255:7000", "not an address a node can be reached at"),
    ("-n4:7000", "not a hostname"),
    ("n4-:7000", "not a hostname"),
    ("a..b:7000", "not a hostname"),
    ("n4.:7000", "not a hostname"),
    ("n_4:7000", "not a hostname"),
    ("host.123:7000", "not a hostname"),
    (f"{'a' * 64}.b:7000", "not a hostname"),
    (".".join(["a" * 63] * 4) + ":7000", "characters long"),
    ("x" * 10_000_000, "characters long"),
])
def test_a_bad_raft_addr_is_refused_with_its_reason(addr: str, why: str) -> None:
    e = refused(raft_addr=addr)
    assert e.field == "raft_addr"
    assert why in e.message, e.message
    assert one_line(e.message) and len(e.message) < 300


@pytest.mark.parametrize("addr", [
    "n4:1", "n4:65535", "n4:7000", "10.0.0.4:7000", "127.0.0.1:7000", "localhost:7000",
    "N4.Example.COM:7000", "node-4.dc1.example.com:7000", "xn--nud-fma.example:7000",
    f"{'a' * 63}.b:7000", ".".join(["a" * 63] * 3 + ["b" * 61]) + ":7000",
])
def test_a_good_raft_addr_is_kept_as_written(addr: str) -> None:
    assert membership.validate("n4", addr, OK_URL).raft_addr == addr


# --- http_url --------------------------------------------------------------------------------

@pytest.mark.parametrize("url, why", [
    ("", "empty"),
    ("n4:8700", "not an http:// or https:// URL"),
    ("ftp://n4", "not an http:// or https:// URL"),
    ("http:/n4", "not an http:// or https:// URL"),
    ("http://", "no host"),
    ("http://:8700", "no host"),
    ("http://n4:0", "outside 1-65535"),
    ("http://n4:65536", "outside 1-65535"),
    ("http://n4:08700", "leading zero"),
    ("http://n4:", "empty port"),
    ("http://n4:http", "not a number"),
    ("http://y\u009f/", "not ASCII"),
    ("http://n\u00f6de/", "not ASCII"),
    ("http://n4/\udaed", "not ASCII"),
    ("http://n4/a b", "space or a control character"),
    ("http://n4/\x00", "space or a control character"),
    ("http://n4\n", "space or a control character"),
    ("http://u:p@n4", "user or password"),
    ("http://n4/?x=1", "query or a fragment"),
    ("http://n4/#x", "query or a fragment"),
    ("http://n4/a%20b", "path"),
    ("http://n4//", "path"),
    ("http://0", "not an IPv4 address"),
    ("HTTP://0", "not an IPv4 address"),
    ("http://0.0.0.0:8700", "not an address a node can be reached at"),
    ("http://[::]:8700", "not an address a node can be reached at"),
    ("http://[::1", "does not close"),
    ("http://[zz]:8700", "not an IPv6 address"),
    ("http://[fe80::1%25eth0]:8700", "zone"),
    ("http://[::1]x", "HOST[:PORT]"),
    ("http://::1:8700", "must be bracketed"),
    ("http://2001:db8::4/", "must be bracketed"),
    ("http://" + "a" * 600, "characters long"),
])
def test_a_bad_http_url_is_refused_with_its_reason(url: str, why: str) -> None:
    e = refused(http_url=url)
    assert e.field == "http_url"
    assert why in e.message, e.message
    assert one_line(e.message) and len(e.message) < 300


@pytest.mark.parametrize("url, kept", [
    ("http://10.0.0.4:8700", "http://10.0.0.4:8700"),
    ("https://n4.example.com", "https://n4.example.com"),
    ("http://n4:8700/", "http://n4:8700"),
    ("HTTPS://n4:8700", "https://n4:8700"),
    ("http://[::1]:8000", "http://[::1]:8000"),
    ("http://[2001:db8::4]/", "http://[2001:db8::4]"),
    ("https://proxy.example/raftcron/n4/", "https://proxy.example/raftcron/n4"),
    ("http://n4:65535", "http://n4:65535"),
])
def test_a_good_http_url_is_kept_as_its_base(url: str, kept: str) -> None:
    assert membership.validate("n4", OK_ADDR, url).http_url == kept


@pytest.mark.parametrize("member_id", [
    "", "-n4", ".n4", "n 4", "n4\n", "n4:7000", "nœud", "x" * 65, "x" * 1_000_000,
])
def test_a_bad_id_is_refused(member_id: str) -> None:
    e = refused(member_id=member_id)
    assert e.field == "id" and one_line(e.message) and len(e.message) < 300


@pytest.mark.parametrize("field, value", [
    ("id", None), ("id", 4), ("raft_addr", None), ("raft_addr", 7000),
    ("http_url", None), ("http_url", ["http://n4"]),
])
def test_a_value_that_is_no_string_is_refused(field: str, value: Any) -> None:
    fields: dict[str, Any] = {"member_id": "n4", "raft_addr": OK_ADDR, "http_url": OK_URL}
    fields["member_id" if field == "id" else field] = value
    e = refused(**fields)
    assert e.field == field


# --- the schema's patterns never admit less than the server -----------------------------------

@settings(max_examples=300, deadline=None)
@given(st.one_of(st.from_regex(membership.ADDR_RE, fullmatch=True), st.text(max_size=40)))
def test_every_raft_addr_the_server_accepts_matches_the_schema_pattern(addr: str) -> None:
    try:
        membership.validate("n4", addr, OK_URL)
    except MembershipError:
        return
    assert membership.ADDR_RE.fullmatch(addr)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.from_regex(membership.URL_RE, fullmatch=True), st.text(max_size=40)))
def test_every_http_url_the_server_accepts_matches_the_schema_pattern(url: str) -> None:
    try:
        membership.validate("n4", OK_ADDR, url)
    except MembershipError:
        return
    assert membership.URL_RE.fullmatch(url) and len(url) <= membership.MAX_URL_LEN


# --- log entries keep the rules they were applied with ---------------------------------------

def _entry(**fields: str) -> bytes:
    body = {"op": "put", "id": "n4", "raft_addr": OK_ADDR, "http_url": OK_URL, **fields}
    return membership.MEMBER_PREFIX + json.dumps(body).encode()


def test_a_logged_entry_the_old_rules_accepted_is_still_applied(tmp_path: Path) -> None:
    conn: sqlite3.Connection = open_writer(str(tmp_path / "state.db"))
    result = membership.apply_op(conn, 1, _entry(raft_addr="aS1BF:05035",
                                                 http_url="https://y\u009f/\U000cb4ab"))
    assert result == {"ok": True, "op": "put", "id": "n4"}
    assert [m.raft_addr for m in membership.read_members(conn)] == ["aS1BF:05035"]


def test_a_logged_entry_sqlite_cannot_store_is_a_rejection_not_a_crash(tmp_path: Path
                                                                       ) -> None:
    """A lone surrogate in JSON ("\\udaed") made the INSERT raise and every node stop."""
    conn: sqlite3.Connection = open_writer(str(tmp_path / "state.db"))
    result = membership.apply_op(conn, 1, _entry(http_url="https://y/\udaed"))
    assert result["ok"] is False and result["rejected"] == "invalid"
    assert membership.read_members(conn) == []
    # The index was applied (replay skips it) and the next entry applies normally.
    assert membership.apply_op(conn, 1, _entry())["replayed"] is True
    assert membership.apply_op(conn, 2, _entry())["ok"] is True


# --- the new member's proof ------------------------------------------------------------------

def test_the_proof_binds_the_secret_the_challenge_the_id_and_the_raft_addr() -> None:
    secret, nonce = "s" * 32, "ab" * 16
    proof = membership.member_proof(secret, nonce, "n4", OK_ADDR)
    assert proof == membership.member_proof(secret, nonce, "n4", OK_ADDR)
    others = {membership.member_proof("t" * 32, nonce, "n4", OK_ADDR),
              membership.member_proof(secret, "cd" * 16, "n4", OK_ADDR),
              membership.member_proof(secret, nonce, "n5", OK_ADDR),
              membership.member_proof(secret, nonce, "n4", "10.0.0.4:7001")}
    assert proof not in others and len(others) == 4
    assert membership.CHALLENGE_RE.fullmatch(nonce)
    assert not membership.CHALLENGE_RE.fullmatch("ab" * 8)


# --- live majority ---------------------------------------------------------------------------

COMMIT = 1000


def live(addr: str) -> VoterState:
    return VoterState(addr, connected=True, answered_s_ago=0.05, match_index=COMMIT)


def dead(addr: str) -> VoterState:
    return VoterState(addr, connected=False, answered_s_ago=7.0, match_index=COMMIT - 300)


def view(*voters: VoterState, leader: bool = True) -> VotersView:
    return VotersView(leader=leader, commit_index=COMMIT, voters=voters)


def test_adding_to_a_healthy_cluster_is_allowed() -> None:
    assert membership.change_refusal(view(live("b"), live("c")), "add", "d") is None


def test_adding_while_one_voter_is_down_is_refused_naming_it() -> None:
    why = membership.change_refusal(view(live("b"), dead("c")), "add", "d")
    assert why is not None
    assert "4 voters, 2 of them live" in why and "needs 3" in why
    assert "c not connected" in why


def test_removing_a_live_voter_while_another_is_down_is_refused() -> None:
    why = membership.change_refusal(view(live("b"), dead("c")), "remove", "b")
    assert why is not None and "2 voters, 1 of them live" in why


def test_removing_the_dead_voter_is_allowed() -> None:
    assert membership.change_refusal(view(live("b"), dead("c")), "remove", "c") is None


def test_a_two_node_cluster_may_lose_its_other_node_but_not_grow_without_it() -> None:
    assert membership.change_refusal(view(dead("b")), "remove", "b") is None
    assert membership.change_refusal(view(dead("b")), "add", "c") is not None


def test_a_new_member_never_counts_even_when_it_answers() -> None:
    """4 voters, one of them the new node that answers but has no entry yet: adding a
    fifth while another is down would rest on it."""
    new = VoterState("d", connected=True, answered_s_ago=0.01, match_index=0)
    assert membership.change_refusal(view(live("b"), live("c"), new), "add", "e") is None
    why = membership.change_refusal(view(live("b"), dead("c"), new), "add", "e")
    assert why is not None and "d has acknowledged no entry yet" in why


@pytest.mark.parametrize("voter, why", [
    (VoterState("b", True, LIVE_ANSWER_S + 2.0, COMMIT), "no answer for"),  # paused
    (VoterState("b", True, None, COMMIT), "never answered"),
    (VoterState("b", True, 0.05, None), "acknowledged no entry"),
    (VoterState("b", True, 0.05, COMMIT - LIVE_SLACK_ENTRIES - 1), "catching up"),
    (VoterState("b", False, 0.05, COMMIT), "not connected"),
])
def test_a_voter_counts_as_live_only_with_every_sign_of_it(voter: VoterState, why: str
                                                           ) -> None:
    assert why in (membership.not_live_because(voter, COMMIT) or "")
    assert membership.change_refusal(view(voter, live("c")), "remove", "c") is not None


def test_a_voter_just_behind_within_the_slack_counts_as_live() -> None:
    voter = VoterState("b", True, 0.05, COMMIT - LIVE_SLACK_ENTRIES)
    assert membership.not_live_because(voter, COMMIT) is None


def test_a_node_that_no_longer_leads_decides_nothing() -> None:
    assert membership.change_refusal(view(live("b"), live("c"), leader=False), "add",
                                     "d") == "this node no longer leads"


def test_an_unfinished_change_is_named_with_the_command_that_finishes_it() -> None:
    peers = [Peer("b", "b:1", "http://b"), Peer("c", "c:1", "http://c")]
    assert membership.unfinished_change({"b:1", "c:1"}, peers) is None
    addr, how = membership.unfinished_change({"b:1", "c:1", "x:1"}, peers) or ("", "")
    assert addr == "x:1" and "remove-node --id x:1" in how
    addr, how = membership.unfinished_change({"b:1"}, peers) or ("", "")
    assert addr == "c:1" and "remove-node --id c" in how


# --- add_member / remove_member refuse before touching Raft -----------------------------------

class FakeNode:
    """A pysyncobj node: hashable, known by its address."""

    def __init__(self, address: str) -> None:
        self.address = address


class FakeRaft:
    """The parts of RaftNode node_ops uses; records every membership proposal."""

    def __init__(self, voters: list[VoterState], leader: bool = True) -> None:
        self.voters = voters
        self.leader = leader
        self.proposed: list[tuple[str, str]] = []
        self._SyncObj__otherNodes = [FakeNode(v.addr) for v in voters]

    # read_voters reads these (pysyncobj's private state on the Raft thread).
    def __getattr__(self, name: str) -> Any:
        nodes = {n.address: n for n in self.__dict__["_SyncObj__otherNodes"]}
        by = {v.addr: v for v in self.__dict__["voters"]}
        if name == "_SyncObj__connectedNodes":
            return [nodes[a] for a, v in by.items() if v.connected]
        if name == "_SyncObj__lastResponseTime":
            return {nodes[a]: membership.raft_clock() - v.answered_s_ago
                    for a, v in by.items() if v.answered_s_ago is not None}
        if name == "_SyncObj__raftMatchIndex":
            return {nodes[a]: v.match_index for a, v in by.items() if v.match_index is not None}
        if name == "_SyncObj__raftCommitIndex":
            return COMMIT
        raise AttributeError(name)

    def _isLeader(self) -> bool:  # noqa: N802 - pysyncobj's
        return self.leader

    def is_leader(self) -> bool:
        return self.leader

    def leader_addr(self) -> str | None:
        return "10.0.0.1:7000" if self.leader else "10.0.0.2:7000"

    def other_addrs(self) -> set[str]:
        return {v.addr for v in self.voters}

    def addOnTickCallback(self, callback: Any) -> None:  # noqa: N802
        asyncio.get_running_loop().call_soon(callback)  # as the next tick would

    def removeOnTickCallback(self, callback: Any) -> None:  # noqa: N802
        pass

    def addNodeToCluster(self, addr: str, callback: Any = None) -> None:  # noqa: N802
        self.proposed.append(("add", addr))

    def removeNodeFromCluster(self, addr: str, callback: Any = None) -> None:  # noqa: N802
        self.proposed.append(("remove", addr))

    def submit_raw(self, data: bytes, callback: Any) -> None:
        self.proposed.append(("record", data.decode()))


def fake_node(voters: list[VoterState], leader: bool = True) -> Any:
    peers = tuple(Peer(f"p{i}", v.addr, f"http://10.0.0.{i + 2}:8700")
                  for i, v in enumerate(voters))
    config = SimpleNamespace(node_id="n1", raft_addr="10.0.0.1:7000", tls_cert=None,
                             http_url="http://10.0.0.1:8700", peers=peers,
                             read_secret=lambda: "s" * 32)
    return SimpleNamespace(raft=FakeRaft(voters, leader), config=config,
                           leader_http_url=lambda: "http://10.0.0.2:8700",
                           leader_id=lambda: "n1" if leader else "p0")


VOTERS = [live("10.0.0.2:7000"), live("10.0.0.3:7000")]


async def test_an_invalid_add_is_a_400_and_proposes_nothing() -> None:
    node = fake_node(VOTERS)
    with pytest.raises(node_ops.OpsError) as e:
        await node_ops.add_member(node, "VAz0G6Rwze-DA", "aS1BF:05035", "https://y\u009f/")
    assert (e.value.status, e.value.code, e.value.field) == (400, "invalid", "raft_addr")
    assert node.raft.proposed == []


async def test_an_http_member_of_a_tls_cluster_is_a_400() -> None:
    node = fake_node(VOTERS)
    node.config.tls_cert = "/etc/raftcron/cert.pem"
    with pytest.raises(node_ops.OpsError) as e:
        await node_ops.add_member(node, "n4", "10.0.0.4:7000", "http://10.0.0.4:8700")
    assert (e.value.status, e.value.field) == (400, "http_url")


async def test_a_follower_sends_the_change_to_the_leader() -> None:
    node = fake_node(VOTERS, leader=False)
    for change in (node_ops.add_member(node, "n4", "10.0.0.4:7000", "http://10.0.0.4:8700"),
                   node_ops.remove_member(node, "p1")):
        with pytest.raises(node_ops.OpsError) as e:
            await change
        assert (e.value.status, e.value.code) == (503, "not_leader")
        assert "http://10.0.0.2:8700" in e.value.message
    assert node.raft.proposed == []


async def test_an_add_while_a_voter_is_down_is_a_409_before_the_new_node_is_asked() -> None:
    node = fake_node([live("10.0.0.2:7000"), dead("10.0.0.3:7000")])
    with pytest.raises(node_ops.OpsError) as e:
        await node_ops.add_member(node, "n4", "10.0.0.4:7000", "http://10.0.0.4:8700")
    assert (e.value.status, e.value.code) == (409, "no_live_majority")
    assert "10.0.0.3:7000 not connected" in e.value.message
    assert node.raft.proposed == []


async def test_removing_a_live_voter_while_another_is_down_is_a_409() -> None:
    node = fake_node([live("10.0.0.2:7000"), dead("10.0.0.3:7000")])
    with pytest.raises(node_ops.OpsError) as e:
        await node_ops.remove_member(node, "p0")
    assert (e.value.status, e.value.code) == (409, "no_live_majority")
    assert node.raft.proposed == []


async def test_an_unfinished_add_blocks_every_other_change() -> None:
    """A voter without a member record (its add was cut short): another add is refused,
    naming it; removing it by its Raft address is the way out."""
    node = fake_node(VOTERS)
    node.raft.voters.append(dead("10.0.0.9:7000"))
    node.raft._SyncObj__otherNodes.append(FakeNode("10.0.0.9:7000"))
    with pytest.raises(node_ops.OpsError) as e:
        await node_ops.add_member(node, "n4", "10.0.0.4:7000", "http://10.0.0.4:8700")
    assert (e.value.status, e.value.code) == (409, "change_in_progress")
    assert "remove-node --id 10.0.0.9:7000" in e.value.message
    assert node.raft.proposed == []


async def test_a_second_change_while_one_is_under_way_is_a_409() -> None:
    node = fake_node(VOTERS)
    with node_ops._one_change(node):
        with pytest.raises(node_ops.OpsError) as e:
            await node_ops.remove_member(node, "p1")
    assert (e.value.status, e.value.code) == (409, "change_in_progress")
    assert node.raft.proposed == []


async def test_an_add_nobody_answers_for_is_a_409_and_proposes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_ops, "PROBE_TIMEOUT_S", 0.6)
    monkeypatch.setattr(node_ops, "PROBE_RETRY_S", 0.2)
    node = fake_node(VOTERS)
    with pytest.raises(node_ops.OpsError) as e:  # port 1 on loopback: nothing listens
        await node_ops.add_member(node, "n4", "127.0.0.1:1", "http://127.0.0.1:1")
    assert (e.value.status, e.value.code, e.value.field) == (409, "unreachable", "http_url")
    assert "start the new node first" in e.value.message
    assert node.raft.proposed == []


def test_error_messages_name_no_internal_repr() -> None:
    """A refusal is one readable line (the CLI prints it as is)."""
    e = refused(raft_addr="\x1b[31mred:7000")
    assert one_line(e.message) and not re.search(r"[\x00-\x1f]", e.message)
