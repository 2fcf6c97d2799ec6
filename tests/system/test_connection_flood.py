"""Nothing a client sends, or leaves unsent, takes a node down (issue 40 §1).

The leader runs with a descriptor limit of 1,024 (`ulimit -n`, soft and hard), and for
45 s one host holds 3,000 connections that send nothing and 300 that send one header byte
a second, opening a new one whenever the node closes one. Without the connection guard
the node ran out of descriptors, SQLite could not open a file in an apply, and the node
stopped. With it, the node keeps answering `/healthz` to everyone else, closes the idle and
the slow connections itself, never restarts, and an every-second job fires every second.
"""

from __future__ import annotations

import errno
import resource
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from raftcron.testing import LocalCluster
from tests.system.helpers import add_job, assert_every_second_once, serving_cluster

pytestmark = pytest.mark.system

NOFILE = 1024
IDLE, SLOW = 3_000, 300
ATTACK_S = 45.0
# The attacking host: another loopback address than the clients the node must keep serving
# (the probe below, the worker and the other nodes all connect from 127.0.0.1).
ATTACKER = "127.0.0.2"
REOPEN_AFTER_S = 1.0


@dataclass
class Flood:
    """Keeps `IDLE` silent and `SLOW` dripping connections open from ATTACKER."""

    host: str
    port: int
    stop: threading.Event = field(default_factory=threading.Event)
    opened: int = 0
    # Connections the node closed after they had been open at least this long: the
    # request deadline at work (a refusal over a cap closes at once).
    closed_by_node_late: int = 0
    closed_by_node: int = 0
    max_open_s: float = 0.0
    connect_errors: dict[str, int] = field(default_factory=dict)

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        born: dict[socket.socket, float] = {}
        slow: set[socket.socket] = set()
        reopen: list[tuple[float, bool]] = [(0.0, False)] * IDLE + [(0.0, True)] * SLOW
        next_drip = time.monotonic()
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                due = [r for r in reopen if r[0] <= now]
                reopen = [r for r in reopen if r[0] > now]
                for _, is_slow in due:
                    s = self._connect()
                    if s is None:
                        reopen.append((now + REOPEN_AFTER_S, is_slow))
                        continue
                    born[s] = now
                    if is_slow:
                        slow.add(s)
                    sel.register(s, selectors.EVENT_READ, is_slow)
                if now >= next_drip:
                    next_drip = now + 1.0
                    for s in list(slow):
                        try:
                            s.send(b"GET /healthz HTTP/1.1\r\n" if born[s] == now else b"X")
                        except OSError:
                            pass
                for key, _ in sel.select(timeout=0.05):
                    s = key.fileobj
                    assert isinstance(s, socket.socket)
                    try:
                        data = s.recv(4096)
                    except OSError:
                        data = b""
                    if data:
                        continue
                    lived = time.monotonic() - born.pop(s)
                    self.closed_by_node += 1
                    self.max_open_s = max(self.max_open_s, lived)
                    if lived >= 2.0:
                        self.closed_by_node_late += 1
                    sel.unregister(s)
                    slow.discard(s)
                    s.close()
                    reopen.append((time.monotonic() + REOPEN_AFTER_S, key.data))
        finally:
            for s in list(born):
                sel.unregister(s)
                s.close()
            sel.close()

    def _connect(self) -> socket.socket | None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((self.host, 0))
            s.setblocking(False)
            code = s.connect_ex(("127.0.0.1", self.port))
            if code not in (0, errno.EINPROGRESS):
                raise OSError(code, errno.errorcode.get(code, str(code)))
        except OSError as e:
            s.close()
            name = errno.errorcode.get(e.errno or 0, str(e))
            self.connect_errors[name] = self.connect_errors.get(name, 0) + 1
            return None
        self.opened += 1
        return s


