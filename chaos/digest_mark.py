"""Digest marks made while the chaos faults run, each read from every member.

`compare_at_mark` (in raftcron.testing, which the test clusters' `wait_converged` uses
too) makes one mark and reads each node's digest at it; `Marker` does that every
MARK_EVERY_S and records the answers, which the checker (chaos/checks_marks.py,
chaos/checks_membership.py) compares.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx

from raftcron.testing import MAKE_TIMEOUT_S, READ_TIMEOUT_S, compare_at_mark

# Marks made while the faults run (chaos/checks_marks.py): often enough for several in a
# ci run's five minutes of faults, seldom enough that reading one (up to READ_TIMEOUT_S)
# never overlaps the next.
MARK_EVERY_S = 40.0


class Marker:
    """A thread that makes a digest mark every MARK_EVERY_S through whichever node leads
    and records each member's digest at it: a `marks` `digest-mark` line in the history.
    A mark it could not make (no leader) is recorded with its error, and the next one is
    tried a period later."""

    def __init__(self, procs: Any, history: Any) -> None:
        self.procs = procs
        self.history = history
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="digest-marks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self.stop.set()
        self._thread.join(READ_TIMEOUT_S + MAKE_TIMEOUT_S + 10)

    def _loop(self) -> None:
        with httpx.Client(timeout=10, headers=self.procs.auth_headers()) as http:
            while not self.stop.wait(MARK_EVERY_S):
                leader = self.procs.leader()
                if leader is None:
                    self.history.write("marks", "note", "digest-mark", error="no leader")
                    continue
                urls = {n: self.procs.urls[n] for n in self.procs.ids}
                compared = compare_at_mark(http, self.procs.urls[leader], urls)
                self.history.write("marks", "note", "digest-mark", leader=leader, **compared)
