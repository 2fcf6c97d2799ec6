"""A new leader releases the unacknowledged leases of an earlier epoch from its first sweep,
before their acknowledgement deadline (a leader killed between committing a lease and
answering the poll never delivered it): runs due around a failover need not wait out the
ack timeout. From protocol level 2 on (RELEASE_PREVIOUS_EPOCH_LEVEL)."""

from __future__ import annotations

import asyncio

import pytest

from raftcron.core import commands as c
from raftcron.core.protocol import BASE_LEVEL, PROTOCOL_LEVEL, RELEASE_PREVIOUS_EPOCH_LEVEL
from raftcron.leader.sweeper import Sweeper
from raftcron.state.db import META_UNACKED_LEASES, get_meta, open_reader
from tests.integration.test_lease_ack import ack_lease
from tests.integration.test_machine import MIN, T0, Node, att, occ

T = T0 + MIN


def _leased_at_epoch_1(n: Node) -> tuple[str, int]:
    """A run leased (unacknowledged, ack deadline T + 3 s) by the leader of epoch 1."""
    n.create("j", max_attempts=1, ack_timeout_s=3)  # were the release an attempt, it fails
    n.fire("j", T)
    a = att("j", T)
    return a, ack_lease(n, a, T)["fencing_token"]


def test_a_lease_of_an_earlier_epoch_is_released_before_its_deadline(led):
    a, old = _leased_at_epoch_1(led)
    assert led.begin(2, now=T + 600)["ok"]
    assert led.sweep([a], T + 700) == {"ok": True, "lost": [], "timed_out": [],
                                       "unacknowledged": [a]}
    row = led.attempt(a)
    assert (row["status"], row["number"], row["fencing_token"], row["worker_id"],
            row["ack_deadline_ms"], row["not_before_ms"], row["unacked_releases"],
            row["release_reason"]) == ("pending", 1, None, None, None, T + 700, 1,
                                       "not acknowledged")
    o = led.occurrence(occ("j", T))
    assert (o["status"], o["attempts"]) == ("pending", 1)
    assert get_meta(led.conn, META_UNACKED_LEASES) == 1
    # The old leader's worker acknowledging late is fenced out, and starts nothing.
    assert led.hb(a, old, T + 800)["rejected"] == "stale_token"
    assert led.complete(a, old, T + 800)["rejected"] == "stale_token"
    again = ack_lease(led, a, T + 900, worker="w2")
    assert again["fencing_token"] > old and again["attempt"] == 1


def test_a_lease_of_the_sweeps_own_epoch_waits_for_its_deadline(led):
    a, _ = _leased_at_epoch_1(led)
    assert led.sweep([a], T + 700)["unacknowledged"] == []
    assert led.sweep([a], T + 3_000)["unacknowledged"] == []
    assert (led.attempt(a)["status"], led.attempt(a)["unacked_releases"]) == ("running", 0)
    assert led.sweep([a], T + 3_001)["unacknowledged"] == [a]


def test_an_acknowledged_lease_of_an_earlier_epoch_is_left_running(led):
    led.create("j", heartbeat_timeout_s=30)
    led.fire("j", T)
    a = att("j", T)
    tok = ack_lease(led, a, T)["fencing_token"]
    assert led.hb(a, tok, T + 100)["ok"]
    assert led.begin(2, now=T + 600)["ok"]
    assert led.sweep([a], T + 700) == {"ok": True, "lost": [], "timed_out": [],
                                       "unacknowledged": []}
    row = led.attempt(a)
    assert (row["status"], row["fencing_token"], row["unacked_releases"]) == ("running", tok, 0)
    assert led.hb(a, tok, T + 800)["ok"]
    assert led.sweep([a], T + 30_801)["lost"] == [a]  # its heartbeat timeout, as before


