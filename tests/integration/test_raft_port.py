"""The Raft port against strangers: real RaftNodes on loopback, raw sockets as attackers."""

from __future__ import annotations

import dataclasses
import os
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pysyncobj.pickle as raft_pickle
import pytest
from pysyncobj import FAIL_REASON
from pysyncobj.encryptor import getEncryptor
from pysyncobj.poller import createPoller
from pysyncobj.tcp_connection import CONNECTION_STATE

from raftcron.cluster.raft import RaftNode
from raftcron.cluster.transport import (
    GuardedConnection,
    GuardedTCPTransport,
    PortLimits,
    PortStats,
)
from raftcron.core.commands import Barrier, encode
from raftcron.state.db import open_writer
from raftcron.state.machine import StateMachine
from raftcron.testing import free_port_base

SECRET = "integration-secret-0123456789"
GUARD_COUNTERS = ("oversized", "pre_auth_overflow", "auth_timeouts", "refused",
                  "peer_links_lost")
PREFIX = struct.Struct("i")


def make_node(tmp: Path, ports: list[int], me: int, limits: PortLimits) -> RaftNode:
    data = tmp / f"n{me}"
    data.mkdir(exist_ok=True)
    machine = StateMachine(open_writer(str(data / "state.db")))
    addrs = [f"127.0.0.1:{p}" for p in ports]
    return RaftNode(addrs[me], [a for i, a in enumerate(addrs) if i != me], machine,
                    str(data), SECRET, threading.Lock(), port_limits=limits)


def transport_of(node: RaftNode) -> GuardedTCPTransport:
    transport = node._SyncObj__transport
    assert isinstance(transport, GuardedTCPTransport)
    return transport


def stats_of(node: RaftNode) -> PortStats:
    return transport_of(node).port_stats


