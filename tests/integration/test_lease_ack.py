"""Explicit delivery: a lease the worker promised to acknowledge and did not is released
by the sweeper, uncounted, and leased again under a new token (issue 18, section 1)."""

import sqlite3

from raftcron.core import commands as c
from raftcron.leader.sweeper import CANDIDATES_SQL, candidate_params
from raftcron.state.db import META_UNACKED_LEASES, get_meta, open_reader, open_writer
from tests.integration.test_machine import MIN, T0, Node, att, occ, spec

T = T0 + MIN


def ack_lease(n: Node, attempt_id: str, now: int, worker: str = "w1", epoch=None,
              ahead_ms: int = 0) -> dict:
    r = n.apply(c.Lease(epoch=n.epoch if epoch is None else epoch, now_ms=now,
                        worker_id=worker, attempt_ids=[attempt_id], acknowledge=True,
                        ahead_ms=ahead_ms))
    assert r["ok"] and len(r["leases"]) == 1, r
    return r["leases"][0]


def test_lease_with_acknowledge_sets_a_deadline_from_the_job(led):
    led.create("j", ack_timeout_s=7)
    led.fire("j", T)
    got = ack_lease(led, att("j", T), T)
    assert got["ack_timeout_s"] == 7
    row = led.attempt(att("j", T))
    assert (row["ack_deadline_ms"], row["acked_ms"]) == (T + 7_000, None)


def test_first_heartbeat_acknowledges_and_the_sweep_then_leaves_the_lease(led):
    led.create("j", max_attempts=1)
    led.fire("j", T)
    a = att("j", T)
    tok = ack_lease(led, a, T)["fencing_token"]
    assert led.hb(a, tok, T + 100)["ok"]
    row = led.attempt(a)
    assert (row["acked_ms"], row["ack_deadline_ms"]) == (T + 100, None)
    assert led.hb(a, tok, T + 2_000)["ok"]
    assert led.attempt(a)["acked_ms"] == T + 100  # the first heartbeat is the acknowledgement
    r = led.sweep([a], T + 10_000)
    assert r["unacknowledged"] == [] and r["lost"] == []
    assert led.attempt(a)["status"] == "running"


def test_unacknowledged_lease_is_released_uncounted_and_its_token_dies(led):
    led.create("j", max_attempts=1)  # were the release an attempt, the run would fail
    led.fire("j", T)
    a = att("j", T)
    first = ack_lease(led, a, T, worker="w1")
    assert led.sweep([a], T + 2_999)["unacknowledged"] == []
    assert led.sweep([a], T + 3_000)["unacknowledged"] == []  # the deadline itself is in time
    assert led.sweep([a], T + 3_001) == {"ok": True, "lost": [], "timed_out": [],
                                         "unacknowledged": [a]}
    row = led.attempt(a)
    assert (row["status"], row["number"], row["fencing_token"], row["worker_id"],
            row["not_before_ms"], row["unacked_releases"], row["release_reason"],
            row["finished_ms"]) == ("pending", 1, None, None, T + 3_001, 1,
                                    "not acknowledged", None)
    o = led.occurrence(occ("j", T))
    assert (o["status"], o["attempts"]) == ("pending", 1)
    assert get_meta(led.conn, META_UNACKED_LEASES) == 1
    assert led.q("SELECT count(*) FROM attempts") == [(1,)]

    # A late first holder is fenced out: its acknowledgement and its outcome are refused.
    assert led.hb(a, first["fencing_token"], T + 3_100)["rejected"] == "stale_token"
    assert led.complete(a, first["fencing_token"], T + 3_100)["rejected"] == "stale_token"

    second = ack_lease(led, a, T + 3_200, worker="w2")
    assert second["fencing_token"] > first["fencing_token"]
    assert second["attempt"] == 1
    assert led.hb(a, first["fencing_token"], T + 3_300, worker="w1")["rejected"] == "stale_token"
    assert led.hb(a, second["fencing_token"], T + 3_300, worker="w2")["ok"]
    done = led.complete(a, second["fencing_token"], T + 4_000, worker="w2")
    assert done["ok"] and done["status"] == "succeeded"
    assert led.occurrence(occ("j", T))["status"] == "succeeded"
    row = led.attempt(a)
    assert (row["unacked_releases"], row["release_reason"]) == (1, "not acknowledged")


