"""Raft voters that cannot be read (pysyncobj's status raced the tick thread three times)
are unknown, never "none": a removal is not taken as done, and the members view keeps this
node."""

from __future__ import annotations

from types import SimpleNamespace

from raftcron.ops.node_ops import _voters_lack


def node_with(voters: set[str] | None) -> SimpleNamespace:
    return SimpleNamespace(raft=SimpleNamespace(other_addrs=lambda: voters))


def test_a_removal_is_settled_only_when_the_voters_are_known_to_lack_it() -> None:
    assert _voters_lack(node_with(None), "10.0.0.3:7000") is False  # type: ignore[arg-type]
    assert _voters_lack(node_with({"10.0.0.3:7000"}), "10.0.0.3:7000") is False  # type: ignore[arg-type]
    assert _voters_lack(node_with({"10.0.0.2:7000"}), "10.0.0.3:7000") is True  # type: ignore[arg-type]
