"""The estimate of the cluster's confirmed time that API stamps are read from."""

from __future__ import annotations

import logging

import pytest

from raftcron.cluster.raft import LIVE_SLACK_ENTRIES, RaftNode
from raftcron.cluster.stamp_clock import StampClock

LEADER_T0 = 1_800_000_000_000  # the leader's (the cluster's) time at the start, ms


class Clocks:
    """This node's wall and monotonic clocks, moved by hand. `skew_ms`: how far this
    node's wall clock is ahead of the cluster's."""

    def __init__(self, skew_ms: int = 0) -> None:
        self.mono_s = 1000.0
        self.skew_ms = skew_ms

    def cluster_ms(self) -> int:
        return LEADER_T0 + int((self.mono_s - 1000.0) * 1000)

    def wall(self) -> float:
        return (self.cluster_ms() + self.skew_ms) / 1000

    def mono(self) -> float:
        return self.mono_s

    def advance(self, seconds: float) -> None:
        self.mono_s += seconds


def clock_for(clocks: Clocks, confirmed: bool = False, **kw: float) -> StampClock:
    return StampClock(local_confirmed=lambda: confirmed, wall=clocks.wall,
                      mono=clocks.mono, **kw)


def deliver(stamp: StampClock, clocks: Clocks, delay_s: float, epoch: int = 1,
            live: bool = True) -> None:
    """The leader stamps a confirmation now; this node applies it `delay_s` later."""
    sent = clocks.cluster_ms()
    clocks.advance(delay_s)
    stamp.observe(sent, epoch, live)


def test_a_fast_node_stamps_the_cluster_time_not_its_own() -> None:
    clocks = Clocks(skew_ms=262_000)
    stamp = clock_for(clocks)
    deliver(stamp, clocks, 0.02)
    clocks.advance(0.5)
    assert stamp.stamp_ms() == pytest.approx(clocks.cluster_ms(), abs=25)
    assert stamp.offset_ms() == pytest.approx(262_000, abs=25)


def test_the_estimate_keeps_the_smallest_delay_sample_of_the_window() -> None:
    clocks = Clocks(skew_ms=-90_000)
    stamp = clock_for(clocks)
    for delay in (0.9, 0.2, 0.004, 0.7, 1.5):  # a loaded network: delays vary a lot
        deliver(stamp, clocks, delay)
        clocks.advance(1.0 - delay)
    # The 4 ms sample decides: the estimate is 4 ms behind, not 0.2-1.5 s.
    assert clocks.cluster_ms() - stamp.stamp_ms() == pytest.approx(4, abs=1)
    # It is never ahead of the cluster: a delay only makes a sample older.
    assert stamp.stamp_ms() <= clocks.cluster_ms()


def test_samples_older_than_the_window_leave_it() -> None:
    clocks = Clocks()
    stamp = clock_for(clocks, window_s=10, fresh_s=5)
    deliver(stamp, clocks, 0.001)  # the best sample, soon too old
    for _ in range(12):
        clocks.advance(1.0)
        deliver(stamp, clocks, 0.3)
    assert clocks.cluster_ms() - stamp.stamp_ms() == pytest.approx(300, abs=1)


def test_no_sample_and_an_unconfirmed_clock_gives_no_stamp() -> None:
    clocks = Clocks(skew_ms=60_000)
    stamp = clock_for(clocks, confirmed=False)
    assert stamp.stamp_ms() is None
    assert stamp.offset_ms() is None
    assert stamp.describe()["source"] == "none"


def test_no_sample_but_a_clock_a_majority_confirms_stamps_the_local_clock() -> None:
    clocks = Clocks(skew_ms=120)
    stamp = clock_for(clocks, confirmed=True)
    assert stamp.stamp_ms() == int(clocks.wall() * 1000)
    assert stamp.describe()["source"] == "local"


def test_a_stale_estimate_expires() -> None:
    clocks = Clocks(skew_ms=60_000)
    stamp = clock_for(clocks, fresh_s=5)
    deliver(stamp, clocks, 0.01)
    clocks.advance(4.9)
    assert stamp.stamp_ms() is not None
    clocks.advance(0.2)  # the leader stopped confirming 5.1 s ago
    assert stamp.stamp_ms() is None
    assert stamp.describe()["source"] == "none"
    deliver(stamp, clocks, 0.01)  # confirmations resume
    assert stamp.stamp_ms() == pytest.approx(clocks.cluster_ms(), abs=15)


