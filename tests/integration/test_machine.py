import json
import sqlite3

import pytest

from raftcron.core import commands as c
from raftcron.core import identity, policy
from raftcron.core.model import parse_job
from raftcron.core.protocol import PROTOCOL_LEVEL
from raftcron.state import occurrences
from raftcron.state.db import last_applied, open_writer
from raftcron.state.digest import digest
from raftcron.state.machine import StateMachine
from raftcron.testing import commit_protocol_level

MIN = 60_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def spec(job_id="j", **kw):
    return parse_job({"id": job_id, "schedule": "* * * * *", "target": {"shell": "true"},
                      **kw}).to_spec()


class Node:
    def __init__(self, path, level=PROTOCOL_LEVEL):
        """`level`: the protocol level the state starts at (None: none committed, as a
        database written before levels existed)."""
        self.path = str(path)
        self.conn = open_writer(self.path)
        if level is not None:
            commit_protocol_level(self.conn, level)
        self.sm = StateMachine(self.conn)
        self.index = 0
        self.epoch = 0
        self.req = 0

    def apply(self, cmd):
        self.index += 1
        return self.sm.apply(self.index, cmd)

    def rid(self):
        self.req += 1
        return f"req-{self.req}"

    def q(self, sql, *args):
        return self.conn.execute(sql, args).fetchall()

    def one(self, sql, *args):
        return self.conn.execute(sql, args).fetchone()

    def digest(self):
        return digest(self.conn)

    # builders ---------------------------------------------------------------------------
    def begin(self, term, now=T0):
        r = self.apply(c.BeginEpoch(term=term, node_id="n1", now_ms=now))
        if r["ok"]:
            self.epoch = term
        return r

    def create(self, job_id="j", now=T0, **kw):
        r = self.apply(c.PutJob(self.rid(), now, spec(job_id, **kw), True))
        assert r["ok"], r
        return r

    def claim(self, items, now=T0, epoch=None):
        return self.apply(c.Claim(epoch=self.epoch if epoch is None else epoch, now_ms=now,
                                  items=[list(i) for i in items]))

    def fire(self, job_id, at, version=1, dispatch=None, decision="fire", now=None):
        return self.claim([[job_id, version, at, at if dispatch is None else dispatch,
                            decision]], now=at if now is None else now)

    def lease(self, attempt_ids, now, worker="w1", epoch=None):
        r = self.apply(c.Lease(epoch=self.epoch if epoch is None else epoch, now_ms=now,
                               worker_id=worker, attempt_ids=list(attempt_ids)))
        return r

    def hb(self, att, token, now, worker="w1"):
        r = self.apply(c.Heartbeat(now_ms=now, worker_id=worker, attempts=[[att, token]]))
        return r["results"][0]

    def complete(self, att, token, now, outcome="succeeded", exit_code=0, output="",
                 worker="w1"):
        r = self.apply(c.Complete(now_ms=now, worker_id=worker,
                                  completions=[[att, token, outcome, exit_code, output]]))
        return r["results"][0]

    def release(self, att, token, now, worker="w1"):
        r = self.apply(c.Release(now_ms=now, worker_id=worker, attempts=[[att, token]]))
        return r["results"][0]

    def sweep(self, attempt_ids, now, epoch=None):
        return self.apply(c.Sweep(epoch=self.epoch if epoch is None else epoch, now_ms=now,
                                  attempt_ids=list(attempt_ids)))

    def attempt(self, att_id):
        row = self.conn.execute("SELECT * FROM attempts WHERE id = ?", (att_id,))
        names = [d[0] for d in row.description]
        r = row.fetchone()
        return None if r is None else dict(zip(names, r, strict=True))

    def occurrence(self, occ_id):
        row = self.conn.execute("SELECT * FROM occurrences WHERE id = ?", (occ_id,))
        names = [d[0] for d in row.description]
        r = row.fetchone()
        return None if r is None else dict(zip(names, r, strict=True))

    def watermark(self, job_id="j"):
        return self.one("SELECT watermark_ms FROM jobs WHERE id = ?", job_id)[0]

    def job_spec(self, job_id="j"):
        return json.loads(self.one("SELECT spec FROM jobs WHERE id = ?", job_id)[0])


def occ(job_id, at):
    return identity.scheduled_occurrence_id(job_id, at)


def att(job_id, at, n=1):
    return identity.attempt_id(occ(job_id, at), n)


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path / "state.db")
    yield n
    n.conn.close()


@pytest.fixture
def led(node):
    assert node.begin(1)["ok"]
    return node


def lease_one(n, job_id, at, now=None, worker="w1"):
    r = n.lease([att(job_id, at)], at if now is None else now, worker=worker)
    assert r["ok"] and len(r["leases"]) == 1, r
    return r["leases"][0]["fencing_token"]


# --- jobs ---------------------------------------------------------------------------------

def test_create_edit_versions_and_conflicts(led):
    assert led.create("j") == {"ok": True, "job_id": "j", "version": 1, "created": True}
    again = led.apply(c.PutJob("other", T0, spec("j"), True))
    assert again["ok"] is False and again["rejected"] == "already_exists"
    r = led.apply(c.PutJob(led.rid(), T0 + 1, spec("j", max_attempts=7), False, 1))
    assert r == {"ok": True, "job_id": "j", "version": 2, "created": False}
    assert led.job_spec()["max_attempts"] == 7
    assert led.job_spec()["version"] == 2
    stale = led.apply(c.PutJob(led.rid(), T0 + 2, spec("j", max_attempts=9), False, 1))
    assert stale["rejected"] == "version_conflict" and stale["current_version"] == 2
    assert led.job_spec()["max_attempts"] == 7
    # no expected_version: last writer wins and the version still moves by one
    r = led.apply(c.PutJob(led.rid(), T0 + 3, spec("j", max_attempts=9), False))
    assert r["version"] == 3
    missing = led.apply(c.PutJob(led.rid(), T0, spec("nope"), False))
    assert missing["rejected"] == "not_found"
    moved = led.apply(c.PutJob(led.rid(), T0, spec("j", tenant="other"), False))
    assert moved["rejected"] == "invalid_state" and moved["field"] == "tenant"
    assert led.one("SELECT version, tenant, created_ms, updated_ms FROM jobs")[0:3] == (
        3, "default", T0)


def test_edit_keeps_the_watermark_and_claims_need_the_new_version(led):
    led.create("j")
    assert led.fire("j", T0 + MIN)["fired"] == 1
    led.apply(c.PutJob(led.rid(), T0 + MIN, spec("j", overlap_policy="forbid"), False))
    assert led.watermark() == T0 + MIN
    r = led.fire("j", T0 + 2 * MIN, version=1)
    assert r["rejected_items"] == [["j", T0 + 2 * MIN, "version_conflict"]]
    assert led.watermark() == T0 + MIN
    r = led.fire("j", T0 + 2 * MIN, version=2)
    assert r["rejected_items"] == [] and led.watermark() == T0 + 2 * MIN
    assert led.occurrence(occ("j", T0 + 2 * MIN))["job_version"] == 2


def test_create_jobs_creates_each_or_refuses_each_on_its_own(led):
    led.create("exists")
    r = led.apply(c.CreateJobs(led.rid(), T0 + 7, [spec("a"), spec("exists"), spec("b"),
                                                   spec("a")]))
    assert r["ok"] is True and r["created"] == 2
    assert [x["ok"] for x in r["results"]] == [True, False, True, False]
    assert r["results"][1]["rejected"] == "already_exists"
    assert r["results"][3]["rejected"] == "already_exists"  # the first "a" won
    rows = led.q("SELECT id, version, watermark_ms FROM jobs WHERE id IN ('a', 'b') ORDER BY id")
    assert rows == [("a", 1, T0 + 7), ("b", 1, T0 + 7)]
    # the new jobs are claimable like any other
    assert led.fire("a", T0 + MIN)["rejected_items"] == []


