"""Asking pysyncobj to hand leadership over, from any thread.

`SyncObj.transferLeadership` touches Raft state, which only the tick thread may do, so a
request is queued and executed by a tick callback.
"""

from __future__ import annotations

import threading
from typing import Any


class LeadershipTransfer:
    def __init__(self, raft: Any) -> None:
        self.raft = raft
        self._lock = threading.Lock()
        self._pending: list[tuple[str | None, threading.Event, list[int]]] = []
        raft.addOnTickCallback(self._on_tick)

    def request(self, target: str | None = None) -> threading.Event:
        """Queue a transfer to `target` ('host:port', or None for the most caught-up
        connected follower). The returned event is set once pysyncobj answered."""
        done = threading.Event()
        with self._lock:
            self._pending.append((target, done, []))
        return done

    def _on_tick(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for target, done, result in pending:
            def callback(res: Any, err: Any, done: threading.Event = done,
                         result: list[int] = result) -> None:
                result.append(err if err is not None else res)
                done.set()

            self.raft.transferLeadership(target, callback=callback)