def eventually(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except RuntimeError:  # a dict changed size under the tick thread
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def closed_by_peer(sock: socket.socket, within: float) -> bool:
    """True once the node closed `sock`; False if it is still open after `within` s."""
    sock.settimeout(within)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


@pytest.fixture
def single(tmp_path: Path) -> Iterator[Callable[..., tuple[RaftNode, int]]]:
    """A one-node cluster with the given limits; yields (node, raft port)."""
    made: list[RaftNode] = []

    def start(**limits: Any) -> tuple[RaftNode, int]:
        port = free_port_base(1)
        node = make_node(tmp_path, [port], 0, PortLimits(**limits))
        made.append(node)
        eventually(lambda: transport_of(node).ready)
        return node, port

    yield start
    for node in made:
        node.destroy()


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A connection to the node's Raft port from the loopback address `source`."""
    return socket.create_connection(("127.0.0.1", port), timeout=5,
                                    source_address=(source, 0))


def test_length_prefix_over_the_cap_closes_before_anything_is_buffered(single) -> None:
    node, port = single()
    with connect(port) as sock:
        sock.sendall(PREFIX.pack(1 << 30))  # announces 1 GiB, sends nothing of it
        assert closed_by_peer(sock, within=5)
    assert stats_of(node).oversized == 1


def test_negative_length_prefix_closes(single) -> None:
    node, port = single()
    with connect(port) as sock:
        sock.sendall(PREFIX.pack(-1))
        assert closed_by_peer(sock, within=5)
    assert stats_of(node).oversized == 1


def test_handshake_sized_prefix_is_waited_for(single) -> None:
    """A prefix within the handshake cap is buffered normally (then junk fails to decrypt)."""
    node, port = single(auth_deadline_s=30)
    with connect(port) as sock:
        sock.sendall(PREFIX.pack(200) + b"x" * 100)
        assert not closed_by_peer(sock, within=0.5)
        sock.sendall(b"x" * 100)  # completes the message: not a valid token
        assert closed_by_peer(sock, within=5)
    assert stats_of(node).oversized == 0


def test_second_message_before_authenticating_closes(single) -> None:
    node, port = single(auth_deadline_s=30)
    with connect(port) as sock:
        sock.sendall(PREFIX.pack(8) + b"x" * 8 + PREFIX.pack(8))
        assert closed_by_peer(sock, within=5)
    stats = stats_of(node)
    assert stats.pre_auth_overflow == 1


def test_unauthenticated_idle_connection_is_dropped_after_the_deadline(single) -> None:
    node, port = single(auth_deadline_s=0.5)
    with connect(port) as sock:
        eventually(lambda: transport_of(node).unauthenticated() == 1)
        assert closed_by_peer(sock, within=5)
    assert stats_of(node).auth_timeouts == 1
    assert eventually(lambda: transport_of(node).unauthenticated() == 0)


def test_connection_beyond_the_unauthenticated_cap_is_refused(single) -> None:
    node, port = single(max_unauthenticated=3, auth_deadline_s=60)
    transport = transport_of(node)
    held = [connect(port) for _ in range(3)]
    try:
        eventually(lambda: transport.unauthenticated() == 3)
        with connect(port) as extra:
            assert closed_by_peer(extra, within=5)
        assert transport.port_stats.refused == 1
        assert not any(closed_by_peer(s, within=0.2) for s in held)
        held.pop().close()  # a slot frees up once one of them goes away
        eventually(lambda: transport.unauthenticated() == 2)
        with connect(port) as again:
            eventually(lambda: transport.unauthenticated() == 3)
            assert not closed_by_peer(again, within=0.3)
        assert transport.port_stats.refused == 1
    finally:
        for s in held:
            s.close()


def test_one_host_cannot_take_every_unauthenticated_slot(single) -> None:
    node, port = single(max_unauthenticated=4, max_unauthenticated_per_host=2,
                        auth_deadline_s=60)
    transport = transport_of(node)
    held = [connect(port, "127.0.0.2") for _ in range(2)]
    try:
        eventually(lambda: transport.unauthenticated() == 2)
        with connect(port, "127.0.0.2") as third:
            assert closed_by_peer(third, within=5)
        assert transport.port_stats.refused == 1
        held.append(connect(port, "127.0.0.3"))  # another host still gets a slot
        eventually(lambda: transport.unauthenticated() == 3)
        assert not any(closed_by_peer(s, within=0.2) for s in held)
        assert transport.port_stats.refused == 1
    finally:
        for s in held:
            s.close()


@pytest.fixture
def trio(tmp_path: Path) -> Iterator[list[RaftNode]]:
    """Three RaftNodes with tight limits: a 1 s deadline and a cap of 2."""
    base = free_port_base(3)
    ports = [base + i for i in range(3)]
    limits = PortLimits(auth_deadline_s=1.0, max_unauthenticated=2)
    nodes = [make_node(tmp_path, ports, i, limits) for i in range(3)]
    try:
        yield nodes
    finally:
        for node in nodes:
            node.destroy()


def leader_of(nodes: list[RaftNode]) -> RaftNode | None:
    leaders = [n for n in nodes if n.is_leader()]
    return leaders[0] if len(leaders) == 1 else None


def settled(nodes: list[RaftNode]) -> RaftNode:
    """The leader, once all three nodes agree on it and every node has applied its epoch."""
    def agreed() -> RaftNode | None:
        leader = leader_of(nodes)
        if leader is None or any(n.leader_addr() != leader.selfNode.address for n in nodes):
            return None
        return leader if all(n.raftLastApplied >= leader.raftCommitIndex for n in nodes) \
            else None
    return eventually(agreed, timeout=60)


# A change of leader (three nodes in one process on a loaded machine) only means "retry".
RETRY = {FAIL_REASON.DISCARDED, FAIL_REASON.LEADER_CHANGED, FAIL_REASON.NOT_LEADER,
         FAIL_REASON.MISSING_LEADER}


def submit_until_applied(nodes: list[RaftNode], payloads: list[bytes]) -> list[Any]:
    """Barriers are no-ops: re-propose them all on a leader change. pysyncobj 0.3.17 also
    leaves a callback unanswered at times when the leader changes with entries in flight
    (seen with its own transport as well): that counts as a leader change too."""
    results: list[Any] = []
    for _ in range(5):
        results = submit_all(settled(nodes), payloads)
        if not any(r is None or r[1] in RETRY for r in results):
            return results
    raise AssertionError(f"no stable leader to apply on: {results}")


def submit_all(leader: RaftNode, payloads: list[bytes]) -> list[Any]:
    """Propose all at once (so that they can share an append batch) and wait for each."""
    results: list[Any] = [None] * len(payloads)
    done = threading.Event()

    def callback(i: int) -> Callable[[Any, int], None]:
        def settle(result: Any, err: int) -> None:
            results[i] = (result, err)
            if all(r is not None for r in results):
                done.set()
        return settle

    for i, data in enumerate(payloads):
        leader.submit(data, callback=callback(i))
    done.wait(15)
    return list(results)


def test_authenticated_peers_keep_large_messages_and_idle_links(trio) -> None:
    settled(trio)
    before = [dataclasses.replace(stats_of(n)) for n in trio]
    # A small entry then a large one: pysyncobj sends both in one append message, whole.
    big = Barrier(os.urandom(500_000).hex())  # 1 MB of text, ~0.7 MB on the wire
    results = submit_until_applied(trio, [encode(Barrier("small")), encode(big)])
    assert all(err == 0 and res["ok"] for res, err in results), results
    last = max(n.raftLastApplied for n in trio)
    eventually(lambda: all(n.raftLastApplied >= last for n in trio))
    assert max(stats_of(n).largest_message for n in trio) > 8 * 65536  # many batches
    time.sleep(3)  # three times the deadline: authenticated links are idle, not dropped
    results = submit_until_applied(trio, [encode(Barrier("after-idle"))])
    assert results[0][1] == 0
    for node, was in zip(trio, before, strict=True):
        now = stats_of(node)
        assert [(getattr(now, k) - getattr(was, k)) for k in GUARD_COUNTERS] == [0] * 5, now


def test_peers_stay_connected_while_strangers_fill_the_port(trio) -> None:
    leader = settled(trio)
    links_lost = [stats_of(n).peer_links_lost for n in trio]
    port = int(leader.selfNode.address.rsplit(":", 1)[1])
    junk = [connect(port) for _ in range(10)]  # cap is 2: most are refused at accept
    try:
        for s in junk[:5]:
            s.sendall(PREFIX.pack(1 << 30))
        assert all(closed_by_peer(s, within=5) for s in junk)
        results = submit_until_applied(trio, [encode(Barrier("during-junk"))])
        assert results[0][1] == 0
        assert [stats_of(n).peer_links_lost for n in trio] == links_lost
        stats = stats_of(leader)
        assert stats.refused + stats.oversized + stats.auth_timeouts == 10
    finally:
        for s in junk:
            s.close()


class Framer:
    """Frames messages as pysyncobj's TcpConnection.send does (without a rand key)."""

    def __init__(self) -> None:
        self.encryptor = getEncryptor(SECRET)

    def frame(self, message: Any) -> bytes:
        token = self.encryptor.encrypt_at_time(zlib.compress(raft_pickle.dumps(message), 3),
                                               int(time.monotonic()))
        return PREFIX.pack(len(token)) + token


@pytest.fixture
def guarded_pair() -> Iterator[tuple[GuardedConnection, socket.socket, list[Any], Any]]:
    """A GuardedConnection on one end of a socketpair, read by pysyncobj's poller."""
    poller = createPoller("auto")
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    received: list[Any] = []
    conn = GuardedConnection(poller=poller, socket=ours, timeout=3600.0,
                             limits=PortLimits(message_max_bytes=1 << 20), stats=PortStats())
    conn.encryptor = getEncryptor(SECRET)
    conn.setOnMessageReceivedCallback(received.append)
    yield conn, theirs, received, poller
    conn.disconnect()
    theirs.close()


def pump(poller: Any, until: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not until():
        assert time.monotonic() < deadline, "condition not reached"
        poller.poll(0.01)


def test_guarded_connection_parses_coalesced_and_split_messages(guarded_pair) -> None:
    conn, theirs, received, poller = guarded_pair
    framer = Framer()
    theirs.sendall(framer.frame("handshake"))
    pump(poller, lambda: received == ["handshake"])
    assert conn.authenticated
    # Three messages in one write, then a 300 KB one in 1 KiB pieces.
    theirs.sendall(b"".join(framer.frame(i) for i in range(3)))
    pump(poller, lambda: len(received) == 4)
    big = os.urandom(300_000)
    data = framer.frame(big)
    for pos in range(0, len(data), 1024):
        theirs.sendall(data[pos:pos + 1024])
        poller.poll(0)
    pump(poller, lambda: len(received) == 5)
    assert received == ["handshake", 0, 1, 2, big]
    assert conn.state == CONNECTION_STATE.CONNECTED


def test_guarded_connection_caps_authenticated_messages_too(guarded_pair) -> None:
    conn, theirs, received, poller = guarded_pair
    framer = Framer()
    theirs.sendall(framer.frame("handshake"))
    pump(poller, lambda: conn.authenticated)
    theirs.sendall(framer.frame("ok"))
    pump(poller, lambda: received == ["handshake", "ok"])
    theirs.sendall(PREFIX.pack(2 << 20))  # over this connection's 1 MiB cap
    pump(poller, lambda: conn.state == CONNECTION_STATE.DISCONNECTED)
    assert received == ["handshake", "ok"]
    assert conn.stats.oversized == 1


def test_replayed_handshake_without_an_identity_is_dropped_at_the_deadline(single) -> None:
    """A valid first token (as replayed from a captured handshake) proves nothing more:
    the address must come with the node's fresh random key, so the stranger stays
    unidentified and is dropped at the deadline like any other."""
    node, port = single(auth_deadline_s=0.5)
    with connect(port) as sock:
        sock.sendall(Framer().frame(os.urandom(32)))
        assert sock.recv(4096), "the node answers a valid handshake with its own key"
        assert closed_by_peer(sock, within=5)
    assert stats_of(node).auth_timeouts == 1
