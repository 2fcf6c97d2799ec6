"""Strangers on the Raft port cost the cluster nothing: real nodes, real sockets."""

from __future__ import annotations

import errno
import socket
import struct
import threading
import time

import pytest

from raftcron.testing import LocalCluster
from tests.system.helpers import add_job, assert_every_second_once

pytestmark = pytest.mark.system

ANNOUNCED = 1 << 30  # each junk connection announces a 1 GiB message


class JunkFlood(threading.Thread):
    """Holds `slots` junk connections per Raft address: each sends a 1 GiB length prefix,
    then `chunk` bytes every `every_s`, up to `per_connection` bytes (which bounds what an
    unguarded node buffers: 300 connections x 4 MiB). A connection the node closes is
    reopened after `reopen_s`, so the pressure lasts as long as the flood."""

    def __init__(self, targets: dict[str, int], chunk: int = 32768, every_s: float = 0.02,
                 per_connection: int = 4 << 20, reopen_s: float = 0.5) -> None:
        super().__init__(name="junk-flood", daemon=True)
        self.slots = [(addr, i) for addr, n in targets.items() for i in range(n)]
        self.chunk = b"\xa5" * chunk
        self.every_s = every_s
        self.per_connection = per_connection
        self.reopen_s = reopen_s
        self.stop = threading.Event()
        self.opened = 0
        self.closed_by_node = 0
        self.bytes_sent = 0

    def _open(self, addr: str) -> socket.socket:
        host, port = addr.rsplit(":", 1)
        sock = socket.socket()
        sock.setblocking(False)
        err = sock.connect_ex((host, int(port)))
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            raise OSError(err, "connect")
        self.opened += 1
        return sock

    def run(self) -> None:
        socks: dict[tuple[str, int], tuple[socket.socket, bytes]] = {}
        sent_on: dict[tuple[str, int], int] = {}
        retry_at: dict[tuple[str, int], float] = {}
        prefix = struct.pack("i", ANNOUNCED)
        while not self.stop.is_set():
            now = time.monotonic()
            for slot in self.slots:
                if slot not in socks:
                    if retry_at.get(slot, 0) > now:
                        continue
                    try:
                        socks[slot] = (self._open(slot[0]), prefix)
                        sent_on[slot] = 0
                    except OSError:
                        retry_at[slot] = now + self.reopen_s
                    continue
                sock, pending = socks[slot]
                if not pending and sent_on[slot] >= self.per_connection:
                    continue  # holds the connection open, as a stalled peer would
                try:
                    sent = sock.send(pending or self.chunk)
                    self.bytes_sent += sent
                    sent_on[slot] += sent
                    socks[slot] = (sock, pending[sent:])
                except (BlockingIOError, InterruptedError):
                    pass  # still connecting, or the node reads slower than we send
                except OSError:
                    self.closed_by_node += 1
                    sock.close()
                    del socks[slot]
                    retry_at[slot] = now + self.reopen_s
            self.stop.wait(self.every_s)
        for sock, _ in socks.values():
            sock.close()


def raft_addrs(c: LocalCluster) -> dict[str, str]:
    """Every node's Raft address, as each one reports its peers in /v1/cluster."""
    out: dict[str, str] = {}
    for nid in c.ids:
        out.update({p["id"]: p["raft_addr"] for p in c.get(nid, "/v1/cluster")["peers"]})
    assert sorted(out) == sorted(c.ids)
    return out


def test_junk_connections_cost_no_term_and_no_instant(cluster: LocalCluster) -> None:
    leader = cluster.wait_leader()
    term = cluster.cluster_view(leader)["term"]
    addrs = raft_addrs(cluster)
    add_job(cluster, leader, "tick")
    time.sleep(2)
    targets = {addr: (200 if nid == leader else 50) for nid, addr in addrs.items()}
    flood = JunkFlood(targets)
    started = time.time()
    flood.start()
    seen: list[tuple[str, str | None, int | None]] = []
    try:
        while time.time() - started < 20:
            for nid in cluster.ids:
                view = cluster.cluster_view(nid)
                seen.append((nid, view and view["leader_id"], view and view["term"]))
            time.sleep(1)
    finally:
        flood.stop.set()
        flood.join(10)
    ended = time.time()
    assert flood.opened >= sum(targets.values()), "the flood did not open its connections"
    changed = [s for s in seen if s[1:] != (leader, term)]
    assert not changed, f"leader or term changed under the flood: {changed[:10]}"
    time.sleep(2)
    instants = assert_every_second_once(cluster.occurrences(leader, "tick"))
    assert instants[0] < started - 1 and instants[-1] > ended, (
        f"instants {instants[0]}..{instants[-1]} do not cover the flood {started}..{ended}")
    cluster.wait_converged()