def test_create_jobs_respects_the_job_quota_per_job(led):
    led.apply(c.PutTenant(led.rid(), T0, "t", max_jobs=2))
    r = led.apply(c.CreateJobs(led.rid(), T0, [spec(f"q{i}", tenant="t") for i in range(3)]))
    assert [x["ok"] for x in r["results"]] == [True, True, False]
    assert r["results"][2]["quota"] == "max_jobs"
    assert led.one("SELECT count(*) FROM jobs WHERE tenant = 't'")[0] == 2


def test_create_sets_watermark_to_creation_time(led):
    led.create("j", now=T0 + 5 * MIN)
    assert led.watermark() == T0 + 5 * MIN
    r = led.fire("j", T0 + 5 * MIN)
    assert r["rejected_items"] == [["j", T0 + 5 * MIN, "already_claimed"]]


def test_delete(led):
    led.create("j", overlap_policy="allow")
    led.fire("j", T0 + MIN)
    led.fire("j", T0 + 2 * MIN)
    tok = lease_one(led, "j", T0 + MIN)
    bad = led.apply(c.DeleteJob(led.rid(), T0, "j", expected_version=5))
    assert bad["rejected"] == "version_conflict"
    assert led.one("SELECT count(*) FROM jobs")[0] == 1
    r = led.apply(c.DeleteJob(led.rid(), T0 + 3 * MIN, "j", expected_version=1))
    assert r == {"ok": True, "job_id": "j", "deleted": True}
    assert led.q("SELECT * FROM jobs") == []
    pending = led.attempt(att("j", T0 + 2 * MIN))
    assert pending["status"] == "cancelled" and pending["error"] == "job deleted"
    assert led.occurrence(occ("j", T0 + 2 * MIN))["status"] == "cancelled"
    running = led.attempt(att("j", T0 + MIN))
    assert running["status"] == "running" and running["cancel_requested"] == 1
    assert led.hb(att("j", T0 + MIN), tok, T0 + 3 * MIN) == {
        "attempt_id": att("j", T0 + MIN), "ok": True, "cancel": True}
    assert led.apply(c.DeleteJob(led.rid(), T0, "j"))["rejected"] == "not_found"
    # claims and triggers for a deleted job are rejected
    assert led.fire("j", T0 + 4 * MIN)["rejected_items"] == [["j", T0 + 4 * MIN, "not_found"]]
    assert led.apply(c.TriggerManual(led.rid(), T0, "j", "k"))["rejected"] == "not_found"
    # the running attempt of the deleted job ends as cancelled, not retried
    assert led.complete(att("j", T0 + MIN), tok, T0 + 5 * MIN, "failed", 1)["status"] == (
        "cancelled")
    assert led.occurrence(occ("j", T0 + MIN))["status"] == "cancelled"


def test_recreated_job_claiming_an_instant_of_its_predecessor_is_rejected(led):
    led.create("j", now=T0)
    assert led.fire("j", T0 + MIN, now=T0)["fired"] == 1  # claimed ahead of time
    led.apply(c.DeleteJob(led.rid(), T0 + 1000, "j"))
    led.create("j", now=T0 + 2000)
    assert led.watermark() == T0 + MIN
    r = led.fire("j", T0 + MIN, now=T0 + 3000)
    assert r["ok"] and r["rejected_items"] == [["j", T0 + MIN, "already_claimed"]]
    assert led.q("SELECT count(*) FROM occurrences") == [(1,)]


def test_pause_and_resume(led):
    led.create("j")
    r = led.apply(c.PauseJob(led.rid(), T0 + 1, "j"))
    assert r == {"ok": True, "job_id": "j", "version": 1, "paused": True}
    assert led.one("SELECT paused FROM jobs")[0] == 1 and led.job_spec()["paused"] is True
    led.fire("j", T0 + MIN)
    o = led.occurrence(occ("j", T0 + MIN))
    assert (o["status"], o["reason"], o["finished_ms"]) == ("skipped", "paused", T0 + MIN)
    assert led.attempt(att("j", T0 + MIN)) is None
    r = led.apply(c.ResumeJob(led.rid(), T0 + 2, "j"))
    assert r["paused"] is False and led.job_spec()["paused"] is False
    led.fire("j", T0 + 2 * MIN)
    assert led.occurrence(occ("j", T0 + 2 * MIN))["status"] == "pending"
    assert led.apply(c.PauseJob(led.rid(), T0, "x"))["rejected"] == "not_found"
    assert led.apply(c.ResumeJob(led.rid(), T0, "x"))["rejected"] == "not_found"


def test_job_created_paused_skips(led):
    led.create("j", paused=True)
    r = led.fire("j", T0 + MIN)
    assert (r["fired"], r["skipped"]) == (0, 1)


# --- epochs -------------------------------------------------------------------------------

def test_begin_epoch_ordering(node):
    assert node.begin(5, now=T0)["ok"]
    for term in (5, 4, 0, -1):
        r = node.begin(term)
        assert r["ok"] is False and r["rejected"] == "stale_epoch" and r["epoch"] == 5
    assert node.begin(7, now=T0 + 1)["ok"]
    assert node.q("SELECT epoch, node_id, began_ms, log_index FROM epochs") == [
        (5, "n1", T0, 1), (7, "n1", T0 + 1, 6)]
    r = node.lease([], T0, epoch=5)
    assert r["rejected"] == "stale_epoch" and r["epoch"] == 7
    assert node.lease([], T0, epoch=7)["ok"]


def test_leader_commands_need_a_begun_epoch(node):
    node.create("j")
    before = node.digest()
    r = node.fire("j", T0 + MIN)
    assert r["ok"] is False and r["rejected"] == "stale_epoch"
    assert node.digest() == before


def _leader_cmds(epoch, now):
    return [
        c.Claim(epoch=epoch, now_ms=now, items=[["j", 1, T0 + 9 * MIN, T0 + 9 * MIN, "fire"]]),
        c.Lease(epoch=epoch, now_ms=now, worker_id="w1", attempt_ids=[att("j", T0 + MIN)]),
        c.Sweep(epoch=epoch, now_ms=now, attempt_ids=[att("j", T0 + 2 * MIN)]),
        c.RaiseAlert(epoch=epoch, now_ms=now, alert_id="a2", kind="k"),
        c.ResolveAlert(epoch=epoch, now_ms=now, alert_id="a1"),
        c.AckOutbox(epoch=epoch, now_ms=now, outbox_id=1, delivered=True),
    ]


def test_stale_epoch_leader_commands_change_nothing(led):
    led.create("j")
    led.fire("j", T0 + MIN)
    led.fire("j", T0 + 2 * MIN)
    lease_one(led, "j", T0 + 2 * MIN)
    led.apply(c.RaiseAlert(epoch=1, now_ms=T0, alert_id="a1", kind="k"))
    assert led.begin(3)["ok"]
    before = led.digest()
    for stale in (1, 2, 4):
        for cmd in _leader_cmds(stale, T0 + 3_600_000):
            idx = led.index
            r = led.apply(cmd)
            assert r["ok"] is False and r["rejected"] == "stale_epoch", (cmd, r)
            assert led.digest() == before
            assert last_applied(led.conn) == idx + 1
    # the same commands with the current epoch do change the state
    for cmd in _leader_cmds(3, T0 + 3_600_000):
        r = led.apply(cmd)
        assert r["ok"], (cmd, r)
    assert led.digest() != before


def test_leader_commands_advance_the_clock_monotonically(led):
    led.lease([], T0 + 10)
    led.lease([], T0 + 5)
    assert led.one("SELECT value FROM meta WHERE key = 'clock_ms'")[0] == T0 + 10
    assert led.begin(2)["clock_ms"] == T0 + 10


# --- claims -------------------------------------------------------------------------------

