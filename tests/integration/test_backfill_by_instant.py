"""Backfills decided by the instant, and the quotas that bound a tenant's share of the
state (issue 40, part 3), applied by the real state machine on real SQLite files.

From protocol level 2 an instant the job already has a run of waiting, running or
succeeded creates nothing, whatever the request key (state.backfills); a tenant's jobs,
schedules and pending runs are bounded, by default too (state.tenants). A level-1 state
decides as the level-1 build did (test_level1_apply_parity checks that build's rows)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raftcron.core import commands as c
from raftcron.core import identity, tenant_policy
from raftcron.core.model import parse_job
from raftcron.state.db import open_writer
from raftcron.state.digest import digest
from tests.integration.test_machine import MIN, T0, Node, spec

HOUR = 60 * MIN


@pytest.fixture
def led(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path / "state.db")
    assert n.begin(1)["ok"]
    yield n
    n.conn.close()


def backfill(n: Node, key: str, instants: list[int], job_id: str = "j",
             now: int = T0) -> dict:
    return n.apply(c.Backfill(n.rid(), now, job_id, key, instants))


def count(n: Node, sql: str, *args: object) -> int:
    return n.one(sql, *args)[0]


def backfill_rows(n: Node, job_id: str = "j") -> int:
    return count(n, "SELECT count(*) FROM occurrences WHERE kind = 'backfill' AND job_id = ?",
                 job_id)


def past(k: int) -> list[int]:
    """k instants of a per-minute job, before T0."""
    return [T0 - (k - i) * MIN for i in range(k)]


def test_a_new_key_for_the_same_instants_creates_nothing(led: Node) -> None:
    led.create("j")
    instants = past(50)
    first = backfill(led, "k1", instants)
    assert (first["created"], first["existing"]) == (50, 0)
    for key in ("k2", "k3", "k4"):
        again = backfill(led, key, instants)
        assert (again["created"], again["existing"]) == (0, 50)
        assert again["occurrence_ids"] == first["occurrence_ids"]  # the runs that exist
    assert backfill_rows(led) == 50
    assert count(led, "SELECT count(*) FROM attempts WHERE status = 'pending'") == 50
    # A range overlapping the first creates only the instants it adds.
    wider = backfill(led, "k5", [*instants, T0])
    assert (wider["created"], wider["existing"]) == (1, 50)
    assert wider["occurrence_ids"][-1] == identity.backfill_occurrence_id("j", T0, "k5")


def test_the_same_key_still_replays_and_repeats_within_a_command_count_once(led: Node
                                                                             ) -> None:
    led.create("j")
    at = T0 - MIN
    r = backfill(led, "k", [at, at, at])
    own = identity.backfill_occurrence_id("j", at, "k")
    assert (r["created"], r["existing"], r["occurrence_ids"]) == (1, 0, [own] * 3)
    assert backfill(led, "k", [at])["occurrence_ids"] == [own]
    assert backfill_rows(led) == 1


def test_a_scheduled_run_covers_its_instant_unless_it_was_skipped(led: Node) -> None:
    led.create("j", now=T0 - 10 * MIN)
    fired, skipped = T0 - 5 * MIN, T0 - 4 * MIN
    led.claim([["j", 1, fired, fired, "fire"], ["j", 1, skipped, skipped, "misfire"]],
              now=T0)
    r = backfill(led, "bf", [fired, skipped])
    assert (r["created"], r["existing"]) == (1, 1)
    assert r["occurrence_ids"] == [identity.scheduled_occurrence_id("j", fired),
                                   identity.backfill_occurrence_id("j", skipped, "bf")]


def test_a_succeeded_run_covers_its_instant_and_a_failed_one_may_be_run_again(led: Node
                                                                               ) -> None:
    led.create("j", max_attempts=1)
    ok_at, bad_at = T0 - 2 * MIN, T0 - MIN
    backfill(led, "k1", [ok_at, bad_at])
    ids = {at: identity.attempt_id(identity.backfill_occurrence_id("j", at, "k1"), 1)
           for at in (ok_at, bad_at)}
    leases = {x["attempt_id"]: x["fencing_token"]
              for x in led.lease(list(ids.values()), T0)["leases"]}
    led.complete(ids[ok_at], leases[ids[ok_at]], T0 + 1)
    led.complete(ids[bad_at], leases[ids[bad_at]], T0 + 1, outcome="failed", exit_code=1)
    # While both are running, both instants are covered.
    again = backfill(led, "k2", [ok_at, bad_at], now=T0 + 2)
    assert (again["created"], again["existing"]) == (1, 1)
    assert again["occurrence_ids"] == [
        identity.backfill_occurrence_id("j", ok_at, "k1"),
        identity.backfill_occurrence_id("j", bad_at, "k2")]
    # The new run of the failed instant is pending: now it covers it.
    assert backfill(led, "k3", [bad_at], now=T0 + 3)["created"] == 0
    # The failed run's own key never makes a second run of its instant.
    assert backfill(led, "k1", [bad_at], now=T0 + 4)["created"] == 0
    assert backfill_rows(led) == 3


def test_cancelled_runs_do_not_cover_their_instants(led: Node) -> None:
    """A delete cancels a job's pending runs; a job re-created with the same id backfills
    those instants again."""
    led.create("j")
    instants = past(3)
    backfill(led, "k1", instants)
    assert led.apply(c.DeleteJob(led.rid(), T0, "j"))["ok"]
    led.create("j", now=T0 + 1)
    r = backfill(led, "k2", instants, now=T0 + 2)
    assert (r["created"], r["existing"]) == (3, 0)


def test_a_level_1_state_makes_every_key_again_until_the_level_is_raised(
        tmp_path: Path) -> None:
    n = Node(tmp_path / "old.db", level=None)
    assert n.begin(1)["ok"]
    n.create("j")
    instants = past(5)
    for key in ("a", "b"):
        r = backfill(n, key, instants)
        assert r == {"ok": True, "created": 5, "occurrence_ids": [
            identity.backfill_occurrence_id("j", t, key) for t in instants]}
    raised = n.apply(c.SetClusterLevel(epoch=1, now_ms=T0, level=2))
    assert raised["raised"]
    r = backfill(n, "c", instants)
    assert (r["created"], r["existing"]) == (0, 5)
    # Several runs of one instant (written below level 2): the least id answers.
    assert r["occurrence_ids"] == [min(identity.backfill_occurrence_id("j", t, key)
                                       for key in ("a", "b")) for t in instants]
    assert backfill_rows(n) == 10


def test_backfills_by_instant_give_identical_states_on_two_nodes(tmp_path: Path) -> None:
    nodes = [Node(tmp_path / f"{name}.db") for name in ("a", "b")]
    for n in nodes:
        n.begin(1)
        n.apply(c.PutTenant("t", T0, "default", max_pending_runs=30))
        n.create("j", max_attempts=1)
        results = [backfill(n, f"k{i}", past(10 + 5 * i)) for i in range(6)]
        first = [identity.attempt_id(o, 1) for o in results[0]["occurrence_ids"]]
        leases = n.lease(first, T0)["leases"]
        for lease in leases[:3]:  # some succeed, some fail: each covers differently
            n.complete(lease["attempt_id"], lease["fencing_token"], T0 + 1)
        for lease in leases[3:6]:
            n.complete(lease["attempt_id"], lease["fencing_token"], T0 + 1,
                       outcome="failed", exit_code=1)
        results.append(backfill(n, "again", past(10), now=T0 + 2))
        n.results = results  # type: ignore[attr-defined]
    a, b = nodes
    assert a.results == b.results  # type: ignore[attr-defined]
    # 10, 15, ... 30 pending fit the quota of 30; 35 does not.
    assert [r.get("rejected") for r in a.results] == [  # type: ignore[attr-defined]
        None, None, None, None, None, "rate_limited", None]
    again = a.results[-1]  # type: ignore[attr-defined]
    assert (again["created"], again["existing"]) == (3, 7)  # the failed instants only
    assert a.digest() == b.digest()


# --- pending runs ---------------------------------------------------------------------------

def test_a_backfill_over_max_pending_runs_is_refused_whole(led: Node) -> None:
    led.apply(c.PutTenant(led.rid(), T0, "acme", max_pending_runs=100))
    led.create("j", tenant="acme", max_attempts=1)
    assert backfill(led, "k1", past(80))["created"] == 80
    # 80 of these instants have runs: the 50 others would make 130 pending.
    over = led.apply(c.Backfill("bf-over", T0, "j", "k2", past(130)))
    assert over == {"ok": False, "rejected": "rate_limited", "field": "tenant",
                    "quota": "max_pending_runs", "limit": 100, "used": 80, "requested": 50,
                    "message": "tenant 'acme' has 80 of the 100 runs waiting to start its "
                               "max_pending_runs quota allows: 50 more do not fit"}
    assert backfill_rows(led) == 80
    # What fits is created; a repeat of covered instants needs no room at all.
    assert backfill(led, "k3", past(100))["created"] == 20
    assert backfill(led, "k4", past(100))["existing"] == 100
    # Runs that start leave room: the refused request, sent again, is applied afresh (a
    # rate limit is not recorded as the request's answer).
    leased = led.lease([identity.attempt_id(identity.backfill_occurrence_id("j", t, "k1"), 1)
                        for t in past(130)[50:80]], T0)["leases"]
    assert len(leased) == 30
    retry = led.apply(c.Backfill("bf-over", T0, "j", "k2", past(130)))
    assert retry["ok"] and (retry["created"], retry["existing"]) == (30, 100)
    assert count(led, "SELECT count(*) FROM attempts WHERE status = 'pending'") == 100


def test_another_tenants_pending_runs_do_not_count(led: Node) -> None:
    led.apply(c.PutTenant(led.rid(), T0, "acme", max_pending_runs=10))
    led.create("a", tenant="acme")
    led.create("o", tenant="other")
    assert backfill(led, "k", past(200), job_id="o")["created"] == 200
    assert backfill(led, "k", past(10), job_id="a")["created"] == 10
    assert backfill(led, "k2", [T0], job_id="a")["quota"] == "max_pending_runs"
    assert backfill(led, "k2", [T0], job_id="o")["created"] == 1


def test_a_manual_trigger_needs_room_for_its_run(led: Node) -> None:
    led.apply(c.PutTenant(led.rid(), T0, "acme", max_pending_runs=2))
    led.create("j", tenant="acme", overlap_policy="forbid")
    led.create("k", tenant="acme")
    assert led.apply(c.TriggerManual(led.rid(), T0, "j", "m1"))["status"] == "pending"
    assert led.apply(c.TriggerManual(led.rid(), T0, "k", "m2"))["status"] == "pending"
    full = led.apply(c.TriggerManual("trig", T0, "k", "m3"))
    assert (full["rejected"], full["quota"], full["used"], full["limit"]) == (
        "rate_limited", "max_pending_runs", 2, 2)
    # A trigger its overlap policy skips adds no pending run: recorded, not refused.
    skipped = led.apply(c.TriggerManual(led.rid(), T0, "j", "m4"))
    assert (skipped["status"], skipped["reason"]) == ("skipped", "overlap")
    assert count(led, "SELECT count(*) FROM attempts WHERE status = 'pending'") == 2
    # Refused, not recorded: the same request once a run started is applied.
    lease = led.lease([identity.attempt_id(identity.manual_occurrence_id("k", "m2"), 1)], T0)
    assert len(lease["leases"]) == 1
    assert led.apply(c.TriggerManual("trig", T0, "k", "m3"))["status"] == "pending"


# --- jobs and schedules ---------------------------------------------------------------------

def multi(n: int) -> list[dict]:
    return [{"cron": f"{m} * * * *", "name": f"s{m}"} for m in range(n)]


def put(n: Node, job_id: str, create: bool = True, **kw: object) -> dict:
    body = {"id": job_id, "tenant": "acme", "target": {"shell": "true"}, **kw}
    if "schedules" not in body:
        body["schedule"] = "* * * * *"
    return n.apply(c.PutJob(n.rid(), T0, parse_job(body).to_spec(), create))


def test_max_schedules_counts_every_schedule_of_every_job(led: Node) -> None:
    led.apply(c.PutTenant(led.rid(), T0, "acme", max_schedules=10))
    assert put(led, "one")["ok"]
    assert put(led, "six", schedules=multi(6))["ok"]
    over = put(led, "four", schedules=multi(4))
    assert (over["rejected"], over["quota"], over["field"], over["limit"], over["used"],
            over["requested"]) == ("quota_exceeded", "max_schedules", "schedules", 10, 7, 4)
    assert put(led, "three", schedules=multi(3))["ok"]  # exactly at the quota
    # A batch counts the jobs it created before each one.
    batch = led.apply(c.CreateJobs(led.rid(), T0, [spec("b1", tenant="acme"),
                                                   spec("b2", tenant="other")]))
    assert [r.get("quota") for r in batch["results"]] == ["max_schedules", None]
    # An edit may drop schedules, and keep them under a lowered quota, never add any.
    led.apply(c.PutTenant(led.rid(), T0, "acme", max_schedules=5))
    assert put(led, "six", create=False, schedules=multi(5))["ok"]
    assert put(led, "six", create=False, schedules=multi(5), queue="q2")["ok"]
    grow = put(led, "six", create=False, schedules=multi(6))
    assert (grow["quota"], grow["requested"]) == ("max_schedules", 1)
    used = count(led, "SELECT count(*) FROM jobs WHERE tenant = 'acme'")
    assert used == 3


def test_the_defaults_bound_a_tenant_without_a_row_and_only_from_level_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(tenant_policy.QUOTA_DEFAULTS, "max_jobs", 3)
    monkeypatch.setitem(tenant_policy.QUOTA_DEFAULTS, "max_pending_runs", 4)
    new, old = Node(tmp_path / "new.db"), Node(tmp_path / "old.db", level=None)
    for n in (new, old):
        n.begin(1)
        for i in range(4):
            n.apply(c.PutJob(n.rid(), T0, spec(f"j{i}"), True))
    assert count(new, "SELECT count(*) FROM jobs") == 3
    assert count(old, "SELECT count(*) FROM jobs") == 4  # level 1: unlimited, as before
    assert backfill(new, "k", past(5), job_id="j0")["quota"] == "max_pending_runs"
    assert backfill(old, "k", past(5), job_id="j0")["created"] == 5
    # An admin's value replaces the default.
    new.apply(c.PutTenant(new.rid(), T0, "default", max_jobs=5, max_pending_runs=5))
    assert new.apply(c.PutJob(new.rid(), T0, spec("j9"), True))["ok"]
    assert backfill(new, "k", past(5), job_id="j0")["created"] == 5


def test_a_database_with_old_tenant_rows_gets_the_new_quota_columns(tmp_path: Path) -> None:
    """A tenant written before these quotas has them NULL (the default), and digests as a
    node of the previous build (no such columns) until one is set."""
    n = Node(tmp_path / "state.db")
    n.begin(1)
    n.apply(c.PutTenant(n.rid(), T0, "acme", max_jobs=7))
    before = n.digest()
    n.conn.close()
    conn = open_writer(str(tmp_path / "state.db"))
    cols = [r[1] for r in conn.execute("PRAGMA table_info(tenants)")]
    assert cols[-2:] == ["max_schedules", "max_pending_runs"]
    assert digest(conn) == before
    conn.close()
    assert c.encode(c.PutTenant("r", 1, "acme", max_jobs=5)) == (
        b'{"v":1,"t":"put_tenant","a":{"request_id":"r","now_ms":1,"name":"acme",'
        b'"max_jobs":5,"max_concurrent_runs":null,"max_fires_per_minute":null}}')
    assert c.decode(c.encode(c.PutTenant("r", 1, "acme", max_pending_runs=9))
                    ).max_pending_runs == 9