def test_a_heartbeat_ordered_before_the_sweep_wins_even_if_stamped_late(led):
    led.create("j")
    led.fire("j", T)
    a = att("j", T)
    tok = ack_lease(led, a, T)["fencing_token"]
    assert led.hb(a, tok, T + 3_500)["ok"]  # past the deadline, but applied first
    assert led.sweep([a], T + 4_000)["unacknowledged"] == []
    assert led.attempt(a)["status"] == "running"


def test_a_lease_without_the_promise_is_delivered_as_before(led):
    led.create("j", heartbeat_timeout_s=30)
    led.fire("j", T)
    a = att("j", T)
    led.lease([a], T)  # acknowledge=False: an older worker, or a log entry from before
    assert led.attempt(a)["ack_deadline_ms"] is None
    r = led.sweep([a], T + 29_000)
    assert (r["unacknowledged"], r["lost"]) == ([], [])
    assert led.sweep([a], T + 30_001)["lost"] == [a]  # the heartbeat timeout, as before


def test_a_new_leader_releases_the_previous_epochs_unacknowledged_leases(led):
    led.create("j", max_attempts=1)
    led.fire("j", T)
    a = att("j", T)
    old = ack_lease(led, a, T)
    assert led.begin(2, now=T + 500)["ok"]
    # the old leader's sweep is refused, the new leader's first one releases
    assert led.sweep([a], T + 3_500, epoch=1)["rejected"] == "stale_epoch"
    assert led.sweep([a], T + 3_500, epoch=2)["unacknowledged"] == [a]
    new = ack_lease(led, a, T + 3_600, epoch=2)
    assert new["fencing_token"] > old["fencing_token"]
    assert new["attempt"] == 1


def test_worker_release_clears_the_acknowledgement_deadline(led):
    led.create("j")
    led.fire("j", T)
    a = att("j", T)
    tok = ack_lease(led, a, T)["fencing_token"]
    assert led.release(a, tok, T + 10)["ok"]
    row = led.attempt(a)
    assert (row["status"], row["ack_deadline_ms"], row["unacked_releases"]) == ("pending", None, 0)
    assert led.sweep([a], T + 60_000)["unacknowledged"] == []


def test_sweeper_candidates_include_unacknowledged_leases_past_their_deadline(led):
    led.create("j")
    led.create("k")
    led.fire("j", T)
    led.fire("k", T)
    ja, ka = att("j", T), att("k", T)
    ack_lease(led, ja, T)
    tok = ack_lease(led, ka, T)["fencing_token"]
    led.hb(ka, tok, T + 100)
    reader = open_reader(led.path)
    try:
        def candidates(now):
            return [r[0] for r in reader.execute(CANDIDATES_SQL, candidate_params(now))]
        assert candidates(T + 3_000) == []
        assert candidates(T + 3_001) == [ja]
    finally:
        reader.close()


def _log() -> list[c.Command]:
    """A log: a lease released unacknowledged, its late holder refused, a new epoch, the
    lease granted again and completed. Tokens are known in advance (epoch x 10^9 + seq)."""
    a = att("j", T)
    return [
        c.BeginEpoch(term=1, node_id="n1", now_ms=T0),
        c.PutJob("req-1", T0, spec("j", max_attempts=2), True),
        c.Claim(epoch=1, now_ms=T, items=[["j", 1, T, T, "fire"]]),
        c.Lease(epoch=1, now_ms=T, worker_id="w1", attempt_ids=[a], acknowledge=True),
        c.Sweep(epoch=1, now_ms=T + 3_001, attempt_ids=[a]),
        c.Heartbeat(now_ms=T + 3_002, worker_id="w1", attempts=[[a, 1_000_000_001]]),
        c.BeginEpoch(term=2, node_id="n2", now_ms=T + 4_000),
        c.Lease(epoch=2, now_ms=T + 4_100, worker_id="w2", attempt_ids=[a], acknowledge=True),
        c.Heartbeat(now_ms=T + 4_200, worker_id="w2", attempts=[[a, 2_000_000_001]]),
        c.Complete(now_ms=T + 5_000, worker_id="w2",
                   completions=[[a, 2_000_000_001, "succeeded", 0, ""]]),
    ]