def test_claim_creates_occurrence_and_attempt(led):
    led.create("j", queue="q1", tenant="t1")
    r = led.claim([["j", 1, T0 + MIN, T0 + MIN + 250, "fire"]], now=T0 + 30_000)
    assert r == {"ok": True, "fired": 1, "skipped": 0, "rejected_items": []}
    o = led.occurrence(occ("j", T0 + MIN))
    assert o["id"] == "j@2026-01-01T00:01:00Z"
    assert {k: o[k] for k in ("job_id", "tenant", "queue", "kind", "scheduled_for_ms",
                              "dispatch_at_ms", "job_version", "status", "reason", "attempts",
                              "epoch", "created_ms", "finished_ms")} == {
        "job_id": "j", "tenant": "t1", "queue": "q1", "kind": "scheduled",
        "scheduled_for_ms": T0 + MIN, "dispatch_at_ms": T0 + MIN + 250, "job_version": 1,
        "status": "pending", "reason": None, "attempts": 1, "epoch": 1,
        "created_ms": T0 + 30_000, "finished_ms": None}
    a = led.attempt(att("j", T0 + MIN))
    assert (a["occurrence_id"], a["number"], a["status"], a["not_before_ms"], a["queue"],
            a["fencing_token"], a["worker_id"]) == (
        o["id"], 1, "pending", T0 + MIN + 250, "q1", None, None)
    assert led.watermark() == T0 + MIN


def test_duplicate_claim_is_already_claimed_with_one_row(led):
    led.create("j")
    led.fire("j", T0 + MIN)
    before = led.digest()
    r = led.fire("j", T0 + MIN)
    assert r == {"ok": True, "fired": 0, "skipped": 0,
                 "rejected_items": [["j", T0 + MIN, "already_claimed"]]}
    assert led.digest() == before
    assert led.q("SELECT count(*) FROM occurrences") == [(1,)]
    assert led.q("SELECT count(*) FROM attempts") == [(1,)]


def test_duplicate_within_one_claim(led):
    led.create("j")
    r = led.claim([["j", 1, T0 + MIN, T0 + MIN, "fire"], ["j", 1, T0 + MIN, T0 + MIN, "fire"]])
    assert r["fired"] == 1 and r["rejected_items"] == [["j", T0 + MIN, "already_claimed"]]
    assert led.q("SELECT count(*) FROM occurrences") == [(1,)]


def test_watermark_never_moves_backwards(led):
    led.create("j")
    led.create("k")
    led.claim([["j", 1, T0 + 5 * MIN, T0 + 5 * MIN, "fire"],
               ["k", 1, T0 + 2 * MIN, T0 + 2 * MIN, "fire"]], now=T0 + 5 * MIN)
    r = led.claim([["j", 1, T0 + 3 * MIN, T0 + 3 * MIN, "fire"],
                   ["k", 1, T0 + 3 * MIN, T0 + 3 * MIN, "fire"]], now=T0 + 6 * MIN)
    assert r["rejected_items"] == [["j", T0 + 3 * MIN, "already_claimed"]]
    assert led.watermark("j") == T0 + 5 * MIN and led.watermark("k") == T0 + 3 * MIN
    assert led.occurrence(occ("j", T0 + 3 * MIN)) is None
    # a leader whose clock is behind (an older now) cannot move it back either
    led.fire("j", T0 + 4 * MIN, now=T0)
    assert led.watermark("j") == T0 + 5 * MIN


def test_claim_unknown_job_and_mixed_batch(led):
    led.create("j")
    r = led.claim([["ghost", 1, T0 + MIN, T0 + MIN, "fire"],
                   ["j", 1, T0 + MIN, T0 + MIN, "fire"],
                   ["j", 1, T0 + 2 * MIN, T0 + 2 * MIN, "misfire"]])
    assert r["fired"] == 1 and r["skipped"] == 1
    assert r["rejected_items"] == [["ghost", T0 + MIN, "not_found"]]


@pytest.mark.parametrize("decision", [policy.SKIP_MISFIRE, policy.SKIP_PAUSED])
def test_misfire_and_paused_decisions_are_recorded_as_skipped(led, decision):
    led.create("j")
    r = led.fire("j", T0 + MIN, decision=decision, now=T0 + 10 * MIN)
    assert (r["fired"], r["skipped"]) == (0, 1)
    o = led.occurrence(occ("j", T0 + MIN))
    assert (o["status"], o["reason"], o["attempts"], o["finished_ms"]) == (
        "skipped", decision, 0, T0 + 10 * MIN)
    assert led.attempt(att("j", T0 + MIN)) is None
    assert led.watermark() == T0 + MIN


def _statuses(n, job_id, instants):
    return [n.occurrence(occ(job_id, t))["status"] for t in instants]


def test_overlap_forbid(led):
    led.create("j", overlap_policy="forbid")
    ts = [T0 + i * MIN for i in range(1, 5)]
    led.fire("j", ts[0])
    led.fire("j", ts[1])  # first still queued
    assert led.occurrence(occ("j", ts[1]))["reason"] == "overlap"
    tok = lease_one(led, "j", ts[0], now=ts[1])
    led.fire("j", ts[2])  # first running
    assert _statuses(led, "j", ts[:3]) == ["running", "skipped", "skipped"]
    led.complete(att("j", ts[0]), tok, ts[2] + 1)
    led.fire("j", ts[3])
    assert _statuses(led, "j", ts) == ["succeeded", "skipped", "skipped", "pending"]


def test_overlap_forbid_within_one_batch(led):
    led.create("j", overlap_policy="forbid")
    r = led.claim([["j", 1, T0 + i * MIN, T0 + i * MIN, "fire"] for i in (1, 2, 3)])
    assert (r["fired"], r["skipped"]) == (1, 2)


def test_overlap_buffer_one(led):
    led.create("j", overlap_policy="buffer_one")
    ts = [T0 + i * MIN for i in range(1, 5)]
    led.fire("j", ts[0])
    lease_one(led, "j", ts[0])
    led.claim([["j", 1, t, t, "fire"] for t in ts[1:3]], now=ts[2])
    assert _statuses(led, "j", ts[:3]) == ["running", "pending", "skipped"]
    assert led.occurrence(occ("j", ts[2]))["reason"] == "overlap"
    # the buffered run waits: exclusive leasing
    r = led.lease([att("j", ts[1])], ts[2])
    assert r["leases"] == []


def test_overlap_replace(led):
    led.create("j", overlap_policy="replace")
    t1, t2 = T0 + MIN, T0 + 2 * MIN
    led.fire("j", t1)
    tok = lease_one(led, "j", t1)
    assert led.hb(att("j", t1), tok, t1 + 1)["cancel"] is False
    led.fire("j", t2)
    assert led.occurrence(occ("j", t2))["status"] == "pending"
    assert led.attempt(att("j", t1))["cancel_requested"] == 1
    assert led.hb(att("j", t1), tok, t2 + 1)["cancel"] is True
    assert led.lease([att("j", t2)], t2 + 2)["leases"] == []  # old one still running
    r = led.complete(att("j", t1), tok, t2 + 3, "failed", -15)
    assert r["status"] == "cancelled"
    o = led.occurrence(occ("j", t1))
    assert (o["status"], o["reason"]) == ("cancelled", "replaced")
    assert led.q("SELECT count(*) FROM attempts WHERE occurrence_id = ?", occ("j", t1)) == [(1,)]
    assert len(led.lease([att("j", t2)], t2 + 4)["leases"]) == 1


def test_overlap_replace_cancels_queued_runs(led):
    led.create("j", overlap_policy="replace")
    t1, t2, t3 = T0 + MIN, T0 + 2 * MIN, T0 + 3 * MIN
    led.fire("j", t1)
    led.fire("j", t2)
    o1 = led.occurrence(occ("j", t1))
    assert (o1["status"], o1["reason"], o1["finished_ms"]) == ("cancelled", "replaced", t2)
    assert led.attempt(att("j", t1))["status"] == "cancelled"
    assert led.lease([att("j", t1)], t2)["leases"] == []
    led.fire("j", t3)
    assert _statuses(led, "j", [t1, t2, t3]) == ["cancelled", "cancelled", "pending"]
    assert led.q("SELECT count(*) FROM attempts WHERE status = 'pending'") == [(1,)]


