"""Dispatch ahead on the state machine and the dispatcher (issue 18 §4): a run due within
the horizon is leased before its instant with the instant it may start; everything else
about leases (tokens, acknowledgement, deadlines, exclusive jobs, the clock gate) holds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from raftcron.core import ahead
from raftcron.core import commands as c
from raftcron.core.model import parse_job
from raftcron.core.protocol import PROTOCOL_LEVEL
from raftcron.leader.dispatch import HERD_RECOUNT_MS, Dispatcher
from raftcron.state.db import open_reader, open_writer
from raftcron.state.machine import StateMachine
from tests.integration.test_dispatch_herd import T, _CommitAtOnce, cluster_state
from tests.integration.test_machine import MIN, T0, Node, att, occ

T1 = T0 + MIN


def lease_ahead(n: Node, ids: list[str], now: int, ahead_ms: int = 2_000,
                worker: str = "w1") -> dict:
    return n.apply(c.Lease(n.epoch, now, worker, ids, True, ahead_ms))


def test_a_run_due_within_the_horizon_is_leased_now_and_starts_at_its_instant(led):
    led.create("j", max_runtime_s=60, heartbeat_timeout_s=30, ack_timeout_s=3)
    led.fire("j", T1, now=T1 - 5_000)
    a = att("j", T1)
    r = lease_ahead(led, [a], T1 - 1_500)
    assert r["ok"] and len(r["leases"]) == 1, r
    got = r["leases"][0]
    assert got["start_at_ms"] == T1
    row = led.attempt(a)
    # Leased (and its acknowledgement due) from now; heartbeat and runtime from the instant.
    assert (row["status"], row["leased_ms"], row["ack_deadline_ms"], row["lease_expires_ms"],
            row["runtime_deadline_ms"]) == ("running", T1 - 1_500, T1 - 1_500 + 3_000,
                                            T1 + 30_000, T1 + 60_000)


def test_a_run_beyond_the_horizon_is_not_leased(led):
    led.create("j")
    led.fire("j", T1, now=T1 - 5_000)
    assert lease_ahead(led, [att("j", T1)], T1 - 2_001)["leases"] == []
    assert led.attempt(att("j", T1))["status"] == "pending"
    # Without ahead_ms (every entry written before the field existed): not before T.
    old = led.apply(c.Lease(led.epoch, T1 - 1, "w1", [att("j", T1)], True))
    assert old["leases"] == []


def test_an_old_lease_entry_decodes_without_ahead_and_behaves_as_before(led):
    led.create("j")
    led.fire("j", T1, now=T1 - 5_000)
    raw = json.dumps({"v": c.CODEC_VERSION, "t": "lease", "a": {
        "epoch": led.epoch, "now_ms": T1, "worker_id": "w1",
        "attempt_ids": [att("j", T1)]}}).encode()
    cmd = c.decode(raw)
    assert isinstance(cmd, c.Lease) and cmd.ahead_ms == 0 and cmd.acknowledge is False
    got = led.apply(cmd)["leases"][0]
    assert "start_at_ms" not in got
    row = led.attempt(att("j", T1))
    assert (row["leased_ms"], row["lease_expires_ms"]) == (T1, T1 + 30_000)
    hb = c.decode(json.dumps({"v": c.CODEC_VERSION, "t": "heartbeat", "a": {
        "now_ms": T1 + 1, "worker_id": "w1",
        "attempts": [[att("j", T1), got["fencing_token"]]]}}).encode())
    assert isinstance(hb, c.Heartbeat) and hb.before_start is False


def test_an_already_due_run_leased_ahead_starts_now(led):
    led.create("j")
    led.fire("j", T1, now=T1 - 5_000)
    got = lease_ahead(led, [att("j", T1)], T1 + 400)["leases"][0]
    # The run's own instant (a leader whose clock jumped must not name its "now").
    assert got["start_at_ms"] == T1
    assert led.attempt(att("j", T1))["lease_expires_ms"] == T1 + 400 + 30_000


def test_a_paused_jobs_run_is_not_leased_ahead_but_a_due_one_is(led):
    led.create("p")
    led.fire("p", T1, now=T1 - 5_000)
    assert led.apply(c.PauseJob(led.rid(), T1 - 4_000, "p"))["ok"]
    assert lease_ahead(led, [att("p", T1)], T1 - 1_000)["leases"] == []
    # Once due it goes as it always did (a claimed run of a paused job is not skipped).
    assert len(lease_ahead(led, [att("p", T1)], T1)["leases"]) == 1


def test_a_job_paused_after_the_ahead_lease_skips_the_run_at_the_check_before_start(led):
    led.create("j")
    led.fire("j", T1, now=T1 - 5_000)
    a = att("j", T1)
    tok = lease_ahead(led, [a], T1 - 1_500)["leases"][0]["fencing_token"]
    assert led.hb(a, tok, T1 - 1_400)["ok"]  # the acknowledgement, on receipt
    assert led.apply(c.PauseJob(led.rid(), T1 - 1_000, "j"))["ok"]
    # An ordinary heartbeat still extends it; the check before the start skips it.
    assert led.hb(a, tok, T1 - 900)["ok"]
    r = led.apply(c.Heartbeat(T1 - 300, "w1", [[a, tok]], None, True))["results"][0]
    assert (r["ok"], r["rejected"]) == (False, "lease_expired")
    row, o = led.attempt(a), led.occurrence(occ("j", T1))
    assert (row["status"], o["status"], o["reason"]) == ("cancelled", "skipped", "paused")
    # Nothing left to complete or lease.
    assert led.complete(a, tok, T1 + 10)["ok"] is False


def test_the_check_before_start_of_a_running_job_extends_the_lease(led):
    led.create("j")
    led.fire("j", T1, now=T1 - 5_000)
    a = att("j", T1)
    tok = lease_ahead(led, [a], T1 - 1_500)["leases"][0]["fencing_token"]
    r = led.apply(c.Heartbeat(T1 - 300, "w1", [[a, tok]], None, True))["results"][0]
    assert r == {"attempt_id": a, "ok": True, "cancel": False}
    assert led.attempt(a)["status"] == "running"


def test_a_run_cancelled_after_the_ahead_lease_is_answered_cancel(led):
    """Deleting the job asks its running attempts to stop: the check says cancel."""
    led.create("j")
    led.fire("j", T1, now=T1 - 5_000)
    a = att("j", T1)
    tok = lease_ahead(led, [a], T1 - 1_500)["leases"][0]["fencing_token"]
    assert led.apply(c.DeleteJob(led.rid(), T1 - 1_000, "j"))["ok"]
    r = led.apply(c.Heartbeat(T1 - 300, "w1", [[a, tok]], None, True))["results"][0]
    assert r["ok"] and r["cancel"] is True


def test_the_check_before_start_from_another_worker_is_refused(led):
    led.create("j")
    led.fire("j", T1, now=T1 - 5_000)
    a = att("j", T1)
    tok = lease_ahead(led, [a], T1 - 1_500)["leases"][0]["fencing_token"]
    assert led.apply(c.PauseJob(led.rid(), T1 - 1_000, "j"))["ok"]
    r = led.apply(c.Heartbeat(T1 - 300, "w2", [[a, tok]], None, True))["results"][0]
    assert r["rejected"] == "foreign_lease"
    r = led.apply(c.Heartbeat(T1 - 300, "w1", [[a, tok]], ["other"], True))["results"][0]
    assert r["rejected"] == "forbidden"
    assert led.attempt(a)["status"] == "running"  # neither skipped it


def test_an_exclusive_job_holds_its_next_run_while_one_is_leased_ahead(led):
    """`forbid` counts a run leased ahead as running: the next instant is an overlap."""
    led.create("x", overlap_policy="forbid")
    led.fire("x", T1, now=T1 - 5_000)
    assert len(lease_ahead(led, [att("x", T1)], T1 - 1_500)["leases"]) == 1
    led.fire("x", T1 + 1_000, now=T1 - 1_000)
    o = led.occurrence(occ("x", T1 + 1_000))
    assert (o["status"], o["reason"]) == ("skipped", "overlap")


def test_ahead_leases_keep_fencing_tokens_strictly_increasing(led):
    led.create("j")
    led.fire("j", T1, now=T1 - 5_000)
    led.fire("j", T1 + 1_000, now=T1 - 5_000)
    first = lease_ahead(led, [att("j", T1)], T1 - 1_000)["leases"][0]["fencing_token"]
    second = lease_ahead(led, [att("j", T1 + 1_000)], T1 - 900)["leases"][0]["fencing_token"]
    plain = led.lease([att("j", T1 + 1_000)], T1 + 1_000)
    assert second > first and plain == {"ok": True, "leases": [], "held_jobs": [],
                                        "held_tenants": [], "held_groups": []}


# --- the dispatcher --------------------------------------------------------------------------

def _dispatcher(db: Path, now: int, ahead_ms: int = 2_000) -> tuple[Dispatcher, _CommitAtOnce]:
    proposer = _CommitAtOnce()
    d = Dispatcher(1, proposer=proposer,  # type: ignore[arg-type]
                   open_reader=lambda: open_reader(str(db)), clock=lambda: now,
                   ahead_ms=ahead_ms)
    d.level = lambda: PROTOCOL_LEVEL  # a cluster of this build (as the node sets it)
    return d, proposer


def test_the_dispatcher_leases_ahead_only_for_a_worker_that_asks(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    cluster_state(db, 0, 3)
    d, proposer = _dispatcher(db, T - 1_500)
    got = asyncio.run(d.lease("w", ["few"], 10, 0, ahead=True))
    assert len(got) == 3
    cmd = proposer.commands[0]
    assert (cmd.now_ms, cmd.ahead_ms) == (T - 1_500, 2_000)  # stamped now, not at T
    d.close()
    # A worker that does not ask gets nothing 1.5 s before T (and waits no longer here).
    d, proposer = _dispatcher(db, T - 1_500)
    assert asyncio.run(d.lease("w", ["few"], 10, 0)) == []
    assert proposer.commands == []
    d.close()


def test_the_dispatcher_leases_nothing_ahead_beyond_the_horizon_or_when_off(
        tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    cluster_state(db, 0, 3)
    d, proposer = _dispatcher(db, T - 2_500)
    assert d._select_ahead(["few"], 10, T - 2_500) == ([], 0, T - 2_000)
    d.close()
    d, proposer = _dispatcher(db, T - 1_000, ahead_ms=0)
    assert asyncio.run(d.lease("w", ["few"], 10, 0, ahead=True)) == []
    assert proposer.commands == []
    d.close()


def test_no_lease_ahead_or_not_while_the_leaders_clock_is_unconfirmed(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    cluster_state(db, 0, 3)
    for now in (T - 1_000, T + 1_000):  # ahead, and already due
        d, proposer = _dispatcher(db, now)
        d.gate = lambda: False
        assert asyncio.run(d.lease("w", ["few"], 10, 0, ahead=True)) == []
        assert asyncio.run(d.lease("w", ["few"], 10, 0, ahead=False)) == []
        assert proposer.commands == []
        d.close()


def test_a_herd_is_leased_ahead_from_the_herd_horizon(tmp_path: Path) -> None:
    """33,000 runs take seconds to lease: a herd starts going at `herd_ahead_ms`, single
    runs at `ahead_ms`; both come with the lead they were chosen with."""
    from raftcron.leader.dispatch import HERD_SIZE

    db = tmp_path / "s.db"
    cluster_state(db, HERD_SIZE, 3)
    d, proposer = _dispatcher(db, T - 5_000)
    d.herd_ahead_ms = d.herd_max_ms = 6_000
    assert d._select_ahead(["few"], 10, T - 5_000) == ([], 0, T - 2_000)
    ids, lead, _ = d._select_ahead(["herd"], 1000, T - 5_000)
    assert (len(ids), lead) == (1000, 6_000)
    assert d._select_ahead(["herd"], 1000, T - 6_500) == ([], 0, T - 6_000)
    got = asyncio.run(d.lease("w", ["herd"], 1000, 0, ahead=True))
    assert len(got) == 1000 and proposer.commands[0].ahead_ms == 6_000
    d.close()


def _herd_claimed_in_two_parts(path: Path, first: int, rest: int) -> StateMachine:
    """`first + rest` jobs of queue `herd` due at T, only the first `first` claimed yet."""
    m = StateMachine(open_writer(str(path)))
    m.apply(1, c.BeginEpoch(1, "n1", T0))
    specs = [parse_job({"id": f"h{i:05d}", "queue": "herd", "schedule": {"cron": "0 0 1 1 *"},
                        "target": {"shell": "true"}}).to_spec() for i in range(first + rest)]
    assert m.apply(2, c.CreateJobs("r", T0, specs))["created"] == first + rest
    assert m.apply(3, c.Claim(1, T0 + 1, [[s["id"], 1, T, T, "fire"]
                                          for s in specs[:first]]))["rejected_items"] == []
    m.claim_rest = [[s["id"], 1, T, T, "fire"] for s in specs[first:]]  # type: ignore[attr-defined]
    return m


def test_a_herd_too_large_for_its_lead_goes_as_far_ahead_as_leasing_it_takes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At HERD_LEASES_PER_S (100 a second here) 1,000 runs take 10 s to lease: with
    lease_ahead_herd_max_s they go 10 s ahead, not at the configured 6 s. While the claims
    come in, the herd is counted again every HERD_RECOUNT_MS (the poll is told to look
    again then); once its leasing began it keeps its lead, however few runs are left."""
    monkeypatch.setattr(ahead, "HERD_LEASES_PER_S", 100)
    db = tmp_path / "s.db"
    m = _herd_claimed_in_two_parts(db, 100, 900)
    d, _ = _dispatcher(db, T - 30_000)
    d.herd_ahead_ms, d.herd_max_ms, d.herd_size = 6_000, 60_000, 100
    start = T - 30_000
    # 100 claimed: 1 s of leasing, so the configured 6 s; look again at the recount.
    assert d._select_ahead(["herd"], 1000, start) == ([], 0, start + HERD_RECOUNT_MS)
    assert m.apply(4, c.Claim(1, T0 + 2, m.claim_rest))["rejected_items"] == []  # type: ignore[attr-defined]
    # Not counted again before HERD_RECOUNT_MS ...
    now = start + HERD_RECOUNT_MS - 1
    assert d._select_ahead(["herd"], 1000, now) == ([], 0, start + HERD_RECOUNT_MS)
    # ... and then: 1,000 runs, 10 s.
    now += 1
    assert d._select_ahead(["herd"], 1000, now) == ([], 0, now + HERD_RECOUNT_MS)
    assert d._herd_lead(["herd"], T, now)[0] == 10_000
    ids, lead, _ = d._select_ahead(["herd"], 400, T - 10_000)
    assert (len(ids), lead) == (400, 10_000)
    # 600 left would need 6 s: leasing began with 10 s, and keeps it.
    marks = ",".join("?" * len(ids))
    m.conn.execute(f"UPDATE attempts SET status = 'running' WHERE id IN ({marks})", ids)
    m.conn.commit()
    ids, lead, _ = d._select_ahead(["herd"], 1000, T - 9_000)
    assert (len(ids), lead) == (600, 10_000)
    d.close()
    m.conn.close()


