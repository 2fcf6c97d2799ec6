"""What route handlers share: the node, a read connection, and proposing helpers."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import aiosqlite
from starlette.requests import Request
from starlette.responses import Response

from raftcron.api.auth import principal_of
from raftcron.api.errors import HTTPError, rejection_error
from raftcron.cluster.proposer import NO_LEADER, ProposalError
from raftcron.core import protocol
from raftcron.core.commands import Barrier, Command
from raftcron.core.errors import NOT_UPGRADED, ValidationError
from raftcron.state.one_step import decode_rows, wrap_select

if TYPE_CHECKING:
    from raftcron.node_view import NodeView

# `?consistent=`: the spellings of a boolean query parameter.
# How long a write needing a level that every member already announced waits for the
# leader's raise to be committed and applied here (ApiContext.require_level).
LEVEL_WAIT_S = 5.0
CONSISTENT_VALUES = {"1": True, "true": True, "yes": True, "0": False, "false": False,
                     "no": False, "": False}


# Pages built at once, each in a thread. A thread that builds holds the GIL, which the event
# loop (leases, probes) and the Raft thread need too; one at a time, however many clients
# page through large lists, leaves them at least half of it.
PAGE_BUILDERS = 1


class ApiContext:
    def __init__(self, node: NodeView) -> None:
        self.node = node
        self.db: aiosqlite.Connection | None = None
        # One bulk-create entry in flight per node: pysyncobj applies every committed entry
        # in one tick, so several 250-job entries committing together would hold back the
        # leader's heartbeats long enough for an election (ARCHITECTURE §4).
        self.bulk_entries = asyncio.Semaphore(1)
        # Large list pages are built off the event loop, one at a time (page_response).
        self.page_builds = asyncio.Semaphore(PAGE_BUILDERS)

    async def open(self) -> None:
        self.db = await aiosqlite.connect(f"file:{self.node.config.db_path}?mode=ro", uri=True)
        await self.db.execute("PRAGMA query_only=ON")

    async def close(self) -> None:
        if self.db is not None:
            await self.db.close()

    async def fetchall(self, sql: str, params: tuple | list = ()) -> list[tuple]:
        """Run and finish the statement in one hop to the reader thread. A statement left
        open between hops would pin its WAL snapshot for every concurrent request on this
        connection, and a read right after a committed write could miss it."""
        assert self.db is not None
        return list(await self.db.execute_fetchall(sql, params))

    async def select_all(self, sql: str, params: tuple | list, ncols: int) -> list[tuple]:
        """`fetchall` of a SELECT of `ncols` columns in one SQLite step
        (state.one_step): for the reads of a herd, while every thread of the node is busy."""
        return decode_rows((await self.fetchall(wrap_select(sql, ncols), params))[0][0])

    async def fetchone(self, sql: str, params: tuple | list = ()) -> tuple | None:
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def page_response(self, build: Callable[[], Any], status_code: int = 200) -> Response:
        """The JSON answer `build()` makes, built and encoded in a thread (at most
        PAGE_BUILDERS at once): a page of 500 jobs takes tens of milliseconds to turn
        into text, which on the event loop would delay every lease and probe behind it."""
        async with self.page_builds:
            body = await asyncio.to_thread(lambda: json_bytes(build()))
        return Response(body, status_code=status_code, media_type="application/json")

    def stamp_ms(self) -> int:
        """The time a client write or worker call is stamped with: the cluster's confirmed
        time as this node estimates it (cluster.stamp_clock), not this node's own clock,
        which no one confirms. Without a confirmed time the request is refused (503
        `clock_unconfirmed`, retryable) rather than stamped with a clock that may be
        minutes off."""
        stamp = self.node.stamp_ms()
        if stamp is None:
            raise HTTPError(503, "clock_unconfirmed",
                            "this node does not know the cluster's confirmed time yet (no "
                            "recent leader confirmation, and no majority confirms its own "
                            "clock): retry, or use another node", headers={"Retry-After": "1"})
        return stamp

    async def propose(self, cmd: Command) -> dict[str, Any]:
        """Propose and return the applied result; rejections become HTTP errors."""
        result = await self.propose_raw(cmd)
        if not result.get("ok"):
            raise rejection_error(result)
        return result

    def writable_level(self) -> int:
        """The protocol level this node may write: the level the cluster committed, as
        this node applied it (it only rises, so a lagging node is the more careful one),
        and never above the level this node speaks. Held in memory by the node (noted on
        apply), so a write does not read it from SQLite."""
        return self.node.writable_level()

    async def require_level(self, cmd: Command) -> None:
        """Refuse (409 `cluster_not_upgraded`, naming the feature) a command some member's
        build could not read: it would stop that node (core.protocol).

        When every member already announced the level the command needs, the raise is on
        its way (the leader commits it within a second or two of a fresh start, and a
        follower applies it a moment after): wait for it, up to LEVEL_WAIT_S, instead of
        refusing a brand-new cluster's first writes. A member not heard from never waits."""
        needed = protocol.required(cmd)
        if needed is None:
            return
        level = self.writable_level()
        if needed.level > level and self.node.members_speak(needed.level):
            deadline = time.monotonic() + LEVEL_WAIT_S
            while needed.level > level and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                level = self.writable_level()
        req = protocol.unmet(cmd, level)
        if req is not None:
            raise HTTPError(409, NOT_UPGRADED, protocol.not_upgraded_message(req, level),
                            req.field, extra=protocol.refusal_details(req, level))

    async def propose_raw(self, cmd: Command) -> dict[str, Any]:
        proposer = self.node.proposer
        assert proposer is not None
        await self.require_level(cmd)
        try:
            return await proposer.propose(cmd)
        except ProposalError as e:
            code = "no_leader" if e.code == NO_LEADER else "unknown_outcome"
            msg = e.message if not e.maybe_applied else (
                f"{e.message}; the request may have been applied: retry it with the same "
                "Idempotency-Key"
            )
            raise HTTPError(503, code, msg, headers={"Retry-After": "1"}) from None

    async def barrier(self) -> None:
        """Commit a no-op and wait until this node applied it: reads after it see every
        write acknowledged before it, on any node."""
        await self.propose(Barrier(request_id=f"barrier-{uuid.uuid4().hex}"))

    async def maybe_barrier(self, request: Request) -> None:
        """`?consistent=true` reads go through a barrier first."""
        value = request.query_params.get("consistent", "false").lower()
        if value not in CONSISTENT_VALUES:
            raise ValidationError("consistent", "must be true or false")
        if CONSISTENT_VALUES[value]:
            await self.barrier()