def test_overlap_replace_within_one_batch_keeps_only_the_newest(led):
    led.create("j", overlap_policy="replace")
    ts = [T0 + i * MIN for i in (1, 2, 3)]
    r = led.claim([["j", 1, t, t, "fire"] for t in ts], now=ts[-1])
    assert (r["fired"], r["skipped"]) == (1, 2)  # two were superseded in the same batch
    assert _statuses(led, "j", ts) == ["cancelled", "cancelled", "pending"]
    assert led.q("SELECT count(*) FROM attempts WHERE status = 'pending'") == [(1,)]


def test_overlap_allow(led):
    led.create("j", overlap_policy="allow")
    ts = [T0 + i * MIN for i in range(1, 4)]
    led.claim([["j", 1, t, t, "fire"] for t in ts], now=ts[-1])
    r = led.lease([att("j", t) for t in ts], ts[-1])
    assert len(r["leases"]) == 3


# --- manual and backfill ------------------------------------------------------------------

def test_manual_trigger_idempotency(led):
    led.create("j")
    r1 = led.apply(c.TriggerManual("r-a", T0 + 1, "j", "key-1"))
    oid = identity.manual_occurrence_id("j", "key-1")
    assert r1 == {"ok": True, "occurrence_id": oid, "status": "pending", "reason": None,
                  "duplicate": False}
    r2 = led.apply(c.TriggerManual("r-b", T0 + 2, "j", "key-1"))
    assert r2["duplicate"] is True and r2["occurrence_id"] == oid
    r3 = led.apply(c.TriggerManual("r-a", T0 + 3, "j", "key-1"))
    assert r3 == {**r1, "replayed_request": True}
    assert led.q("SELECT count(*) FROM occurrences WHERE kind = 'manual'") == [(1,)]
    assert led.q("SELECT count(*) FROM attempts") == [(1,)]
    o = led.occurrence(oid)
    assert (o["kind"], o["idempotency_key"], o["scheduled_for_ms"], o["epoch"]) == (
        "manual", "key-1", T0 + 1, 1)
    r4 = led.apply(c.TriggerManual("r-c", T0 + 4, "j", "key-2"))
    assert r4["duplicate"] is False and r4["occurrence_id"] != oid
    # manual runs do not move the scheduled watermark
    assert led.watermark() == T0


def test_manual_trigger_overlap(led):
    led.create("j", overlap_policy="forbid")
    led.fire("j", T0 + MIN)
    r = led.apply(c.TriggerManual(led.rid(), T0 + MIN, "j", "k1"))
    assert (r["status"], r["reason"]) == ("skipped", "overlap")
    r = led.apply(c.TriggerManual(led.rid(), T0 + MIN, "j", "k2", override_overlap=True))
    assert r["status"] == "pending"


def test_backfill_idempotency_below_level_2(tmp_path):
    """A level-1 state names backfill runs by (job, instant, key) alone, as the level-1
    build does; from level 2 on the instant decides (tests/integration/
    test_backfill_by_instant.py)."""
    led = Node(tmp_path / "level1.db", level=None)
    assert led.begin(1)["ok"]
    led.create("j")
    instants = [T0 - 2 * MIN, T0 - MIN]
    r = led.apply(c.Backfill(led.rid(), T0 + 5, "j", "bf-1", instants))
    ids = [identity.backfill_occurrence_id("j", t, "bf-1") for t in instants]
    assert r == {"ok": True, "occurrence_ids": ids, "created": 2}
    r = led.apply(c.Backfill(led.rid(), T0 + 6, "j", "bf-1", instants + [T0 - 3 * MIN]))
    assert r["created"] == 1
    assert led.q("SELECT count(*) FROM occurrences WHERE kind = 'backfill'") == [(3,)]
    r = led.apply(c.Backfill(led.rid(), T0 + 7, "j", "bf-2", instants))
    assert r["created"] == 2
    r = led.apply(c.Backfill(led.rid(), T0 + 8, "j", "bf-3", [T0 - MIN, T0 - MIN]))
    assert r["created"] == 1
    assert led.q("SELECT count(*) FROM occurrences") == [(6,)]
    assert led.q("SELECT count(*) FROM attempts WHERE status = 'pending'") == [(6,)]
    assert led.watermark() == T0
    miss = led.apply(c.Backfill(led.rid(), T0, "nope", "bf", [T0]))
    assert miss["rejected"] == "not_found"


def test_backfill_and_scheduled_same_instant_coexist(led):
    led.create("j", now=T0 - 10 * MIN)
    led.apply(c.Backfill(led.rid(), T0, "j", "bf", [T0 - MIN]))
    assert led.fire("j", T0 - MIN, now=T0)["fired"] == 1
    assert led.q("SELECT kind FROM occurrences ORDER BY kind") == [("backfill",), ("scheduled",)]


# --- leases -------------------------------------------------------------------------------

def test_lease_assigns_increasing_tokens(led):
    led.create("j")
    ts = [T0 + i * MIN for i in range(1, 5)]
    led.claim([["j", 1, t, t, "fire"] for t in ts], now=ts[0])
    r = led.lease([att("j", t) for t in ts[:2]], ts[-1])
    tokens = [x["fencing_token"] for x in r["leases"]]
    assert tokens == sorted(tokens) and len(set(tokens)) == 2
    assert all(identity.token_epoch(t) == 1 for t in tokens)
    lease = r["leases"][0]
    assert {k: lease[k] for k in ("attempt_id", "occurrence_id", "job_id", "scheduled_for",
                                  "kind", "attempt", "idempotency_key", "target")} == {
        "attempt_id": att("j", ts[0]), "occurrence_id": occ("j", ts[0]), "job_id": "j",
        "scheduled_for": "2026-01-01T00:01:00Z", "kind": "scheduled", "attempt": 1,
        "idempotency_key": occ("j", ts[0]), "target": {"shell": "true"}}
    a = led.attempt(att("j", ts[0]))
    assert (a["status"], a["worker_id"], a["fencing_token"], a["leased_ms"],
            a["lease_expires_ms"]) == ("running", "w1", tokens[0], ts[-1], ts[-1] + 30_000)
    assert led.occurrence(occ("j", ts[0]))["status"] == "running"
    r = led.lease([att("j", ts[2])], ts[-1])
    assert r["leases"][0]["fencing_token"] > tokens[-1]
    # already leased attempts are not leased twice
    assert led.lease([att("j", ts[0]), "no-such"], ts[-1])["leases"] == []
    assert led.begin(2)["ok"]
    t2 = led.lease([att("j", ts[3])], ts[-1])["leases"][0]["fencing_token"]
    assert identity.token_epoch(t2) == 2 and t2 > tokens[-1]
    all_tokens = [r[0] for r in led.q(
        "SELECT fencing_token FROM attempts WHERE fencing_token IS NOT NULL ORDER BY leased_ms")]
    assert len(set(all_tokens)) == 4


def test_lease_respects_not_before(led):
    led.create("j")
    led.claim([["j", 1, T0 + MIN, T0 + MIN + 500, "fire"]], now=T0)
    for now in (T0, T0 + MIN, T0 + MIN + 499):
        assert led.lease([att("j", T0 + MIN)], now)["leases"] == []
    assert led.attempt(att("j", T0 + MIN))["status"] == "pending"
    assert led.q("SELECT value FROM meta WHERE key = 'fencing_seq'") == [(0,)]
    assert len(led.lease([att("j", T0 + MIN)], T0 + MIN + 500)["leases"]) == 1


def test_lease_runtime_deadline(led):
    led.create("j", max_runtime_s=120, heartbeat_timeout_s=9)
    led.fire("j", T0 + MIN)
    lease = led.lease([att("j", T0 + MIN)], T0 + MIN)["leases"][0]
    assert lease["max_runtime_s"] == 120 and lease["heartbeat_interval_s"] == 3
    a = led.attempt(att("j", T0 + MIN))
    assert a["runtime_deadline_ms"] == T0 + MIN + 120_000
    assert a["lease_expires_ms"] == T0 + MIN + 9_000