@pytest.mark.parametrize("level", [None, BASE_LEVEL])
def test_below_the_level_a_lease_of_an_earlier_epoch_waits_for_its_deadline(tmp_path, level):
    """A level-1 build waits for the deadline: so must every member until level 2."""
    assert RELEASE_PREVIOUS_EPOCH_LEVEL > BASE_LEVEL
    n = Node(tmp_path / "old.db", level=level)
    assert n.begin(1)["ok"]
    a, tok = _leased_at_epoch_1(n)
    assert n.begin(2, now=T + 600)["ok"]
    assert n.sweep([a], T + 700)["unacknowledged"] == []
    row = n.attempt(a)
    assert (row["status"], row["fencing_token"], row["unacked_releases"]) == ("running", tok, 0)
    assert n.sweep([a], T + 3_001)["unacknowledged"] == [a]
    n.conn.close()


def test_a_run_leased_ahead_and_released_this_way_stays_due_at_its_instant(led):
    led.create("j", ack_timeout_s=3)
    led.fire("j", T, now=T - 10_000)
    a = att("j", T)
    ack_lease(led, a, T - 5_000, ahead_ms=6_000)
    assert led.begin(2, now=T - 4_500)["ok"]
    assert led.sweep([a], T - 4_000)["unacknowledged"] == [a]  # 1 s before its deadline
    assert (led.attempt(a)["status"], led.attempt(a)["not_before_ms"]) == ("pending", T)
    assert led.lease([a], T - 3_900, worker="w2")["leases"] == []


class _Applying:
    """A proposer that applies each Sweep to `node` at once (the sweeper reads the same
    database), recording what it proposed."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.proposed: list[list[str]] = []

    async def propose_leader(self, cmd: c.Sweep) -> dict:
        self.proposed.append(list(cmd.attempt_ids))
        return self.node.apply(cmd)


def _sweeper(n: Node, epoch: int, now: int, level: int = PROTOCOL_LEVEL) -> Sweeper:
    s = Sweeper(epoch, _Applying(n), lambda: open_reader(n.path),  # type: ignore[arg-type]
                clock=lambda: now)
    s.level = lambda: level
    return s


def _candidates(s: Sweeper, n: Node, now: int) -> list[str]:
    reader = open_reader(n.path)
    try:
        return s._candidates(reader, now)[0]
    finally:
        reader.close()


def test_the_sweeper_finds_an_earlier_epochs_unacknowledged_lease_at_once(led):
    led.create("k", heartbeat_timeout_s=30)  # acknowledged: never a candidate early
    a, _ = _leased_at_epoch_1(led)
    led.fire("k", T)
    k = att("k", T)
    assert led.hb(k, ack_lease(led, k, T)["fencing_token"], T + 100)["ok"]
    assert _candidates(_sweeper(led, 1, T + 700), led, T + 700) == []
    assert _candidates(_sweeper(led, 2, T + 700), led, T + 700) == [a]
    # ... but not while the cluster's level is below the one apply releases them at.
    assert _candidates(_sweeper(led, 2, T + 700, level=BASE_LEVEL), led, T + 700) == []
    assert led.begin(2, now=T + 600)["ok"]
    s = _sweeper(led, 2, T + 700)
    reader = open_reader(led.path)
    try:
        assert asyncio.run(s.sweep_once(reader)) == [a]
    finally:
        reader.close()
    assert led.attempt(a)["status"] == "pending"


def test_the_sweeper_does_not_propose_a_lease_the_apply_keeps_again(tmp_path):
    """A node whose memory of the level is ahead of a state's (it cannot be, by
    construction: it only lags) would otherwise propose the same ids every half second."""
    n = Node(tmp_path / "old.db", level=BASE_LEVEL)
    assert n.begin(1)["ok"]
    a, _ = _leased_at_epoch_1(n)
    assert n.begin(2, now=T + 600)["ok"]
    s = _sweeper(n, 2, T + 700, level=PROTOCOL_LEVEL)
    reader = open_reader(n.path)
    try:
        assert asyncio.run(s.sweep_once(reader)) == [a]
        assert n.attempt(a)["status"] == "running"
        assert asyncio.run(s.sweep_once(reader)) == []
        assert s.proposer.proposed == [[a]]  # type: ignore[attr-defined]
        s.clock = lambda: T + 3_001  # its deadline passed: proposed, and released
        assert asyncio.run(s.sweep_once(reader)) == [a]
        assert n.attempt(a)["status"] == "pending"
    finally:
        reader.close()
    n.conn.close()