@pytest.fixture
def own_fd_room() -> Iterator[None]:
    """This test process holds the 3,300 attacking sockets itself."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = IDLE + SLOW + 1_000
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.fail(f"the test needs {want} descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def limit_descriptors(c: LocalCluster) -> None:
    for nid in c.ids:
        c.node_nofile[nid] = NOFILE


def test_idle_and_slow_connections_do_not_take_the_leader_down(
        tmp_path: Path, own_fd_room: None) -> None:
    with serving_cluster(tmp_path, configure=limit_descriptors) as c:
        leader = c.wait_leader()
        pid = c.procs[leader].pid
        add_job(c, leader, "tick")
        port = int(c.urls[leader].rsplit(":", 1)[1])
        flood = Flood(ATTACKER, port)
        attacker = threading.Thread(target=flood.run, name="flood", daemon=True)
        # A new connection for every probe, as a new client would make.
        probe = httpx.Client(timeout=3, limits=httpx.Limits(max_keepalive_connections=0))
        misses: list[str] = []
        answered = 0
        started = time.time()
        attacker.start()
        try:
            while time.time() - started < ATTACK_S:
                try:
                    r = probe.get(c.urls[leader] + "/healthz")
                    if r.status_code == 200:
                        answered += 1
                    else:
                        misses.append(f"{time.time() - started:.1f}s: HTTP {r.status_code}")
                except httpx.HTTPError as e:
                    misses.append(f"{time.time() - started:.1f}s: {type(e).__name__}")
                time.sleep(0.5)
        finally:
            flood.stop.set()
            attacker.join(timeout=30)
            probe.close()
        ended = time.time()

        assert flood.opened >= IDLE + SLOW, f"the flood opened only {flood.opened}"
        assert c.procs[leader].poll() is None, "the attacked node exited"
        assert c.procs[leader].pid == pid
        assert not misses, f"/healthz missed {len(misses)} of {len(misses) + answered}: " \
                           f"{misses[:10]}"
        # The node closed connections it had admitted once their deadline passed, idle and
        # dripping alike, and none lived much past it.
        assert flood.closed_by_node_late >= SLOW, (flood.closed_by_node_late, flood)
        assert flood.max_open_s < 15, flood.max_open_s
        log = (tmp_path / f"{leader}.log").read_text(errors="replace")
        assert "apply failed" not in log and "stopping" not in log
        # It never ran out of descriptors: accept() failing with EMFILE pauses asyncio's
        # accepting for a second, and every client's connection with it.
        assert "out of system resource" not in log and "Too many open files" not in log
        # It kept its leadership and fired the job every second, once.
        assert c.leader() == leader
        occs = c.occurrences(leader, "tick")
        assert_every_second_once(occs, covering=(started + 1, ended - 1))


def test_a_request_that_arrives_slowly_is_cut_and_a_slow_answer_is_not(
        tmp_path: Path) -> None:
    """The deadline is on the request arriving, not on the answer: a long poll that holds
    its answer past the deadline completes; headers dripped past it do not."""
    with serving_cluster(tmp_path) as c:
        node = c.ids[0]
        port = int(c.urls[node].rsplit(":", 1)[1])
        dripping = socket.create_connection(("127.0.0.1", port), timeout=20)
        t0 = time.monotonic()
        dripping.sendall(b"GET /healthz HTTP/1.1\r\n")
        closed_after = None
        while time.monotonic() - t0 < 20:
            try:
                dripping.sendall(b"X-Slow: 1\r\n")
                dripping.settimeout(1.0)
                if dripping.recv(1024) == b"":
                    closed_after = time.monotonic() - t0
                    break
            except TimeoutError:
                continue
            except OSError:
                closed_after = time.monotonic() - t0
                break
        dripping.close()
        assert closed_after is not None, "a request dripping headers for 20 s was kept"
        assert 4.0 <= closed_after <= 8.0, closed_after
        # A worker's long poll (no run due) answers after its wait, past the deadline.
        worker = c.create_token("worker:default", name="poller")
        t0 = time.monotonic()
        r = c.http.post(c.urls[c.leader() or node] + "/v1/leases",
                        json={"worker_id": "poller", "max": 1, "wait_s": 7},
                        headers=c.auth_headers(worker), timeout=20)
        waited = time.monotonic() - t0
        assert r.status_code == 200, r.text
        assert r.json()["leases"] == []
        assert waited >= 6.5, waited