def test_exclusive_policies_lease_one_at_a_time(led):
    led.create("j", overlap_policy="forbid")
    instants = [T0 - 3 * MIN, T0 - 2 * MIN]
    led.apply(c.Backfill(led.rid(), T0, "j", "bf", instants))
    ids = [identity.attempt_id(identity.backfill_occurrence_id("j", t, "bf"), 1)
           for t in instants]
    r = led.lease(ids, T0)
    assert len(r["leases"]) == 1
    assert led.lease(ids, T0)["leases"] == []
    tok = r["leases"][0]["fencing_token"]
    led.complete(ids[0], tok, T0 + 1)
    assert [x["attempt_id"] for x in led.lease(ids, T0 + 2)["leases"]] == [ids[1]]


# --- heartbeats ---------------------------------------------------------------------------

def test_heartbeat_extends_the_lease(led):
    led.create("j", heartbeat_timeout_s=10)
    led.fire("j", T0 + MIN)
    tok = lease_one(led, "j", T0 + MIN)
    a = att("j", T0 + MIN)
    assert led.hb(a, tok, T0 + MIN + 4_000) == {"attempt_id": a, "ok": True, "cancel": False}
    row = led.attempt(a)
    assert (row["heartbeat_ms"], row["lease_expires_ms"]) == (T0 + MIN + 4_000,
                                                              T0 + MIN + 14_000)
    led.hb(a, tok, T0 + MIN + 1_000)  # an older heartbeat never shortens the lease
    row = led.attempt(a)
    assert (row["heartbeat_ms"], row["lease_expires_ms"]) == (T0 + MIN + 4_000,
                                                              T0 + MIN + 14_000)


def test_heartbeat_rejections(led):
    led.create("j", heartbeat_timeout_s=10)
    led.fire("j", T0 + MIN)
    tok = lease_one(led, "j", T0 + MIN)
    a = att("j", T0 + MIN)
    before = led.digest()
    assert led.hb(a, tok + 1, T0 + MIN + 1)["rejected"] == "stale_token"
    assert led.hb(a, tok - 1, T0 + MIN + 1)["rejected"] == "stale_token"
    assert led.hb(a, None, T0 + MIN + 1)["rejected"] == "stale_token"
    assert led.hb(a, tok, T0 + MIN + 1, worker="w2")["rejected"] == "foreign_lease"
    assert led.hb("nope~1", tok, T0 + MIN + 1)["rejected"] == "not_found"
    assert led.digest() == before
    r = led.sweep([a], T0 + MIN + 10_001)
    assert r["lost"] == [a]
    before = led.digest()
    res = led.hb(a, tok, T0 + MIN + 10_002)
    assert res["ok"] is False and res["rejected"] == "lease_expired"
    assert led.digest() == before
    assert led.attempt(a)["lease_expires_ms"] == T0 + MIN + 10_000


def test_heartbeat_batch_mixes_results(led):
    led.create("j")
    led.fire("j", T0 + MIN)
    tok = lease_one(led, "j", T0 + MIN)
    r = led.apply(c.Heartbeat(now_ms=T0 + MIN, worker_id="w1",
                              attempts=[[att("j", T0 + MIN), tok], ["x", 1]]))
    assert [x["ok"] for x in r["results"]] == [True, False]


# --- completions and retries --------------------------------------------------------------

def test_complete_success_and_duplicates(led):
    led.create("j")
    led.fire("j", T0 + MIN)
    tok = lease_one(led, "j", T0 + MIN)
    a = att("j", T0 + MIN)
    r = led.complete(a, tok, T0 + MIN + 5, "succeeded", 0, "hello")
    assert r == {"attempt_id": a, "ok": True, "status": "succeeded", "duplicate": False}
    row = led.attempt(a)
    assert (row["status"], row["exit_code"], row["output"], row["finished_ms"]) == (
        "succeeded", 0, "hello", T0 + MIN + 5)
    o = led.occurrence(occ("j", T0 + MIN))
    assert (o["status"], o["finished_ms"]) == ("succeeded", T0 + MIN + 5)
    before = led.digest()
    r = led.complete(a, tok, T0 + MIN + 9, "succeeded", 0, "hello")
    assert r == {"attempt_id": a, "ok": True, "status": "succeeded", "duplicate": True}
    assert led.digest() == before
    r = led.complete(a, tok, T0 + MIN + 9, "failed", 1, "boom")
    assert r["ok"] is False and r["rejected"] == "conflict"
    r = led.complete(a, tok, T0 + MIN + 9, "succeeded", 3, "")
    assert r["rejected"] == "conflict"
    assert led.digest() == before
    assert led.q("SELECT count(*) FROM attempts") == [(1,)]
    assert led.complete(a, tok, T0, worker="w9")["rejected"] == "foreign_lease"
    assert led.complete(a, tok + 1, T0)["rejected"] == "stale_token"
    assert led.digest() == before


def test_failure_retries_with_backoff_until_max_attempts(led):
    led.create("j", max_attempts=3, retry_backoff_s=10)
    t = T0 + MIN
    led.fire("j", t)
    o_id = occ("j", t)
    now = t
    tok = lease_one(led, "j", t, now=now)
    for n in (1, 2):
        a_id = identity.attempt_id(o_id, n)
        now += 1_000
        r = led.complete(a_id, tok, now, "failed", 2, "err")
        assert r["status"] == "failed" and r["duplicate"] is False
        nxt = led.attempt(identity.attempt_id(o_id, n + 1))
        delay = policy.retry_delay_ms(10, n, a_id)
        assert 10_000 * 2 ** (n - 1) <= delay <= 15_000 * 2 ** (n - 1)
        assert (nxt["status"], nxt["number"], nxt["not_before_ms"]) == ("pending", n + 1,
                                                                         now + delay)
        o = led.occurrence(o_id)
        assert (o["status"], o["attempts"]) == ("pending", n + 1)
        assert led.q("SELECT count(*) FROM outbox") == [(0,)]
        assert led.lease([nxt["id"]], now + delay - 1)["leases"] == []
        r = led.lease([nxt["id"]], now + delay)
        assert len(r["leases"]) == 1 and r["leases"][0]["attempt"] == n + 1
        now += delay
        tok = r["leases"][0]["fencing_token"]
        assert led.occurrence(o_id)["status"] == "running"
    now += 1_000
    led.complete(identity.attempt_id(o_id, 3), tok, now, "failed", 9, "")
    assert led.attempt(identity.attempt_id(o_id, 4)) is None
    o = led.occurrence(o_id)
    assert (o["status"], o["reason"], o["finished_ms"], o["attempts"]) == (
        "failed", "exit code 9", now, 3)
    rows = led.q("SELECT event, payload, status, created_ms FROM outbox")
    assert len(rows) == 1 and rows[0][0] == "occurrence.failed" and rows[0][2] == "pending"
    assert json.loads(rows[0][1]) == {"job_id": "j", "occurrence_id": o_id, "attempts": 3,
                                      "reason": "exit code 9"}
    assert rows[0][3] == now


def test_single_attempt_job_fails_immediately(led):
    led.create("j", max_attempts=1)
    led.fire("j", T0 + MIN)
    tok = lease_one(led, "j", T0 + MIN)
    led.complete(att("j", T0 + MIN), tok, T0 + MIN + 1, "failed", 1)
    assert led.occurrence(occ("j", T0 + MIN))["status"] == "failed"
    assert led.q("SELECT event FROM outbox") == [("occurrence.failed",)]


def test_zero_backoff_retry_is_immediately_leasable(led):
    led.create("j", max_attempts=2, retry_backoff_s=0)
    led.fire("j", T0 + MIN)
    tok = lease_one(led, "j", T0 + MIN)
    led.complete(att("j", T0 + MIN), tok, T0 + MIN + 7, "failed", 1)
    assert led.attempt(att("j", T0 + MIN, 2))["not_before_ms"] == T0 + MIN + 7


# --- sweeps -------------------------------------------------------------------------------

