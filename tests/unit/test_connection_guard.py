"""The HTTP connection budget and the apply's retry on a resource error (unit level; the
system test is tests/system/test_connection_flood.py)."""

from __future__ import annotations

import logging
import select
import socket
import sqlite3

import pytest

from raftcron.api.connection_guard import (
    ACCEPT_BURST,
    RESERVED_FDS,
    ConnectionBudget,
    ConnectionLimits,
    QuietAcceptErrors,
    widen_listen_queue,
)
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


def _connected_within(clients: list[socket.socket], seconds: float) -> int:
    _, writable, _ = select.select([], clients, [], seconds)
    return sum(1 for c in writable if c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0)


@pytest.mark.parametrize("widen", [False, True])
def test_the_listen_queue_is_widened_beyond_the_accept_burst(widen: bool) -> None:
    """asyncio accepts `backlog` connections a turn, so the node starts its listener with
    ACCEPT_BURST and then widens the kernel's queue: connections nobody has accepted yet
    wait there instead of being dropped."""
    assert ACCEPT_BURST * 4 <= RESERVED_FDS
    listener = socket.create_server(("127.0.0.1", 0), backlog=1)
    clients: list[socket.socket] = []
    try:
        if widen:
            widen_listen_queue([listener], backlog=64)
        for _ in range(20):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(listener.getsockname())
            clients.append(c)
        completed = _connected_within(clients, 0.5)
        # A queue of 1 holds two handshakes; the rest are dropped and retried a second on.
        assert completed == (20 if widen else 2)
    finally:
        for c in clients:
            c.close()
        listener.close()


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, message, None, None)


def test_accept_errors_are_logged_once_in_a_while_with_a_count() -> None:
    quiet = QuietAcceptErrors()
    accept_error = "socket.accept() out of system resource\nsocket: <fd=14>"
    first = _record(accept_error)
    assert quiet.filter(first) and first.getMessage() == accept_error
    assert not any(quiet.filter(_record(accept_error)) for _ in range(1000))
    assert quiet.dropped == 1000
    # Anything else asyncio says passes untouched.
    assert quiet.filter(_record("Task exception was never retrieved"))
    quiet._logged_at -= 3600  # the interval has passed
    later = _record(accept_error)
    assert quiet.filter(later)
    assert "(1000 more since the last one not logged)" in later.getMessage()
    assert quiet.dropped == 0
