"""Waiting between the tries of a call no server answered."""

from __future__ import annotations

import asyncio
import contextlib
import random


class Backoff:
    """Capped exponential backoff with jitter; a server's Retry-After raises the floor."""

    def __init__(self, initial_s: float = 0.5, cap_s: float = 30.0) -> None:
        self.initial_s = initial_s
        self.cap_s = cap_s
        self._next = initial_s

    def reset(self) -> None:
        self._next = self.initial_s

    def next(self, retry_after: float | None = None) -> float:
        delay = self._next * random.uniform(0.8, 1.2)
        self._next = min(self._next * 2, self.cap_s)
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, self.cap_s)


async def sleep_or(event: asyncio.Event, seconds: float) -> None:
    """Sleep up to `seconds`, returning early when `event` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)