def test_sweep_marks_lost_after_heartbeat_timeout(led):
    led.create("j", heartbeat_timeout_s=10, max_attempts=2, retry_backoff_s=0)
    t = T0 + MIN
    led.fire("j", t)
    tok = lease_one(led, "j", t)
    a = att("j", t)
    assert led.sweep([a], t + 10_000) == {"ok": True, "lost": [], "timed_out": [],
                                          "unacknowledged": []}
    led.hb(a, tok, t + 9_000)  # a heartbeat ordered before the sweep wins
    assert led.sweep([a], t + 15_000)["lost"] == []
    assert led.sweep([a, "ghost"], t + 19_001) == {"ok": True, "lost": [a], "timed_out": [],
                                                   "unacknowledged": []}
    row = led.attempt(a)
    assert (row["status"], row["error"], row["finished_ms"], row["cancel_requested"]) == (
        "lost", "heartbeat timeout", t + 19_001, 1)
    assert led.attempt(att("j", t, 2))["status"] == "pending"
    assert led.complete(a, tok, t + 20_000)["rejected"] == "lease_expired"
    # sweeping again does nothing
    assert led.sweep([a], t + 30_000)["lost"] == []
    assert led.attempt(a)["finished_ms"] == t + 19_001
    tok2 = led.lease([att("j", t, 2)], t + 30_000)["leases"][0]["fencing_token"]
    led.sweep([att("j", t, 2)], t + 41_000)
    o = led.occurrence(occ("j", t))
    assert (o["status"], o["reason"]) == ("failed", "heartbeat timeout")
    assert tok2 > tok
    assert led.q("SELECT event FROM outbox") == [("occurrence.failed",)]


def test_sweep_marks_timed_out_and_heartbeat_cancels(led):
    led.create("j", heartbeat_timeout_s=60, max_runtime_s=30, max_attempts=1)
    t = T0 + MIN
    led.fire("j", t)
    tok = lease_one(led, "j", t)
    a = att("j", t)
    assert led.sweep([a], t + 29_999)["timed_out"] == []
    r = led.sweep([a], t + 30_000)
    assert r == {"ok": True, "lost": [], "timed_out": [a], "unacknowledged": []}
    row = led.attempt(a)
    assert (row["status"], row["error"], row["cancel_requested"]) == (
        "timed_out", "max runtime exceeded", 1)
    assert led.hb(a, tok, t + 31_000) == {"attempt_id": a, "ok": True, "cancel": True}
    assert led.hb(a, tok, t + 31_000, worker="w2")["rejected"] == "foreign_lease"
    assert led.complete(a, tok, t + 32_000, "failed", 137)["rejected"] == "conflict"
    o = led.occurrence(occ("j", t))
    assert (o["status"], o["reason"]) == ("failed", "max runtime exceeded")


def test_sweep_ignores_non_running(led):
    led.create("j")
    led.fire("j", T0 + MIN)
    r = led.sweep([att("j", T0 + MIN)], T0 + 10 * 3_600_000)
    assert r == {"ok": True, "lost": [], "timed_out": [], "unacknowledged": []}
    assert led.attempt(att("j", T0 + MIN))["status"] == "pending"


# --- release ------------------------------------------------------------------------------

def test_release_makes_attempt_pending_and_token_stale(led):
    led.create("j", overlap_policy="forbid")
    t = T0 + MIN
    led.fire("j", t)
    tok = lease_one(led, "j", t)
    a = att("j", t)
    assert led.release(a, tok, t + 5, worker="w2")["rejected"] == "foreign_lease"
    assert led.release(a, tok + 1, t + 5)["rejected"] == "stale_token"
    assert led.release(a, tok, t + 5) == {"attempt_id": a, "ok": True}
    row = led.attempt(a)
    assert (row["status"], row["worker_id"], row["fencing_token"], row["not_before_ms"]) == (
        "pending", None, None, t + 5)
    assert led.occurrence(occ("j", t))["status"] == "pending"
    before = led.digest()
    assert led.hb(a, tok, t + 6)["rejected"] == "stale_token"
    assert led.complete(a, tok, t + 6)["rejected"] == "stale_token"
    assert led.release(a, tok, t + 6)["rejected"] == "stale_token"
    assert led.digest() == before
    tok2 = lease_one(led, "j", t, now=t + 7, worker="w2")
    assert tok2 > tok
    assert led.complete(a, tok2, t + 8, worker="w2")["status"] == "succeeded"
    assert led.complete(a, tok, t + 9)["rejected"] == "stale_token"


def test_release_after_completion_is_rejected(led):
    led.create("j")
    led.fire("j", T0 + MIN)
    tok = lease_one(led, "j", T0 + MIN)
    led.complete(att("j", T0 + MIN), tok, T0 + MIN + 1)
    r = led.release(att("j", T0 + MIN), tok, T0 + MIN + 2)
    assert r["rejected"] == "lease_expired"
    assert led.attempt(att("j", T0 + MIN))["status"] == "succeeded"


# --- alerts, outbox, prune ----------------------------------------------------------------

def _raise(n, alert_id, now, **kw):
    return n.apply(c.RaiseAlert(epoch=n.epoch, now_ms=now, alert_id=alert_id, kind="skew", **kw))


def test_alerts_raise_and_resolve(led):
    r = _raise(led, "a1", T0, job_id="j", reason="clock is 5 s behind")
    assert r == {"ok": True, "alert_id": "a1", "raised": True}
    assert _raise(led, "a1", T0 + 1, reason="again")["raised"] is False
    rows = led.q("SELECT event, payload FROM outbox ORDER BY id")
    assert [x[0] for x in rows] == ["alert.raised"]
    assert json.loads(rows[0][1]) == {"alert_id": "a1", "kind": "skew", "job_id": "j",
                                      "occurrence_id": None, "reason": "clock is 5 s behind",
                                      "at_ms": T0}
    assert led.q("SELECT status, reason, raised_ms FROM alerts") == [
        ("open", "clock is 5 s behind", T0)]
    r = led.apply(c.ResolveAlert(epoch=1, now_ms=T0 + 2, alert_id="a1"))
    assert r == {"ok": True, "alert_id": "a1", "resolved": True}
    assert led.q("SELECT status, resolved_ms FROM alerts") == [("resolved", T0 + 2)]
    r = led.apply(c.ResolveAlert(epoch=1, now_ms=T0 + 3, alert_id="a1"))
    assert r["resolved"] is False
    r = led.apply(c.ResolveAlert(epoch=1, now_ms=T0 + 3, alert_id="zz"))
    assert r["rejected"] == "not_found"
    assert _raise(led, "a1", T0 + 4, reason="back")["raised"] is True
    assert led.q("SELECT status, reason, raised_ms, resolved_ms FROM alerts") == [
        ("open", "back", T0 + 4, None)]
    events = [x[0] for x in led.q("SELECT event FROM outbox ORDER BY id")]
    assert events == ["alert.raised", "alert.resolved", "alert.raised"]
    resolved = json.loads(led.q("SELECT payload FROM outbox WHERE event = 'alert.resolved'")[0][0])
    assert resolved["alert_id"] == "a1" and resolved["job_id"] == "j"


def test_ack_outbox(led):
    _raise(led, "a1", T0)
    _raise(led, "a2", T0)
    ids = [r[0] for r in led.q("SELECT id FROM outbox ORDER BY id")]
    r = led.apply(c.AckOutbox(epoch=1, now_ms=T0 + 1, outbox_id=ids[0], delivered=False,
                              error="HTTP 503" + "x" * 2000))
    assert r == {"ok": True, "outbox_id": ids[0], "delivered": False, "duplicate": False}
    status, attempts, err, delivered = led.one(
        "SELECT status, attempts, last_error, delivered_ms FROM outbox WHERE id = ?", ids[0])
    assert (status, attempts, delivered) == ("pending", 1, None)
    assert err.startswith("HTTP 503") and len(err) == 1000
    r = led.apply(c.AckOutbox(epoch=1, now_ms=T0 + 2, outbox_id=ids[0], delivered=True))
    assert r["delivered"] is True and r["duplicate"] is False
    assert led.one("SELECT status, attempts, delivered_ms FROM outbox WHERE id = ?",
                   ids[0]) == ("delivered", 2, T0 + 2)
    before = led.digest()
    r = led.apply(c.AckOutbox(epoch=1, now_ms=T0 + 2, outbox_id=ids[0], delivered=True))
    assert r["duplicate"] is True
    assert led.digest() == before
    assert led.apply(c.AckOutbox(epoch=1, now_ms=T0, outbox_id=999, delivered=True))[
        "rejected"] == "not_found"
    assert led.one("SELECT status FROM outbox WHERE id = ?", ids[1]) == ("pending",)


