"""Connection limits for the node's HTTP server: nothing a client sends (or does not send)
can use up the node's file descriptors.

uvicorn bounds neither the number of open connections nor the time a request may take to
arrive: a connection that sends nothing, or one header line every few seconds, stays open
as long as its client likes, and about 1,000 of them used up a node's descriptors until
SQLite could not open a file. This guard, a subclass of uvicorn's h11 protocol, adds:

- a deadline for each request to arrive whole (request line, headers and body), counted
  from the connection's first byte, or from the first byte of the next request on a
  kept-alive connection: past it the node closes the connection;
- a cap on open connections, set below the descriptor limit with room kept for SQLite,
  Raft and its peers, and a smaller cap per source address, so one host cannot take the
  whole budget. A connection over a cap is closed as soon as it is accepted.

A response in progress (a worker's long poll) is never cut: the deadline covers only the
time the client takes to send its request.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import socket
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("raftcron.http")

# Descriptors kept for everything but client connections: the SQLite writer, readers and
# their WAL/shm files, the Raft journal and peer sockets, outbound HTTP (forwarding,
# webhooks, peers' status), the log files.
RESERVED_FDS = 256
DEFAULT_REQUEST_DEADLINE_S = 5.0
# One source address may hold at most this share of the connection budget.
PER_SOURCE_SHARE = 4
# How often (at most) a refusal is logged: a flood must not flood the log too.
LOG_EVERY_S = 10.0
# asyncio accepts up to its `backlog` argument connections in one turn of the loop, and
# each holds a descriptor until the guard below has closed it, a turn or two later. With
# uvicorn's 2,048 a flood took more descriptors in one burst than the budget keeps free,
# accept() failed with EMFILE and asyncio stopped accepting for a second at a time. The
# burst is kept well inside RESERVED_FDS; the kernel's queue stays LISTEN_BACKLOG long.
ACCEPT_BURST = 32
LISTEN_BACKLOG = 2048


def widen_listen_queue(listeners: Iterable[Any], backlog: int = LISTEN_BACKLOG) -> None:
    """Give listening sockets a kernel queue of `backlog` after asyncio has started them
    with the smaller ACCEPT_BURST, which it also keeps as its accept burst."""
    for listener in listeners:
        # A dup shares the socket: listen() on it changes the queue of the one served.
        dup = socket.socket(listener.family, listener.type, fileno=os.dup(listener.fileno()))
        try:
            dup.listen(backlog)
        finally:
            dup.close()


class QuietAcceptErrors(logging.Filter):
    """Lets asyncio's "socket.accept() out of system resource" through once per
    LOG_EVERY_S, with the count of the ones dropped: each comes with a traceback, and a
    flood could otherwise write them as fast as it connects."""

    def __init__(self) -> None:
        super().__init__()
        self._logged_at = float("-inf")
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "socket.accept() out of system resource" not in record.getMessage():
            return True
        now = time.monotonic()
        if now - self._logged_at < LOG_EVERY_S:
            self.dropped += 1
            return False
        self._logged_at = now
        if self.dropped:
            record.msg = f"{record.msg} ({self.dropped} more since the last one not logged)"
            self.dropped = 0
        return True


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft descriptor limit to the hard one; (soft, hard) after, logged."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = soft
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:
            log.warning("could not raise the descriptor limit from %d to %d: %s", soft, target, e)
    log.info("descriptor limit: soft %d (was %d), hard %s", soft, before,
             "unlimited" if hard == resource.RLIM_INFINITY else hard)
    return soft, hard


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int
    per_source: int
    request_deadline_s: float = DEFAULT_REQUEST_DEADLINE_S

    @classmethod
    def for_fd_limit(cls, soft_limit: int, max_connections: int | None = None,
                     per_source: int | None = None,
                     request_deadline_s: float = DEFAULT_REQUEST_DEADLINE_S,
                     ) -> ConnectionLimits:
        """Limits under a descriptor limit of `soft_limit`: at most the limit less
        RESERVED_FDS connections (at least 16), each source a quarter of them. Explicit
        values are kept, but never above what the descriptors allow."""
        budget = max(16, soft_limit - RESERVED_FDS)
        total = min(max_connections, budget) if max_connections else budget
        share = per_source if per_source else max(4, total // PER_SOURCE_SHARE)
        return cls(total, min(share, total), request_deadline_s)


@dataclass
class ConnectionBudget:
    """Open connections, in all and per source address, against `limits`."""

    limits: ConnectionLimits
    open: int = 0
    by_source: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)
    closed_late: int = 0
    _logged_at: float = 0.0

    def admit(self, source: str) -> str | None:
        """Count the connection in, or the reason it is refused ('total', 'per_source')."""
        if self.open >= self.limits.max_connections:
            return self._refuse("total", source)
        if self.by_source[source] >= self.limits.per_source:
            return self._refuse("per_source", source)
        self.open += 1
        self.by_source[source] += 1
        return None

    def release(self, source: str) -> None:
        self.open -= 1
        left = self.by_source[source] - 1
        if left > 0:
            self.by_source[source] = left
        else:
            del self.by_source[source]

    def _refuse(self, why: str, source: str) -> str:
        self.refused[why] += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            log.warning("refusing HTTP connections over the %s cap (%d open, %d from %s; "
                        "limits %d total, %d a source; %d refused so far)", why, self.open,
                        self.by_source[source], source, self.limits.max_connections,
                        self.limits.per_source, sum(self.refused.values()))
        return why


def guarded_protocol(budget: ConnectionBudget) -> type[H11Protocol]:
    """uvicorn's h11 protocol with `budget`'s caps and request deadline."""

    class GuardedH11Protocol(H11Protocol):
        _admitted_as: str | None = None
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            source = self.client[0] if self.client else "?"
            if budget.admit(source) is not None:
                transport.abort()
                return
            self._admitted_as = source
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._admitted_as is not None:
                budget.release(self._admitted_as)
                self._admitted_as = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._deadline is None and self._between_requests():
                self._arm()  # the first byte of the next request on a kept-alive connection
            super().data_received(data)
            cycle: Any = self.cycle
            if cycle is not None and not cycle.more_body and not cycle.response_complete:
                self._disarm()  # the request arrived whole: its answer may take its time

        def _between_requests(self) -> bool:
            cycle: Any = self.cycle
            return cycle is None or cycle.response_complete

        def _arm(self) -> None:
            self._deadline = self.loop.call_later(budget.limits.request_deadline_s,
                                                  self._on_deadline)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _on_deadline(self) -> None:
            self._deadline = None
            cycle: Any = self.cycle
            awaiting = cycle is None or cycle.response_complete or cycle.more_body
            if awaiting and not self.transport.is_closing():
                budget.closed_late += 1
                self.transport.close()

    return GuardedH11Protocol