def test_replayed_and_catch_up_entries_are_not_samples() -> None:
    clocks = Clocks(skew_ms=60_000)
    stamp = clock_for(clocks)
    # An hour-old confirmation applied now (journal replay, catch-up) says nothing about
    # this node's clock: taken as a sample it would put the estimate an hour behind.
    stamp.observe(clocks.cluster_ms() - 3_600_000, 1, live=False)
    assert stamp.stamp_ms() is None
    assert stamp.describe()["ignored_samples"] == 1
    deliver(stamp, clocks, 0.01)
    stamp.observe(clocks.cluster_ms() - 3_600_000, 1, live=False)
    assert stamp.stamp_ms() == pytest.approx(clocks.cluster_ms(), abs=15)


def test_a_step_of_the_local_wall_clock_does_not_move_the_estimate() -> None:
    clocks = Clocks()
    stamp = clock_for(clocks)
    deliver(stamp, clocks, 0.01)
    clocks.skew_ms = 262_000  # a clock bump at run time
    clocks.advance(1.0)
    assert stamp.stamp_ms() == pytest.approx(clocks.cluster_ms(), abs=15)
    assert stamp.offset_ms() == pytest.approx(262_000, abs=15)


def test_a_new_epoch_replaces_the_old_leader_samples() -> None:
    clocks = Clocks()
    stamp = clock_for(clocks)
    deliver(stamp, clocks, 0.001, epoch=3)  # the old leader, with a tight sample
    # The new leader's clock is 400 ms behind the old one's (within the tolerance).
    sent = clocks.cluster_ms() - 400
    clocks.advance(0.05)
    stamp.observe(sent, 4, live=True)
    assert clocks.cluster_ms() - 400 - stamp.stamp_ms() == pytest.approx(50, abs=1)
    # A late sample of the old epoch counts no more.
    stamp.observe(clocks.cluster_ms(), 3, live=True)
    assert clocks.cluster_ms() - 400 - stamp.stamp_ms() == pytest.approx(50, abs=1)
    assert stamp.describe()["epoch"] == 4


def test_a_disagreement_beyond_the_tolerance_is_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    clocks = Clocks(skew_ms=62_000)
    stamp = clock_for(clocks)
    deliver(stamp, clocks, 0.01)
    with caplog.at_level(logging.INFO, logger="raftcron.stamp_clock"):
        for _ in range(5):
            stamp.stamp_ms()
            stamp.describe()
        clocks.skew_ms = 100
        stamp.stamp_ms()
        stamp.stamp_ms()
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "off the cluster" in m]) == 1, messages
    assert len([m for m in messages if "agrees with" in m]) == 1, messages


class RaftStandIn:
    """The pysyncobj state `RaftNode.applying_live` reads."""

    def __init__(self, ready: bool, last_applied: int, leader_commit: int | None) -> None:
        self._ready = ready
        self.raftLastApplied = last_applied  # noqa: N815 - pysyncobj's name
        self._SyncObj__leaderCommitIndex = leader_commit

    def isReady(self) -> bool:  # noqa: N802 - pysyncobj's name
        return self._ready


@pytest.mark.parametrize(("ready", "last_applied", "leader_commit", "live"), [
    (True, 99, 100, True),  # the newest committed entry, applied as it commits
    (True, 99 - LIVE_SLACK_ENTRIES, 100, True),  # a few behind (one batch)
    (True, 98 - LIVE_SLACK_ENTRIES, 100, False),  # catching up
    (True, 9, 5000, False),  # far behind: a catch-up after a partition
    (False, 99, 100, False),  # the startup replay is not over
    (True, 99, None, False),  # no leader has spoken to this node yet
])
def test_an_entry_is_applied_live_only_in_step_with_the_leader(
        ready: bool, last_applied: int, leader_commit: int | None, live: bool) -> None:
    node = RaftStandIn(ready, last_applied, leader_commit)
    assert RaftNode.applying_live(node) is live  # type: ignore[arg-type]