def test_prune(led):
    led.create("j", max_attempts=1)
    ts = [T0 + i * MIN for i in range(1, 6)]
    led.fire("j", ts[0], decision="misfire")  # skipped, finished at ts[0]
    led.fire("j", ts[1])
    tok = lease_one(led, "j", ts[1])
    led.complete(att("j", ts[1]), tok, ts[1] + 1, "failed", 1)  # failed + outbox row
    led.fire("j", ts[2])
    tok = lease_one(led, "j", ts[2])
    led.complete(att("j", ts[2]), tok, ts[2] + 1)  # succeeded
    led.fire("j", ts[3])  # pending: never pruned
    led.fire("j", ts[4], decision="misfire")  # finished after the cut
    _raise(led, "a1", T0)
    led.apply(c.ResolveAlert(epoch=1, now_ms=T0 + 1, alert_id="a1"))
    _raise(led, "a2", T0)
    led.apply(c.AckOutbox(epoch=1, now_ms=T0 + 2, outbox_id=1, delivered=True))
    cut = ts[4]
    r = led.apply(c.Prune("prune-1", cut + 10, before_ms=cut, limit=2))
    assert r == {"ok": True, "pruned_occurrences": 2}
    assert led.occurrence(occ("j", ts[0])) is None
    assert led.occurrence(occ("j", ts[1])) is None
    assert led.attempt(att("j", ts[1])) is None
    r = led.apply(c.Prune("prune-2", cut + 10, before_ms=cut))
    assert r["pruned_occurrences"] == 1
    left = {row[0] for row in led.q("SELECT id FROM occurrences")}
    assert left == {occ("j", ts[3]), occ("j", ts[4])}
    assert led.attempt(att("j", ts[3]))["status"] == "pending"
    assert led.q("SELECT id FROM alerts") == [("a2",)]
    assert [r[0] for r in led.q("SELECT status FROM outbox ORDER BY id")] == [
        "pending", "pending", "pending"]
    # pruned requests were older than the cut; the prunes' own rows remain
    assert {r[0] for r in led.q("SELECT request_id FROM requests")} == {"prune-1", "prune-2"}
    # pruning history never lets an instant be claimed again
    r = led.fire("j", ts[0])
    assert r["rejected_items"] == [["j", ts[0], "already_claimed"]]


# --- replay, dedupe, atomicity ------------------------------------------------------------

def test_replay_same_index_is_a_noop(node):
    cmds = [
        c.BeginEpoch(term=1, node_id="n", now_ms=T0),
        c.PutJob("r1", T0, spec("j"), True),
        c.Claim(epoch=1, now_ms=T0 + MIN, items=[["j", 1, T0 + MIN, T0 + MIN, "fire"]]),
        c.Lease(epoch=1, now_ms=T0 + MIN, worker_id="w", attempt_ids=[att("j", T0 + MIN)]),
    ]
    digests = []
    for i, cmd in enumerate(cmds, start=1):
        node.sm.apply(i, cmd)
        digests.append(node.digest())
    for i, cmd in enumerate(cmds, start=1):
        assert node.sm.apply(i, cmd) == {"ok": True, "replayed": True}
        assert node.digest() == digests[-1]
    # an older index with a *different* command is also a no-op
    assert node.sm.apply(2, c.DeleteJob("r9", T0, "j")) == {"ok": True, "replayed": True}
    assert node.sm.apply_bytes(3, c.encode(cmds[2])) == {"ok": True, "replayed": True}
    assert node.sm.last_applied == 4 and node.digest() == digests[-1]
    node.conn.close()
    reopened = StateMachine(open_writer(node.path))
    assert reopened.last_applied == 4
    assert reopened.apply(4, cmds[3]) == {"ok": True, "replayed": True}
    assert digest(reopened.conn) == digests[-1]
    reopened.conn.close()
    node.conn = open_writer(node.path)


def test_two_nodes_same_log_same_digest(tmp_path):
    a, b = Node(tmp_path / "a.db"), Node(tmp_path / "b.db")
    for n in (a, b):
        n.begin(1)
        n.create("j", max_attempts=2, retry_backoff_s=1)
        n.fire("j", T0 + MIN)
        tok = lease_one(n, "j", T0 + MIN)
        n.complete(att("j", T0 + MIN), tok, T0 + MIN + 5, "failed", 3)
        _raise(n, "x", T0)
    assert a.digest() == b.digest()
    assert last_applied(a.conn) == last_applied(b.conn) == a.index


def test_request_id_dedupe(led):
    r1 = led.apply(c.PutJob("same", T0, spec("j"), True))
    r2 = led.apply(c.PutJob("same", T0 + 5, spec("j", max_attempts=9), False))
    assert r2 == {**r1, "replayed_request": True}
    assert led.one("SELECT version FROM jobs") == (1,)
    # a stored rejection is replayed too
    d1 = led.apply(c.DeleteJob("del", T0, "j", expected_version=7))
    assert d1["rejected"] == "version_conflict"
    d2 = led.apply(c.DeleteJob("del", T0, "j"))
    assert d2 == {**d1, "replayed_request": True}
    assert led.one("SELECT count(*) FROM jobs") == (1,)
    p1 = led.apply(c.PauseJob("p", T0, "j"))
    led.apply(c.ResumeJob(led.rid(), T0, "j"))
    assert led.apply(c.PauseJob("p", T0, "j")) == {**p1, "replayed_request": True}
    assert led.one("SELECT paused FROM jobs") == (0,)


def test_a_failing_apply_rolls_back_everything(led, monkeypatch):
    led.create("j")
    before = led.digest()
    idx = last_applied(led.conn)

    def claim_then_fail(ctx, cmd):
        """A handler that breaks after it wrote (a bug, or a broken invariant)."""
        assert occurrences.claim(ctx, cmd)["fired"] == 1
        assert ctx.conn.execute("SELECT count(*) FROM attempts").fetchone()[0] == 1
        raise ValueError("broken after writing")

    monkeypatch.setitem(led.sm.handlers, c.Claim, claim_then_fail)
    with pytest.raises(ValueError):
        led.sm.apply(idx + 1, c.Claim(epoch=1, now_ms=T0 + 99,
                                      items=[["j", 1, T0 + MIN, T0 + MIN, "fire"]]))
    assert led.digest() == before and last_applied(led.conn) == idx
    assert not led.conn.in_transaction
    assert led.sm.apply(idx + 1, c.Barrier("b")) == {"ok": True, "index": idx + 1}


def test_malformed_claim_items_are_refused_and_the_rest_recorded(led):
    """Only a broken proposer sends these; apply answers them, it does not raise (an
    exception in apply stops the node)."""
    led.create("j")
    led.create("k")
    at = T0 + MIN
    items = [["j", 1, at, at, "fire"], ["j", 1, at + MIN], ["k", True, at, at, "fire"],
             ["k", 1, float(at), at, "fire"], ["k", 1, 2**70, at, "fire"], "k", [],
             ["k", 1, 2**62, at, "fire"], ["k", 1, at, at, "fire"]]
    r = led.apply(c.Claim(epoch=1, now_ms=at, items=items))
    assert r == {"ok": True, "fired": 2, "skipped": 0, "rejected_items": [
        ["j", at + MIN, "invalid_item"], ["k", at, "invalid_item"],
        ["k", float(at), "invalid_item"], ["k", 2**70, "invalid_item"],
        ["k", None, "invalid_item"], [[], None, "invalid_item"],
        ["k", 2**62, "invalid_item"]]}  # past year 9999: no occurrence id names it
    assert led.one("SELECT count(*) FROM attempts") == (2,)