def json_bytes(value: Any) -> bytes:
    """`value` as starlette's JSONResponse encodes it."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, indent=None,
                      separators=(",", ":")).encode("utf-8")


def now_ms() -> int:
    """This node's own wall clock, for reads only: commands are stamped with
    `ApiContext.stamp_ms`."""
    return int(time.time() * 1000)


def idempotency_key(request: Request) -> str | None:
    """The client's Idempotency-Key (None when it sent none)."""
    key = request.headers.get("idempotency-key")
    if not key:
        return None
    if len(key) > 200:
        raise HTTPError(400, "invalid", "must be at most 200 characters", "Idempotency-Key")
    return key


def request_id(request: Request) -> str:
    """Client writes are deduplicated by request id: with an Idempotency-Key, the key bound
    to the method, the path and the caller's identity (another principal's key is another
    request, never its replay); without one, a fresh id."""
    key = idempotency_key(request)
    if key is None:
        return uuid.uuid4().hex
    return f"{request.method} {request.url.path} {principal_of(request).identity} {key}"


def request_hash(request: Request, body: Any = None) -> str | None:
    """A hash of what the request asks for (method, path, If-Match and the canonical JSON
    body), kept with its idempotency record: the same key sent with another request is
    refused (422 `idempotency_key_reused`) instead of answered with the first one's result.
    None without an Idempotency-Key (the request id is fresh then)."""
    if idempotency_key(request) is None:
        return None
    canonical = json.dumps([request.method, request.url.path,
                            request.headers.get("if-match"), body],
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
