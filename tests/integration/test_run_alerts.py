"""Run bounds and the cluster-availability cause, on the state machine over real SQLite
(commands applied directly; the leader duties' planning read from the same database)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raftcron.core import commands as c
from raftcron.core import identity
from raftcron.core.protocol import PROTOCOL_LEVEL
from raftcron.leader.deadlines import Deadlines
from raftcron.leader.run_bounds import RunBounds
from raftcron.state.db import open_reader
from tests.integration.test_machine import MIN, T0, Node

SEC = 1000


def occ(job_id: str, at: int) -> str:
    return identity.scheduled_occurrence_id(job_id, at)


def att(job_id: str, at: int, n: int = 1) -> str:
    return identity.attempt_id(occ(job_id, at), n)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path / "state.db")
    n.begin(1)
    return n


def run(node: Node, job_id: str, at: int, took_s: float, outcome: str = "succeeded") -> None:
    """Fire the instant `at`, lease it at `at`, complete it `took_s` later."""
    node.fire(job_id, at)
    lease = node.lease([att(job_id, at)], at)["leases"][0]
    r = node.complete(lease["attempt_id"], lease["fencing_token"], at + int(took_s * SEC),
                      outcome, 0 if outcome == "succeeded" else 1)
    assert r["ok"], r


def alerts(node: Node) -> list[tuple]:
    return node.q("SELECT id, kind, reason, status, cause FROM alerts ORDER BY raised_ms, id")


def events(node: Node, alert_id: str) -> list[str]:
    return [e for (e,) in node.q("SELECT event FROM alert_events WHERE alert_id = ? ORDER BY id",
                                 alert_id)]


def outbox(node: Node) -> list[dict]:
    return [json.loads(p) | {"event": e} for e, p in node.q(
        "SELECT event, payload FROM outbox WHERE event LIKE 'alert.%' ORDER BY id")]


def plan(node: Node, duty: Deadlines | RunBounds, now: int) -> list[c.Command]:
    conn = open_reader(node.path)
    try:
        if isinstance(duty, Deadlines):
            commands = []
            for bound in ("deadline", "not_started"):
                from raftcron.leader import deadlines as d
                b = d.SUCCESS if bound == "deadline" else d.START
                cmds, cursors = duty._plan(conn, now, b)
                commands += cmds
                duty.cursors[b.kind].update(cursors)
        else:
            commands = duty.plan(conn, now)
    finally:
        conn.close()
    for cmd in commands:
        assert node.apply(cmd)["ok"]
    return commands


# --- too_fast ------------------------------------------------------------------------------

def test_quick_success_raises_too_fast_and_a_proper_run_resolves_it(node: Node) -> None:
    node.create("j", now=T0, min_duration_s=5)
    run(node, "j", T0 + MIN, 1.2)
    assert alerts(node) == [(f"too_fast:{occ('j', T0 + MIN)}", "too_fast", "too_fast", "open",
                             None)]
    raised = outbox(node)
    assert [o["event"] for o in raised] == ["alert.raised"]
    assert raised[0]["message"] == "succeeded after 1.2 s; min_duration_s is 5"
    run(node, "j", T0 + 2 * MIN, 4.9)
    assert [a[3] for a in alerts(node)] == ["open", "open"], "4.9 s is still too fast"
    run(node, "j", T0 + 3 * MIN, 5.0)
    assert [a[3] for a in alerts(node)] == ["resolved", "resolved"]


def test_without_min_duration_a_quick_success_raises_nothing(node: Node) -> None:
    node.create("j", now=T0)
    run(node, "j", T0 + MIN, 0.1)
    assert alerts(node) == []


# --- failure threshold ---------------------------------------------------------------------

def test_threshold_raises_once_per_streak_and_a_success_resolves_and_rearms(node: Node) -> None:
    node.create("j", now=T0, max_attempts=1, alert_after_failures=3)
    for i in (1, 2):
        run(node, "j", T0 + i * MIN, 1, "failed")
    assert alerts(node) == []
    run(node, "j", T0 + 3 * MIN, 1, "failed")
    assert alerts(node) == [("failures:j", "failures", "consecutive_failures", "open", None)]
    assert outbox(node)[0]["message"] == "3 consecutive failures; the last: exit code 1"
    assert outbox(node)[0]["occurrence_id"] == occ("j", T0 + 3 * MIN)
    run(node, "j", T0 + 4 * MIN, 1, "failed")
    assert events(node, "failures:j") == ["raised"], "one alert per streak, not per failure"
    run(node, "j", T0 + 5 * MIN, 1)
    assert alerts(node)[0][3] == "resolved"
    assert node.q("SELECT * FROM failure_streaks") == []
    for i in (6, 7):
        run(node, "j", T0 + i * MIN, 1, "failed")
    assert alerts(node)[0][3] == "resolved", "re-armed: a new streak needs 3 again"
    run(node, "j", T0 + 8 * MIN, 1, "failed")
    assert alerts(node)[0][3] == "open"
    assert events(node, "failures:j") == ["raised", "resolved", "raised"]


def test_resolved_by_hand_mid_streak_is_not_raised_again_by_that_streak(node: Node) -> None:
    node.create("j", now=T0, max_attempts=1, alert_after_failures=2)
    for i in (1, 2):
        run(node, "j", T0 + i * MIN, 1, "failed")
    assert node.apply(c.AlertAction("r-x", T0 + 3 * MIN, "failures:j", "resolve", "ops",
                                    "fixing it"))["ok"]
    run(node, "j", T0 + 4 * MIN, 1, "failed")
    assert alerts(node)[0][3] == "resolved"


def test_retries_that_end_in_success_are_not_failures(node: Node) -> None:
    """Only occurrences that end failed (no retry left) count."""
    node.create("j", now=T0, max_attempts=2, alert_after_failures=1)
    at = T0 + MIN
    node.fire("j", at)
    first = node.lease([att("j", at)], at)["leases"][0]
    node.complete(first["attempt_id"], first["fencing_token"], at + SEC, "failed", 1)
    assert alerts(node) == [] and node.q("SELECT * FROM failure_streaks") == []
    second = node.lease([att("j", at, 2)], at + MIN)["leases"][0]
    node.complete(second["attempt_id"], second["fencing_token"], at + MIN + SEC, "failed", 1)
    assert [a[0] for a in alerts(node)] == ["failures:j"]


def test_threshold_replaces_the_per_failure_deadline_alert(node: Node) -> None:
    node.create("plain", now=T0, max_attempts=1, deadline_s=10)
    node.create("streak", now=T0, max_attempts=1, deadline_s=10, alert_after_failures=3)
    at = T0 + MIN
    run(node, "plain", at, 1, "failed")
    run(node, "streak", at, 1, "failed")
    cmds = plan(node, deadlines(node), at + 11 * SEC)
    assert [(x.job_id, x.reason) for x in cmds] == [("plain", "failed")]  # type: ignore[attr-defined]


def test_deleting_the_job_forgets_its_streak(node: Node) -> None:
    node.create("j", now=T0, max_attempts=1, alert_after_failures=2)
    run(node, "j", T0 + MIN, 1, "failed")
    assert node.apply(c.DeleteJob(node.rid(), T0 + 2 * MIN, "j"))["ok"]
    assert node.q("SELECT * FROM failure_streaks") == []


# --- start deadline ------------------------------------------------------------------------

def deadlines(node: Node) -> Deadlines:
    duty = Deadlines(node.epoch, proposer=None, open_reader=None)  # type: ignore[arg-type]
    duty.level = lambda: PROTOCOL_LEVEL  # a cluster of this build (as the node sets it)
    return duty


def test_not_started_when_no_attempt_is_leased_by_the_start_deadline(node: Node) -> None:
    node.create("j", now=T0, start_deadline_s=30, deadline_s=600)
    at = T0 + MIN
    node.fire("j", at)
    dl = deadlines(node)
    assert plan(node, dl, at + 29 * SEC) == []
    cmds = plan(node, dl, at + 31 * SEC)
    assert [(x.alert_id, x.reason) for x in cmds] == [  # type: ignore[attr-defined]
        (f"not_started:{occ('j', at)}", "not_started")]
    assert plan(node, dl, at + 40 * SEC) == []
    node.lease([att("j", at)], at + 45 * SEC)
    cmds = plan(node, dl, at + 46 * SEC)
    assert [(x.TYPE, x.message) for x in cmds] == [  # type: ignore[attr-defined]
        ("resolve_alert", "an attempt started")]


def test_started_in_time_raises_nothing_and_a_late_start_is_raised_and_resolved(
        node: Node) -> None:
    node.create("ok", now=T0, start_deadline_s=10)
    node.create("late", now=T0, start_deadline_s=10)
    at = T0 + MIN
    node.fire("ok", at)
    node.fire("late", at)
    node.lease([att("ok", at)], at + 9 * SEC)
    node.lease([att("late", at)], at + 15 * SEC)
    cmds = plan(node, deadlines(node), at + 20 * SEC)
    assert [(x.TYPE, getattr(x, "job_id", None)) for x in cmds] == [
        ("raise_alert", "late"), ("resolve_alert", None)]
    assert cmds[0].message == "started 5.0 s after its start deadline"  # type: ignore[attr-defined]


def test_unclaimed_and_misfired_instants_never_started(node: Node) -> None:
    node.create("gap", now=T0, start_deadline_s=10)
    node.create("skip", now=T0, start_deadline_s=10)
    at = T0 + MIN
    node.fire("skip", at, decision="misfire")
    cmds = plan(node, deadlines(node), at + 11 * SEC)
    got = {(x.job_id, x.message) for x in cmds}  # type: ignore[attr-defined]
    assert got == {("gap", "the instant was not claimed by its start deadline"),
                   ("skip", "skipped by the misfire policy")}


# --- too_slow ------------------------------------------------------------------------------

def test_too_slow_is_raised_while_running_not_killed_and_resolved_when_it_ends(
        node: Node) -> None:
    node.create("j", now=T0, max_duration_s=60)
    at = T0 + MIN
    node.fire("j", at)
    lease = node.lease([att("j", at)], at)["leases"][0]
    bounds = RunBounds(node.epoch, None, None)  # type: ignore[arg-type]
    assert plan(node, bounds, at + 59 * SEC) == []
    cmds = plan(node, bounds, at + 61 * SEC)
    assert [(x.alert_id, x.reason) for x in cmds] == [  # type: ignore[attr-defined]
        (f"too_slow:{att('j', at)}", "too_slow")]
    assert plan(node, bounds, at + 62 * SEC) == []
    assert node.attempt(att("j", at))["status"] == "running", "a bound, not a kill"
    node.hb(lease["attempt_id"], lease["fencing_token"], at + 60 * SEC)
    assert node.sweep([att("j", at)], at + 62 * SEC)["timed_out"] == []
    node.hb(lease["attempt_id"], lease["fencing_token"], at + 80 * SEC)
    node.complete(lease["attempt_id"], lease["fencing_token"], at + 90 * SEC)
    cmds = plan(node, bounds, at + 91 * SEC)
    assert [(x.TYPE, x.message) for x in cmds] == [  # type: ignore[attr-defined]
        ("resolve_alert", "the run ended after 90 s (succeeded)")]


def test_run_alerts_of_a_deleted_job_are_resolved(node: Node) -> None:
    node.create("j", now=T0, max_attempts=1, alert_after_failures=1, min_duration_s=5)
    run(node, "j", T0 + MIN, 1, "failed")
    run(node, "j", T0 + 2 * MIN, 1)  # too fast; resolves the failures alert
    assert [a[3] for a in alerts(node)] == ["resolved", "open"]
    assert node.apply(c.DeleteJob(node.rid(), T0 + 3 * MIN, "j"))["ok"]
    cmds = plan(node, RunBounds(node.epoch, None, None), T0 + 3 * MIN)  # type: ignore[arg-type]
    assert [(x.TYPE, x.message) for x in cmds] == [  # type: ignore[attr-defined]
        ("resolve_alert", "the job was deleted")]


# --- availability and the cause ------------------------------------------------------------

def confirm(node: Node, now: int, max_gap: int = 2500, epoch: int | None = None) -> dict:
    return node.apply(c.ConfirmClock(node.epoch if epoch is None else epoch, now, max_gap))


def stretches(node: Node) -> list[tuple]:
    return node.q("SELECT epoch, from_ms, to_ms FROM cluster_availability ORDER BY id")


def test_confirmations_merge_into_stretches_and_a_gap_starts_a_new_one(node: Node) -> None:
    for s in range(0, 5):
        assert confirm(node, T0 + s * SEC)["ok"]
    confirm(node, T0 + 3 * SEC)  # not after the end: proves nothing new
    confirm(node, T0 + 20 * SEC)
    confirm(node, T0 + 22 * SEC)
    assert stretches(node) == [(1, T0, T0 + 4 * SEC), (1, T0 + 20 * SEC, T0 + 22 * SEC)]
    assert node.begin(2)["ok"]
    confirm(node, T0 + 23 * SEC)
    assert stretches(node)[-1] == (2, T0 + 23 * SEC, T0 + 23 * SEC), "an epoch of its own"
    assert confirm(node, T0 + 24 * SEC, epoch=1)["rejected"] == "stale_epoch"


def test_a_confirmation_that_waited_for_its_commit_proves_no_availability(node: Node) -> None:
    """A majority paused: the confirmation stamped at 5 s committed only at 15 s, and the
    leader proposed its next one after that. The wait between them is a gap."""
    for s in range(0, 6):
        confirm(node, T0 + s * SEC)
    confirm(node, T0 + 16 * SEC)
    confirm(node, T0 + 17 * SEC)
    assert stretches(node) == [(1, T0, T0 + 5 * SEC), (1, T0 + 16 * SEC, T0 + 17 * SEC)]


def raise_deadline(node: Node, at: int, deadline: int, reason: str = "missed",
                   kind: str = "deadline", with_deadline: bool = True) -> tuple:
    aid = f"{kind}:{occ('j', at)}"
    assert node.apply(c.RaiseAlert(node.epoch, deadline + SEC, aid, kind, "j", occ("j", at),
                                   reason, at, "", deadline if with_deadline else None))["ok"]
    return node.one("SELECT cause FROM alerts WHERE id = ?", aid)


def test_an_instant_in_a_gap_is_blamed_on_the_cluster(node: Node) -> None:
    for s in range(0, 11):
        confirm(node, T0 + s * SEC)  # available from T0 through T0 + 10 s
    for s in range(40, 100):
        confirm(node, T0 + s * SEC)  # and from T0 + 40 s on
    covered, in_gap = T0 + 5 * SEC, T0 + 20 * SEC
    assert raise_deadline(node, covered, covered + 8 * SEC) == (None,), "down 3 s of 8"
    assert raise_deadline(node, in_gap, in_gap + 30 * SEC) == ("cluster_unavailable",)
    # Covered at the instant, but down for 30 of the 50 s until its deadline.
    at = T0 + 10 * SEC
    assert raise_deadline(node, at, at + 50 * SEC, kind="not_started",
                          reason="not_started") == ("cluster_unavailable",)
    # ... and for 30 of 70 s: less than half, the job's own.
    at = T0 + 9 * SEC
    assert raise_deadline(node, at, at + 70 * SEC) == (None,)
    payload = next(o for o in outbox(node) if o["alert_id"] == f"deadline:{occ('j', in_gap)}")
    assert payload["cause"] == "cluster_unavailable"


def test_failures_old_entries_and_unknown_times_carry_no_cause(node: Node) -> None:
    confirm(node, T0 + 100 * SEC)
    confirm(node, T0 + 300 * SEC)
    at = T0 + 200 * SEC  # in a gap
    assert raise_deadline(node, at, at + 10 * SEC, reason="failed") == (None,)
    assert raise_deadline(node, at + SEC, at + 11 * SEC, reason="running_too_long") == (None,)
    assert raise_deadline(node, at + MIN, at + MIN + 10 * SEC,
                          with_deadline=False) == (None,)
    assert raise_deadline(node, at + 2 * SEC, at + 12 * SEC) == ("cluster_unavailable",)
    before = T0 + 50 * SEC  # before availability was first recorded
    assert raise_deadline(node, before, before + 10 * SEC) == (None,)
    after = T0 + 310 * SEC  # after the newest confirmation: not known yet
    assert raise_deadline(node, after, after + 10 * SEC) == (None,)


def test_the_deadline_duty_hands_apply_the_deadline(node: Node) -> None:
    """End to end on the state: an unclaimed instant inside a gap gets the cause."""
    node.create("j", now=T0, deadline_s=30)
    confirm(node, T0 + 30 * SEC)
    at = T0 + MIN  # no confirmation near it: nobody could claim it
    for s in range(95, 100):
        confirm(node, T0 + s * SEC)
    cmds = plan(node, deadlines(node), at + 35 * SEC)
    assert [(x.reason, x.deadline_ms) for x in cmds] == [  # type: ignore[attr-defined]
        ("missed", at + 30 * SEC)]
    assert alerts(node)[0][4] == "cluster_unavailable"


def test_prune_keeps_recent_stretches(node: Node) -> None:
    confirm(node, T0)
    confirm(node, T0 + MIN)
    confirm(node, T0 + 2 * MIN)
    node.apply(c.Prune(node.rid(), T0 + 3 * MIN, before_ms=T0 + 1000))
    assert [s[1] for s in stretches(node)] == [T0 + MIN, T0 + 2 * MIN]
    node.apply(c.Prune(node.rid(), T0 + 3 * MIN, before_ms=T0 + 10 * MIN))
    assert [s[1] for s in stretches(node)] == [T0 + 2 * MIN], "the newest one stays"


# --- the leader's confirmations --------------------------------------------------------------

class FakeProposer:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.sent: list[c.Command] = []

    async def propose_leader(self, cmd: c.Command) -> dict:
        self.sent.append(cmd)
        return self.node.apply(cmd)


def test_a_leader_whose_clock_is_refused_confirms_nothing(node: Node) -> None:
    """The fail-closed gate: no confirmation without a confirmed clock, so the time it
    was refused is a gap; a refused proposal (a newer epoch) ends the duty."""
    import asyncio

    from raftcron.leader.availability import MAX_GAP_MS, ClockConfirmations
    from raftcron.leader.ticker import LostEpoch

    proposer = FakeProposer(node)
    now = [T0]
    duty = ClockConfirmations(node.epoch, proposer, clock=lambda: now[0])  # type: ignore[arg-type]
    duty.level = lambda: PROTOCOL_LEVEL
    refused = [False]
    duty.gate = lambda: not refused[0]

    async def scenario() -> None:
        for step in range(0, 30):
            refused[0] = 10 <= step < 20
            now[0] = T0 + step * SEC
            await duty.pass_once()
        node.begin(node.epoch + 1)
        with pytest.raises(LostEpoch):
            await duty.pass_once()

    asyncio.run(scenario())
    sent = [cmd.now_ms for cmd in proposer.sent]  # type: ignore[attr-defined]
    assert sent[:-1] == [T0 + s * SEC for s in (*range(0, 10), *range(20, 30))]
    assert all(cmd.max_gap_ms == MAX_GAP_MS for cmd in proposer.sent)  # type: ignore[attr-defined]
    assert stretches(node) == [(1, T0, T0 + 9 * SEC), (1, T0 + 20 * SEC, T0 + 29 * SEC)]
    assert duty.confirmed == 20


# --- a state from before run alerts ------------------------------------------------------------

def test_a_database_from_before_run_alerts_is_migrated_and_digests_as_before(
        tmp_path: Path) -> None:
    """The previous version's state (no `alerts.cause`, no availability or streak tables)
    opens, keeps its open alert, and digests like a node of that version until the new
    features write something (a rolling upgrade waits for equal digests)."""
    import sqlite3

    from raftcron.state.db import schema_sql
    from raftcron.state.digest import digest

    def previous_version(path: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.executescript(schema_sql())
        conn.execute("ALTER TABLE alerts DROP COLUMN cause")
        conn.execute("DROP TABLE cluster_availability")
        conn.execute("DROP TABLE failure_streaks")
        conn.execute("INSERT INTO alerts (id, kind, job_id, occurrence_id, reason, status, "
                     "raised_ms) VALUES ('deadline:j@x', 'deadline', 'j', 'j@x', 'missed', "
                     "'open', 5)")
        return conn

    previous_version(tmp_path / "old.db").close()
    upgraded = Node(tmp_path / "old.db", level=None)  # opened as every node opens its state
    assert upgraded.q("SELECT id, status, cause FROM alerts") == [
        ("deadline:j@x", "open", None)]
    assert upgraded.digest() == digest(previous_version(tmp_path / "previous.db"))
    upgraded.begin(1)
    upgraded.create("plain", now=T0, deadline_s=10)
    assert "start_deadline_s" not in upgraded.job_spec("plain"), "stored as before"
    assert upgraded.apply(c.ResolveAlert(1, T0, "deadline:j@x", "done"))["resolved"]
    # An upgraded state is at protocol level 1 until its cluster commits level 2.
    assert confirm(upgraded, T0 + SEC)["rejected"] == "cluster_not_upgraded"
    assert upgraded.apply(c.SetClusterLevel(1, T0 + SEC, 2))["raised"]
    confirm(upgraded, T0 + SEC)
    assert stretches(upgraded) == [(1, T0 + SEC, T0 + SEC)]


# --- durations of runs leased ahead --------------------------------------------------------

def run_ahead(node: Node, job_id: str, at: int, ahead_s: float) -> dict:
    """Fire `at`, lease it `ahead_s` before it (dispatch ahead) and acknowledge it."""
    node.fire(job_id, at, now=at - 8 * SEC)
    r = node.apply(c.Lease(node.epoch, at - int(ahead_s * SEC), "w1", [att(job_id, at)], True,
                           int(ahead_s * SEC) + 1))
    lease = r["leases"][0]
    assert lease["start_at_ms"] == at
    node.hb(lease["attempt_id"], lease["fencing_token"], at - int(ahead_s * SEC) + 10)
    return lease


def test_a_run_leased_ahead_is_timed_from_its_instant_not_its_lease(node: Node) -> None:
    node.create("j", now=T0, min_duration_s=5)
    at = T0 + MIN
    lease = run_ahead(node, "j", at, ahead_s=2)
    # 6 s after the lease but 4 s after it started: too fast.
    assert node.complete(lease["attempt_id"], lease["fencing_token"], at + 4 * SEC)["ok"]
    assert [a[1] for a in alerts(node)] == ["too_fast"]
    assert outbox(node)[0]["message"] == "succeeded after 4.0 s; min_duration_s is 5"


def test_a_run_leased_ahead_is_not_too_slow_for_its_wait_before_its_instant(node: Node) -> None:
    node.create("j", now=T0, max_duration_s=60)
    at = T0 + MIN
    lease = run_ahead(node, "j", at, ahead_s=2)
    bounds = RunBounds(node.epoch, None, None)  # type: ignore[arg-type]
    # 61 s after the lease, 59 s after its start: not slow yet.
    assert plan(node, bounds, at + 59 * SEC) == []
    cmds = plan(node, bounds, at + 61 * SEC)
    assert [x.message for x in cmds] == [  # type: ignore[attr-defined]
        "still running after 61 s; max_duration_s is 60"]
    node.hb(lease["attempt_id"], lease["fencing_token"], at + 70 * SEC)
    node.complete(lease["attempt_id"], lease["fencing_token"], at + 90 * SEC)
    assert [x.message for x in plan(node, bounds, at + 91 * SEC)] == [  # type: ignore[attr-defined]
        "the run ended after 90 s (succeeded)"]
