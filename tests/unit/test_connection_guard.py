"""The HTTP connection budget and the apply's retry on a resource error (unit level; the
system test is tests/system/test_connection_flood.py)."""

from __future__ import annotations

import sqlite3

import pytest

from raftcron.api.connection_guard import RESERVED_FDS, ConnectionBudget, ConnectionLimits
from raftcron.cluster.raft import is_resource_error, retry_resource_errors


def test_limits_keep_room_for_the_node_and_split_it_by_source() -> None:
    limits = ConnectionLimits.for_fd_limit(1024)
    assert limits.max_connections == 1024 - RESERVED_FDS
    assert limits.per_source == limits.max_connections // 4
    # An explicit cap is kept, but never above what the descriptors allow.
    assert ConnectionLimits.for_fd_limit(1024, max_connections=100).max_connections == 100
    assert ConnectionLimits.for_fd_limit(1024, max_connections=10**6).max_connections == 768
    # A tiny limit still serves a few connections rather than none.
    tiny = ConnectionLimits.for_fd_limit(10)
    assert tiny.max_connections == 16 and 1 <= tiny.per_source <= 16


def test_a_source_over_its_share_is_refused_and_others_still_get_in() -> None:
    budget = ConnectionBudget(ConnectionLimits(max_connections=6, per_source=3))
    assert [budget.admit("10.0.0.9") for _ in range(3)] == [None] * 3
    assert budget.admit("10.0.0.9") == "per_source"
    assert budget.admit("127.0.0.1") is None
    budget.release("10.0.0.9")
    assert budget.admit("10.0.0.9") is None
    assert budget.admit("127.0.0.2") is None and budget.admit("127.0.0.3") is None
    assert budget.open == 6
    assert budget.admit("127.0.0.4") == "total"
    assert budget.refused == {"per_source": 1, "total": 1}
    for source in ("10.0.0.9", "10.0.0.9", "10.0.0.9", "127.0.0.1", "127.0.0.2", "127.0.0.3"):
        budget.release(source)
    assert budget.open == 0 and not budget.by_source


def test_an_apply_short_of_a_resource_is_tried_again_until_it_succeeds() -> None:
    calls: list[int] = []
    slept: list[float] = []

    def apply() -> dict[str, bool]:
        calls.append(1)
        if len(calls) < 4:
            raise sqlite3.OperationalError("unable to open database file")
        return {"ok": True}

    assert retry_resource_errors(7, apply, sleep=slept.append) == {"ok": True}
    assert len(calls) == 4
    assert slept == sorted(slept) and slept[0] > 0, "backs off"


@pytest.mark.parametrize("error", [
    sqlite3.OperationalError("no such table: jobs"),
    sqlite3.IntegrityError("UNIQUE constraint failed: occurrences.id"),
    ValueError("bad entry"),
])
def test_any_other_error_is_not_retried(error: Exception) -> None:
    calls: list[int] = []

    def apply() -> dict[str, bool]:
        calls.append(1)
        raise error

    with pytest.raises(type(error)):
        retry_resource_errors(7, apply, sleep=lambda _: None)
    assert calls == [1]
    assert not is_resource_error(error)
