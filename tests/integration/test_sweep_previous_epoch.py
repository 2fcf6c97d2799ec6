"""A new leader releases the unacknowledged leases of an earlier epoch from its first sweep,
before their acknowledgement deadline (a leader killed between committing a lease and
answering the poll never delivered it): runs due around a failover need not wait out the
ack timeout. From protocol level 2 on (RELEASE_PREVIOUS_EPOCH_LEVEL)."""

from __future__ import annotations

import pytest

from raftcron.core import commands as c
from raftcron.core.protocol import BASE_LEVEL, RELEASE_PREVIOUS_EPOCH_LEVEL
from raftcron.state.db import META_UNACKED_LEASES, get_meta
from tests.integration.test_machine import MIN, T0, Node, att, occ

T = T0 + MIN


def ack_lease(n: Node, attempt_id: str, now: int, worker: str = "w1",
              ahead_ms: int = 0) -> dict:
    r = n.apply(c.Lease(n.epoch, now, worker, [attempt_id], True, ahead_ms))
    assert r["ok"] and len(r["leases"]) == 1, r
    return r["leases"][0]


@pytest.fixture
def led(tmp_path):
    n = Node(tmp_path / "state.db")
    assert n.begin(1)["ok"]
    yield n
    n.conn.close()


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
