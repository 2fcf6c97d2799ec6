"""What this node knows of protocol levels (core.protocol): the level it speaks, the level
each peer announced, and the level the cluster committed.

Each node announces its level in its `/healthz` answer (`protocol_level`), which every
peer already probes once a second for its clock (leader.clock.ClockGuard): the answers
land here. Fail closed: a peer that has not answered recently (unreachable, not probed
yet) and one that announces no level (a build older than levels) count as
`BASE_LEVEL`, so the leader does not raise the cluster's level past them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from raftcron.core.protocol import BASE_LEVEL, PROTOCOL_LEVEL

# How long an announcement counts: two clock-probe periods (1 s) and a round trip. A peer
# whose probe fails (a node restarting, say with an older build) is dropped at once.
ANNOUNCED_FRESH_S = 3.0
# Test-only: the (lower) level a node pretends to speak, to emulate a node of an older
# build in a mixed cluster (tests/system/test_protocol_levels.py). Not for production.
TEST_LEVEL_ENV = "RAFTCRON_TEST_PROTOCOL_LEVEL"


def spoken_level(environ: Mapping[str, str] = os.environ) -> int:
    """PROTOCOL_LEVEL, unless $RAFTCRON_TEST_PROTOCOL_LEVEL names a level from BASE_LEVEL
    up to it (test-only: the node then announces that level and stops, exit 70, on any
    entry above it, exactly as a build of that level would). ValueError otherwise."""
    text = environ.get(TEST_LEVEL_ENV, "").strip()
    if not text:
        return PROTOCOL_LEVEL
    if not text.isdigit() or not BASE_LEVEL <= int(text) <= PROTOCOL_LEVEL:
        raise ValueError(f"{TEST_LEVEL_ENV}={text!r}: must be an integer from {BASE_LEVEL} "
                         f"to {PROTOCOL_LEVEL}")
    return int(text)


def level_members(peer_urls: Iterable[str], voter_addrs: Iterable[str],
                  recorded_raft_addrs: Iterable[str]) -> list[str]:
    """Whom the cluster's level waits for: every peer (by HTTP URL, as probed), and every
    Raft voter without a member record yet (one just added: Raft first, then its record),
    named `raft://<addr>`: it is never probed, so it counts as BASE_LEVEL until its record
    makes it a peer."""
    recorded = set(recorded_raft_addrs)
    unrecorded = sorted(a for a in voter_addrs if a not in recorded)
    return [*peer_urls, *(f"raft://{a}" for a in unrecorded)]


def announced_in(answer: Any) -> int:
    """The level a `/healthz` answer announces (BASE_LEVEL when it names none)."""
    level = answer.get("protocol_level") if isinstance(answer, dict) else None
    if type(level) is not int or level < BASE_LEVEL:
        return BASE_LEVEL
    return level


class ClusterLevels:
    def __init__(self, speaks: int, committed: int = BASE_LEVEL) -> None:
        self.speaks = speaks
        self.committed = committed
        self._committed_lock = threading.Lock()
        self._announced: dict[str, tuple[int, float]] = {}  # url -> (level, monotonic)

    # --- what peers announce (ClockGuard's probe answers) ---------------------------------

    def record_answer(self, url: str, answer: Any | None) -> None:
        """A peer's `/healthz` answer, or None when the probe failed (its level is then
        unknown until it answers again)."""
        if answer is None:
            self._announced.pop(url, None)
        else:
            self._announced[url] = (announced_in(answer), time.monotonic())

    def announced(self, url: str) -> int | None:
        """The level `url` announced within ANNOUNCED_FRESH_S (None: not known)."""
        seen = self._announced.get(url)
        if seen is None or time.monotonic() - seen[1] > ANNOUNCED_FRESH_S:
            return None
        return seen[0]

    def target(self, peer_urls: Iterable[str]) -> int:
        """The highest level every member speaks, this node included; a peer whose
        level is not known counts as BASE_LEVEL."""
        return min([self.speaks, *(self.announced(u) or BASE_LEVEL for u in peer_urls)])

    # --- what the cluster committed -------------------------------------------------------

    def note_committed(self, level: int) -> None:
        """The cluster's level as this node applied it (it only rises). Called from the
        Raft thread (on apply) and the event loop (the periodic refresh): the lock keeps a
        raise from being lost between the read and the write."""
        with self._committed_lock:
            self.committed = max(self.committed, level)

    def writable(self) -> int:
        """The level this node may write: the committed one, never above its own."""
        return min(self.committed, self.speaks)