def test_replay_is_deterministic(tmp_path):
    one, two = Node(tmp_path / "one.db"), Node(tmp_path / "two.db")
    results = [[n.apply(c.decode(c.encode(cmd))) for cmd in _log()] for n in (one, two)]
    assert results[0] == results[1]
    assert results[0][4]["unacknowledged"] == [att("j", T)]
    assert results[0][5]["results"][0]["rejected"] == "stale_token"
    assert results[0][-1]["results"][0]["status"] == "succeeded"
    assert one.digest() == two.digest()
    before = one.digest()
    # a restart replays the whole log over the applied state: nothing changes
    replay = Node(tmp_path / "one.db")
    assert all(replay.apply(cmd) == {"ok": True, "replayed": True} for cmd in _log())
    assert replay.digest() == before
    for n in (one, two, replay):
        n.conn.close()


def test_an_old_log_entry_decodes_without_the_promise():
    old = b'{"v":1,"t":"lease","a":{"epoch":3,"now_ms":12,"worker_id":"w","attempt_ids":["a~1"]}}'
    cmd = c.decode(old)
    assert isinstance(cmd, c.Lease) and cmd.acknowledge is False


OLD_ATTEMPTS = """
CREATE TABLE attempts (
    id TEXT PRIMARY KEY, occurrence_id TEXT NOT NULL, job_id TEXT NOT NULL,
    tenant TEXT NOT NULL, queue TEXT NOT NULL, number INTEGER NOT NULL, status TEXT NOT NULL,
    not_before_ms INTEGER NOT NULL, worker_id TEXT, fencing_token INTEGER, leased_ms INTEGER,
    heartbeat_ms INTEGER, lease_expires_ms INTEGER, runtime_deadline_ms INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL,
    finished_ms INTEGER, exit_code INTEGER, output TEXT, error TEXT);
"""


def test_a_database_from_before_gets_the_columns_and_its_leases_count_as_delivered(tmp_path):
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(OLD_ATTEMPTS)
    old.execute(
        "INSERT INTO attempts (id, occurrence_id, job_id, tenant, queue, number, status, "
        "not_before_ms, worker_id, fencing_token, leased_ms, heartbeat_ms, lease_expires_ms, "
        "created_ms) VALUES ('j@x~1', 'j@x', 'j', 'default', 'default', 1, 'running', 0, "
        "'w1', 1000000001, ?, ?, ?, ?)", (T, T, T + 30_000, T))
    old.commit()
    old.close()
    upgraded = open_writer(str(path))
    fresh = open_writer(str(tmp_path / "fresh.db"))
    try:
        columns = [r[1] for r in upgraded.execute("PRAGMA table_info(attempts)")]
        assert columns == [r[1] for r in fresh.execute("PRAGMA table_info(attempts)")]
        row = upgraded.execute(
            "SELECT ack_deadline_ms, acked_ms, unacked_releases, release_reason FROM attempts"
        ).fetchone()
        assert row == (None, None, 0, None)
        assert upgraded.execute(CANDIDATES_SQL, candidate_params(T + 10_000)).fetchall() == []
        open_writer(str(path)).close()  # opening again changes nothing
    finally:
        upgraded.close()
        fresh.close()


def test_only_the_holder_can_acknowledge(led):
    led.create("j")
    led.fire("j", T)
    a = att("j", T)
    tok = ack_lease(led, a, T, worker="w1")["fencing_token"]
    assert led.hb(a, tok, T + 100, worker="intruder")["rejected"] == "foreign_lease"
    assert led.hb(a, tok + 1, T + 100, worker="w1")["rejected"] == "stale_token"
    row = led.attempt(a)
    assert (row["acked_ms"], row["ack_deadline_ms"]) == (None, T + 3_000)
    assert led.sweep([a], T + 3_001)["unacknowledged"] == [a]
