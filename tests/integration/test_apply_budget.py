"""A burst of slow entries keeps its leader: three RaftNodes on loopback, a state machine
whose marked entries each take 0.12 s to apply (longer in all than the 0.3-0.6 s election
timeout), and no new term while they are applied."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pysyncobj import FAIL_REASON

from raftcron.cluster import raft
from raftcron.cluster.raft import RaftNode
from raftcron.core import commands as c
from raftcron.core.commands import Barrier, encode
from raftcron.state.db import open_writer
from raftcron.state.machine import StateMachine
from raftcron.testing import free_port_base

SECRET = "integration-secret-0123456789"
SLOW_APPLY_S = 0.12
BURST = 12  # 1.44 s of applying, in one tick without a budget


class SlowMachine(StateMachine):
    """Applies a Barrier whose request id starts with `slow-` in SLOW_APPLY_S (a herd's
    large entry on a loaded machine); `applied` counts those."""

    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        self.applied = 0

    def apply(self, index: int, cmd: c.Command) -> dict[str, Any]:
        if isinstance(cmd, Barrier) and cmd.request_id.startswith("slow-"):
            time.sleep(SLOW_APPLY_S)
            self.applied += 1
        return super().apply(index, cmd)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[tuple[RaftNode, SlowMachine]]]:
    base = free_port_base(3)
    addrs = [f"127.0.0.1:{base + i}" for i in range(3)]
    nodes = []
    for me in range(3):
        data = tmp_path / f"n{me}"
        data.mkdir()
        machine = SlowMachine(open_writer(str(data / "state.db")))
        node = RaftNode(addrs[me], [a for i, a in enumerate(addrs) if i != me], machine,
                        str(data), SECRET, threading.Lock(), durable=False)
        nodes.append((node, machine))
    yield nodes
    for node, _ in nodes:
        node.destroy()


def _leader(nodes: list[tuple[RaftNode, SlowMachine]], timeout: float = 20) -> RaftNode:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leaders = [n for n, _ in nodes if n.is_leader()]
        if len(leaders) == 1 and all(n.leader_addr() for n, _ in nodes):
            return leaders[0]
        time.sleep(0.05)
    raise AssertionError("no leader")


def _burst(nodes: list[tuple[RaftNode, SlowMachine]]) -> tuple[int, int, list[int]]:
    """Submit BURST slow entries at once on the leader; (term before, highest term after,
    the leader's callback results) once every node applied them all."""
    leader = _leader(nodes)
    leader.submit_raw(encode(Barrier(request_id="warm-up")), lambda *_: None)
    time.sleep(1.0)  # every node connected and in step
    term = leader.term()
    done: list[int] = []
    for i in range(BURST):
        leader.submit_raw(encode(Barrier(request_id=f"slow-{i}")),
                          lambda _res, err: done.append(err))
    deadline = time.monotonic() + 60
    while not all(m.applied >= BURST for _, m in nodes):
        assert time.monotonic() < deadline, [m.applied for _, m in nodes]
        time.sleep(0.05)
    time.sleep(0.5)
    # Each entry applied once on every node, and every node applied all it committed.
    assert [m.applied for _, m in nodes] == [BURST] * 3
    assert len({n._SyncObj__raftLastApplied for n, _ in nodes}) == 1
    assert all(n._SyncObj__raftLastApplied == n._SyncObj__raftCommitIndex for n, _ in nodes)
    return term, max(n.term() for n, _ in nodes), done


def test_a_burst_of_slow_entries_does_not_depose_the_leader(cluster) -> None:
    before, after, done = _burst(cluster)
    assert after == before, f"the term rose from {before} to {after} during the burst"
    assert done == [FAIL_REASON.SUCCESS] * BURST


def test_without_the_budget_the_same_burst_elects_a_new_leader(cluster, monkeypatch) -> None:
    # The same burst with the whole of it applied in one tick, as pysyncobj does: the
    # condition the budget exists for, shown to happen (so the test above can fail).
    monkeypatch.setattr(raft, "APPLY_BUDGET_S", 3600.0)
    before, after, _ = _burst(cluster)
    assert after > before