def test_by_default_a_large_herd_goes_no_further_than_its_configured_lead(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without lease_ahead_herd_max_s, 1,000 runs that would take 10 s to lease still go
    at the configured 6 s: a worker holds runs leased ahead in its slots' place."""
    monkeypatch.setattr(ahead, "HERD_LEASES_PER_S", 100)
    db = tmp_path / "s.db"
    cluster_state(db, 1000, 0)
    d, _ = _dispatcher(db, T - 8_000)
    d.herd_ahead_ms, d.herd_max_ms = 6_000, 6_000
    assert d._select_ahead(["herd"], 1000, T - 8_000) == ([], 0, T - 6_000)
    ids, lead, _ = d._select_ahead(["herd"], 1000, T - 6_000)
    assert (len(ids), lead) == (1000, 6_000)
    d.close()


def test_a_count_that_found_no_herd_is_not_kept(tmp_path: Path) -> None:
    """The herd's first claim commits just after a count found too few runs: the next
    poll counts again at once and finds the herd."""
    db = tmp_path / "s.db"
    m = _herd_claimed_in_two_parts(db, 50, 950)
    d, _ = _dispatcher(db, T - 8_000)
    d.herd_ahead_ms, d.herd_max_ms, d.herd_size = 6_000, 6_000, 100
    assert d._select_ahead(["herd"], 1000, T - 6_000) == ([], 0, T - 2_000)  # 50: no herd
    assert m.apply(4, c.Claim(1, T0 + 2, m.claim_rest))["rejected_items"] == []  # type: ignore[attr-defined]
    ids, lead, _ = d._select_ahead(["herd"], 1000, T - 6_000)
    assert (len(ids), lead) == (1000, 6_000)
    d.close()
    m.conn.close()


def test_a_herd_lease_applies_with_its_lead(led):
    led.create("j")
    led.fire("j", T1, now=T1 - 10_000)
    got = lease_ahead(led, [att("j", T1)], T1 - 5_500, ahead_ms=6_000)["leases"]
    assert [g["start_at_ms"] for g in got] == [T1]


# --- a run handed back before its instant keeps it -------------------------------------------

def test_a_run_released_before_its_instant_is_due_at_its_instant_again(led):
    """A worker hands back a run it leased ahead (its clock stepped during the poll, it is
    stopping, or its poll's node died and the leader released the answer nobody read): the
    run is due at its instant still, not at the moment it was handed back: due at once,
    the next poll would be handed it at once and start it up to lease_ahead_s early."""
    led.create("j")
    led.fire("j", T1, now=T1 - 5_000)
    a = att("j", T1)
    tok = lease_ahead(led, [a], T1 - 1_500)["leases"][0]["fencing_token"]
    assert led.release(a, tok, T1 - 1_400)["ok"]
    assert (led.attempt(a)["status"], led.attempt(a)["not_before_ms"]) == ("pending", T1)
    # Not handed out before its instant to a worker that starts what it gets at once ...
    assert led.lease([a], T1 - 1_300, worker="w2")["leases"] == []
    # ... and leased ahead again, it names its own instant, not the release's.
    again = lease_ahead(led, [a], T1 - 1_200, worker="w2")["leases"]
    assert [lease["start_at_ms"] for lease in again] == [T1]


def test_a_run_released_unacknowledged_before_its_instant_keeps_it(led):
    """A herd is leased seconds ahead (6 s here) and an unacknowledged lease is released 3 s
    after it was handed out (ack_timeout_s), so before the instant."""
    led.create("j", ack_timeout_s=3)
    led.fire("j", T1, now=T1 - 10_000)
    a = att("j", T1)
    assert len(lease_ahead(led, [a], T1 - 6_000, ahead_ms=6_000)["leases"]) == 1
    assert led.sweep([a], T1 - 2_900)["unacknowledged"] == [a]
    assert (led.attempt(a)["status"], led.attempt(a)["not_before_ms"]) == ("pending", T1)
    assert led.lease([a], T1 - 2_800, worker="w2")["leases"] == []


def test_a_run_released_after_its_instant_is_due_from_the_release(led):
    led.create("j")
    led.fire("j", T1, now=T1 - 5_000)
    a = att("j", T1)
    tok = lease_ahead(led, [a], T1 - 1_500)["leases"][0]["fencing_token"]
    assert led.release(a, tok, T1 + 700)["ok"]
    assert led.attempt(a)["not_before_ms"] == T1 + 700


def test_below_level_2_a_release_makes_the_run_due_at_the_release_as_before(tmp_path):
    """A level-1 build sets the released run due at the release's time: until the cluster
    is at level 2 every member must do the same (no run is leased ahead there; an at-instant
    lease released by a stamp that lags the instant is the one case that differs)."""
    n = Node(tmp_path / "old.db", level=None)
    assert n.begin(1)["ok"]
    n.create("j")
    n.fire("j", T1, now=T1 - 5_000)
    a = att("j", T1)
    tok = n.lease([a], T1)["leases"][0]["fencing_token"]
    assert n.release(a, tok, T1 - 40)["ok"]
    assert n.attempt(a)["not_before_ms"] == T1 - 40
    n.conn.close()


class _Applying:
    """A proposer that applies each Lease to `node` at once (the dispatcher reads the same
    database)."""

    def __init__(self, node: Node) -> None:
        self.node = node

    async def propose_leader(self, cmd: c.Lease) -> dict:
        return self.node.apply(cmd)


def test_the_dispatcher_hands_a_run_released_ahead_out_only_at_its_instant(led, tmp_path):
    led.create("j")
    led.fire("j", T1, now=T1 - 5_000)
    a = att("j", T1)
    tok = lease_ahead(led, [a], T1 - 1_500)["leases"][0]["fencing_token"]
    assert led.release(a, tok, T1 - 1_400)["ok"]
    d = Dispatcher(led.epoch, proposer=_Applying(led),  # type: ignore[arg-type]
                   open_reader=lambda: open_reader(led.path), clock=lambda: T1 - 1_300,
                   ahead_ms=2_000)
    d.level = lambda: PROTOCOL_LEVEL
    # A worker that starts what it gets at once is handed nothing 1.3 s before T ...
    assert asyncio.run(d.lease("w2", ["default"], 10, 0)) == []
    # ... and one that asks ahead is told to start at T.
    got = asyncio.run(d.lease("w2", ["default"], 10, 0, ahead=True))
    assert [(lease["attempt_id"], lease["start_at_ms"]) for lease in got] == [(a, T1)]
    d.close()


def test_a_heartbeat_after_its_instant_extends_a_lease_from_the_beat_not_by_the_lead(led):
    """Leased 40 s ahead with a 30 s heartbeat timeout: the lease runs to the instant +
    30 s; a heartbeat 5 s after the instant extends it to the beat + 30 s, not + 70 s."""
    led.create("j", heartbeat_timeout_s=30)
    led.fire("j", T1, now=T1 - 50_000)
    a = att("j", T1)
    got = lease_ahead(led, [a], T1 - 40_000, ahead_ms=40_000)["leases"][0]
    assert led.attempt(a)["lease_expires_ms"] == T1 + 30_000
    led.hb(a, got["fencing_token"], T1 - 39_000)  # acknowledged at once: nothing moves
    assert led.attempt(a)["lease_expires_ms"] == T1 + 30_000
    led.hb(a, got["fencing_token"], T1 + 5_000)
    assert led.attempt(a)["lease_expires_ms"] == T1 + 35_000
    led.hb(a, got["fencing_token"], T1 + 20_000)
    assert led.attempt(a)["lease_expires_ms"] == T1 + 50_000
