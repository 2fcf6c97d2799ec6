"""CPU-heavy reads (the state digest, the herd chart), bounded per node.

Such a read runs in a worker thread, so the event loop keeps serving; but a thread that
computes holds the GIL, which the Raft tick thread needs for its heartbeats. So a node
runs at most one heavy computation at a time, callers asking for the same thing while it
runs share its result, and after each computation the next one waits as long as the last
one took: however many clients ask, heavy reads take at most half of one core. A result
can be kept for a while (`keep_s`) and is then the answer for its key, without a
computation; it is stored before the computation counts as finished, so no caller can
slip between "not kept" and "not in flight" and compute it twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from starlette.applications import Starlette

T = TypeVar("T")
MAX_KEPT = 256


class HeavyReads:
    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> None:
        self._clock = clock
        self._sleep = sleep
        self._lock = asyncio.Lock()
        self._inflight: dict[Hashable, asyncio.Future[Any]] = {}
        self._not_before = 0.0
        self._kept: dict[Hashable, tuple[float, float, Any]] = {}  # key: (at, keep_s, value)
        self.computations = 0  # how many ran (for /metrics-style checks and tests)

    async def run(self, key: Hashable, fn: Callable[..., T], *args: Any,
                  keep_s: float = 0.0) -> T:
        """`fn(*args)` in a thread, one computation at a time; a caller asking for a
        `key` being computed gets that computation's result, and one asking within
        `keep_s` of its end gets the result kept. A caller that goes away does not cancel
        the computation for the others."""
        kept = self.kept(key)
        if kept is not None:
            return kept
        future = self._inflight.get(key)
        if future is None:
            future = self._inflight[key] = asyncio.ensure_future(
                self._compute(key, fn, args, keep_s))
        return await asyncio.shield(future)

    def kept(self, key: Hashable) -> Any | None:
        """The result kept for `key`, if it is still fresh."""
        kept = self._kept.get(key)
        if kept is not None and self._clock() - kept[0] < kept[1]:
            return kept[2]
        return None

    async def _compute(self, key: Hashable, fn: Callable[..., T], args: tuple[Any, ...],
                       keep_s: float) -> T:
        try:
            async with self._lock:
                wait = self._not_before - self._clock()
                if wait > 0:
                    await self._sleep(wait)
                started = self._clock()
                try:
                    value = await asyncio.to_thread(fn, *args)
                    if keep_s > 0:
                        if len(self._kept) >= MAX_KEPT:
                            self._kept.clear()
                        self._kept[key] = (self._clock(), keep_s, value)
                    return value
                finally:
                    self.computations += 1
                    ended = self._clock()
                    self._not_before = ended + (ended - started)
        finally:
            self._inflight.pop(key, None)


def heavy_reads(app: Starlette) -> HeavyReads:
    """The node's one `HeavyReads` (made on first use, inside the app's event loop)."""
    gate = getattr(app.state, "heavy_reads", None)
    if gate is None:
        gate = app.state.heavy_reads = HeavyReads()
    return gate
