"""The follower's answer to a refused append (cluster.raft.RaftNode), on a RaftNode built
without a network: what it tells its leader to send next."""

from __future__ import annotations

from typing import Any

import pytest

from raftcron.cluster.raft import RaftNode


class _Transport:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, node: object, message: dict[str, Any]) -> None:
        self.sent.append(message)


def _follower(commit: int, last: int) -> tuple[RaftNode, _Transport]:
    """A follower whose log ends at `last` (terms: 1 up to 6, then 2, a dead term) and
    whose commit index is `commit`."""
    node = RaftNode.__new__(RaftNode)
    transport = _Transport()
    node._SyncObj__transport = transport  # type: ignore[attr-defined]
    node._SyncObj__raftLog = [  # type: ignore[attr-defined]
        (b"", i, 1 if i <= 6 else 2) for i in range(1, last + 1)]
    node._SyncObj__raftCommitIndex = commit  # type: ignore[attr-defined]
    return node, transport


def _answer(node: RaftNode, **kw: Any) -> None:
    node._SyncObj__sendNextNodeIdx(object(), **kw)  # type: ignore[attr-defined]


@pytest.mark.parametrize("pysyncobj_hint", [
    24,    # "my entry at 24 has another term": pysyncobj answers prevLogIdx
    None,  # "I have no entry there": pysyncobj answers its last index + 1 (25)
])
def test_every_refusal_points_the_leader_at_the_committed_prefix(
        pysyncobj_hint: int | None) -> None:
    """Both refusals of one heartbeat give the same, safe index: the commit index + 1.
    pysyncobj gave 24 for the first and 25 for the next message of the same heartbeat,
    the leader kept the last, and the follower's stale entries 7..24 were never replaced
    (a chaos run: 6 minutes stuck, until a snapshot)."""
    node, transport = _follower(commit=6, last=24)
    _answer(node, reset=True, nextNodeIdx=pysyncobj_hint, success=False)
    assert transport.sent == [{"type": "next_node_idx", "next_node_idx": 7, "reset": True,
                               "success": False}]


def test_a_lower_hint_than_the_commit_index_is_kept() -> None:
    node, transport = _follower(commit=6, last=24)
    _answer(node, reset=True, nextNodeIdx=4, success=False)
    assert transport.sent[0]["next_node_idx"] == 4


def test_a_commit_index_past_the_log_end_is_bounded_by_the_log() -> None:
    """After a truncation the commit index may briefly exceed the log."""
    node, transport = _follower(commit=30, last=24)
    _answer(node, reset=True, success=False)
    assert transport.sent[0]["next_node_idx"] == 25


@pytest.mark.parametrize("kw", [
    {"reset": False, "success": False},                   # a snapshot chunk received
    {"reset": False, "nextNodeIdx": 25, "success": True},  # entries appended
])
def test_acknowledgements_are_unchanged(kw: dict[str, Any]) -> None:
    node, transport = _follower(commit=6, last=24)
    _answer(node, **kw)
    assert transport.sent[0]["next_node_idx"] == 25
    assert transport.sent[0]["success"] is kw["success"]