def test_apply_bytes_rejects_garbage_without_touching_state(led):
    before = led.digest()
    idx = last_applied(led.conn)
    with pytest.raises(c.UndecodableCommand):
        led.sm.apply_bytes(idx + 1, b'{"v": 2, "t": "barrier", "a": {}}')
    assert led.digest() == before and last_applied(led.conn) == idx


def test_listener_sees_applied_commands_only(tmp_path):
    seen = []
    sm = StateMachine(open_writer(str(tmp_path / "l.db")), listener=lambda cmd, r: seen.append(
        (type(cmd).__name__, r["ok"])))
    sm.apply(1, c.BeginEpoch(term=1, node_id="n", now_ms=0))
    sm.apply(1, c.BeginEpoch(term=1, node_id="n", now_ms=0))
    sm.apply(2, c.BeginEpoch(term=1, node_id="n", now_ms=0))
    assert seen == [("BeginEpoch", True), ("BeginEpoch", False)]


def test_unique_scheduled_index_is_enforced_by_the_database(led):
    led.create("j")
    led.fire("j", T0 + MIN)
    with pytest.raises(sqlite3.IntegrityError):
        led.conn.execute(
            "INSERT INTO occurrences (id, job_id, tenant, queue, kind, scheduled_for_ms, "
            "dispatch_at_ms, job_version, status, epoch, created_ms) "
            "VALUES ('other', 'j', 'default', 'default', 'scheduled', ?, 0, 1, 'pending', 1, 0)",
            (T0 + MIN,))


def test_a_failing_listener_does_not_fail_the_committed_apply(tmp_path):
    def listener(cmd, result):
        raise RuntimeError("Event loop is closed")  # what a node shutting down used to hit

    m = StateMachine(open_writer(str(tmp_path / "l.db")), listener=listener)
    assert m.apply(1, c.BeginEpoch(1, "n1", T0))["ok"]
    assert last_applied(m.conn) == 1
    assert m.apply(2, c.PutJob("r", T0, spec("j"), True))["ok"]
    assert m.conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 1


# --- time does not go backwards in the state --------------------------------------------

BEHIND_MS = 262_000  # a chaos run's node clock behind the leader's


def test_a_completion_stamped_by_a_node_far_behind_is_raised_to_the_cluster_time(led):
    """The leader leased at T; the worker reported through a node 262 s behind. The
    finish is recorded at the cluster's time, not 262 s before the lease, so retention
    (120 s) keeps the run and its lease deadlines are not already past."""
    led.create(now=T0)
    led.fire("j", T0 + MIN)
    token = lease_one(led, "j", T0 + MIN)
    late_node_now = T0 + MIN + 500 - BEHIND_MS
    assert led.hb(att("j", T0 + MIN), token, late_node_now)["ok"]
    assert led.attempt(att("j", T0 + MIN))["heartbeat_ms"] >= T0 + MIN
    assert led.complete(att("j", T0 + MIN), token, late_node_now)["ok"]
    assert led.occurrence(occ("j", T0 + MIN))["finished_ms"] == T0 + MIN
    led.apply(c.Prune("prune-1", T0 + MIN + 30_000, before_ms=T0 + MIN + 30_000 - 120_000))
    assert led.occurrence(occ("j", T0 + MIN)) is not None, "pruned 30 s after it ran"


def test_stamps_within_the_limit_behind_are_kept_as_sent(led):
    """Nodes' clocks differ by milliseconds: such stamps are not touched."""
    led.create(now=T0)
    led.fire("j", T0 + MIN)
    token = lease_one(led, "j", T0 + MIN)
    assert led.complete(att("j", T0 + MIN), token, T0 + MIN - 1_500)["ok"]
    assert led.occurrence(occ("j", T0 + MIN))["finished_ms"] == T0 + MIN - 1_500


def test_a_manual_trigger_through_a_node_far_behind_is_stamped_at_the_cluster_time(led):
    led.create(now=T0)
    led.fire("j", T0 + MIN)
    r = led.apply(c.TriggerManual(led.rid(), T0 + MIN - BEHIND_MS, "j", "key-1"))
    assert r["ok"], r
    row = led.one("SELECT scheduled_for_ms, created_ms FROM occurrences WHERE kind = 'manual'")
    assert row == (T0 + MIN, T0 + MIN)


def test_complete_keeps_an_output_holding_nul_and_unicode_whole(led):
    # Successes are written in one statement through JSON (state.one_step), which would cut
    # a text at a NUL: such an output goes through its own parameters and is stored whole.
    led.create("j")
    for i, output in enumerate(["before\x00after", "é \u2028 😀 \" \\ \n\t"]):
        at = T0 + (i + 1) * MIN
        led.fire("j", at)
        tok = lease_one(led, "j", at)
        a = att("j", at)
        assert led.complete(a, tok, at + 5, "succeeded", 0, output)["ok"]
        assert (led.attempt(a)["output"], led.attempt(a)["status"]) == (output, "succeeded")


def test_lease_and_complete_write_each_run_of_a_batch(led):
    # One Lease and one Complete of many runs (written in one statement each): every run
    # gets its own token, deadlines and outcome.
    for i in range(30):
        led.create(f"b{i:02d}", heartbeat_timeout_s=30 + i)
    led.claim([[f"b{i:02d}", 1, T0 + MIN, T0 + MIN, "fire"] for i in range(30)])
    ids = [att(f"b{i:02d}", T0 + MIN) for i in range(30)]
    leases = led.lease(ids, T0 + MIN)["leases"]
    assert sorted(x["attempt_id"] for x in leases) == sorted(ids)
    assert len({x["fencing_token"] for x in leases}) == 30
    for x in leases:
        row = led.attempt(x["attempt_id"])
        i = int(x["job_id"][1:])
        assert (row["status"], row["fencing_token"], row["worker_id"], row["leased_ms"],
                row["lease_expires_ms"]) == ("running", x["fencing_token"], "w1", T0 + MIN,
                                             T0 + MIN + (30 + i) * 1000)
        assert led.occurrence(x["occurrence_id"])["status"] == "running"
    r = led.apply(c.Complete(now_ms=T0 + MIN + 7, worker_id="w1", completions=[
        [x["attempt_id"], x["fencing_token"], "succeeded", i, f"out {i}"]
        for i, x in enumerate(leases)]))
    assert all(x["ok"] for x in r["results"])
    for i, x in enumerate(leases):
        row = led.attempt(x["attempt_id"])
        assert (row["status"], row["exit_code"], row["output"], row["finished_ms"]) == (
            "succeeded", i, f"out {i}", T0 + MIN + 7)
        occ_row = led.occurrence(x["occurrence_id"])
        assert (occ_row["status"], occ_row["finished_ms"]) == ("succeeded", T0 + MIN + 7)


def test_heartbeat_batch_extends_each_lease_by_its_own_window(led):
    # One Heartbeat of many leases (written in one statement): each lease is extended by
    # its own job's timeout and acknowledged; an attempt named twice is extended once, as
    # the same heartbeat twice in a row would be.
    for i in range(12):
        led.create(f"h{i:02d}", heartbeat_timeout_s=30 + i)
    led.claim([[f"h{i:02d}", 1, T0 + MIN, T0 + MIN, "fire"] for i in range(12)])
    leases = led.lease([att(f"h{i:02d}", T0 + MIN) for i in range(12)], T0 + MIN)["leases"]
    pairs = [[x["attempt_id"], x["fencing_token"]] for x in leases]
    r = led.apply(c.Heartbeat(now_ms=T0 + MIN + 4000, worker_id="w1",
                              attempts=[*pairs, pairs[0]]))
    assert [x["ok"] for x in r["results"]] == [True] * 13
    for x in leases:
        row = led.attempt(x["attempt_id"])
        timeout = (30 + int(x["job_id"][1:])) * 1000
        assert (row["heartbeat_ms"], row["lease_expires_ms"], row["acked_ms"],
                row["ack_deadline_ms"]) == (T0 + MIN + 4000, T0 + MIN + 4000 + timeout,
                                            T0 + MIN + 4000, None)
