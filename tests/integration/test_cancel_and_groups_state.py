"""The state machine: cancelling runs by hand, and concurrency-group limits in Lease."""

from __future__ import annotations

import json

import pytest

from raftcron.core import commands as c
from tests.integration.test_machine import MIN, T0, Node, att, occ


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path / "state.db")
    n.begin(1)
    return n


def cancel(n: Node, occ_id: str, now: int, who: str = "alice", tenants=None) -> dict:
    return n.apply(c.CancelOccurrence(n.rid(), now, occ_id, who, "wrong data", tenants))


def cancelled_events(n: Node) -> list[dict]:
    """The `occurrence.cancelled` outbox rows' payloads, oldest first."""
    return [json.loads(p) for (p,) in n.q(
        "SELECT payload FROM outbox WHERE event = 'occurrence.cancelled' ORDER BY id")]


ANNOUNCED = {"job_id": "j", "occurrence_id": occ("j", T0 + MIN), "by": "alice",
             "note": "wrong data"}


# --- cancel ------------------------------------------------------------------------------

def test_a_queued_run_is_cancelled_at_once_and_never_leased(node):
    node.create()
    node.fire("j", T0 + MIN)
    r = cancel(node, occ("j", T0 + MIN), T0 + MIN + 10)
    assert r["ok"] and r["status"] == "cancelled", r
    o = node.occurrence(occ("j", T0 + MIN))
    assert (o["status"], o["reason"]) == ("cancelled", "cancelled by alice")
    assert node.attempt(att("j", T0 + MIN))["status"] == "cancelled"
    assert node.lease([att("j", T0 + MIN)], T0 + MIN + 20)["leases"] == []
    row = node.one("SELECT who, note, at_ms FROM cancellations")
    assert row == ("alice", "wrong data", T0 + MIN + 10)
    assert cancelled_events(node) == [ANNOUNCED], "receivers hear that the run will not happen"


def _running(node: Node) -> int:
    node.create(heartbeat_timeout_s=6)
    node.fire("j", T0 + MIN)
    lease = node.lease([att("j", T0 + MIN)], T0 + MIN)["leases"][0]
    return lease["fencing_token"]


def test_a_running_run_is_told_by_heartbeat_and_ends_cancelled(node):
    token = _running(node)
    assert node.hb(att("j", T0 + MIN), token, T0 + MIN + 100)["cancel"] is False
    r = cancel(node, occ("j", T0 + MIN), T0 + MIN + 200)
    assert r["ok"] and r["status"] == "running" and r["cancel_requested"], r
    assert node.occurrence(occ("j", T0 + MIN))["status"] == "running"  # until it stops
    assert cancelled_events(node) == [], "announced when it has ended, not before"
    assert node.hb(att("j", T0 + MIN), token, T0 + MIN + 300)["cancel"] is True
    done = node.complete(att("j", T0 + MIN), token, T0 + MIN + 900, "failed", -15, "killed")
    assert done["ok"] and done["status"] == "cancelled", done
    o = node.occurrence(occ("j", T0 + MIN))
    assert (o["status"], o["reason"]) == ("cancelled", "cancelled by alice")
    a = node.attempt(att("j", T0 + MIN))
    assert (a["status"], a["exit_code"], a["output"]) == ("cancelled", -15, "killed")
    assert cancelled_events(node) == [ANNOUNCED]


def test_a_late_success_after_the_cancel_does_not_flip_it_back(node):
    """Fencing: the committed cancel wins over a completion ordered after it."""
    token = _running(node)
    cancel(node, occ("j", T0 + MIN), T0 + MIN + 200)
    done = node.complete(att("j", T0 + MIN), token, T0 + MIN + 300, "succeeded", 0, "done")
    assert done["status"] == "cancelled", done
    assert node.occurrence(occ("j", T0 + MIN))["status"] == "cancelled"
    again = node.complete(att("j", T0 + MIN), token, T0 + MIN + 400, "succeeded", 0, "done")
    assert again["ok"] and again["duplicate"], again  # the worker's resend is acknowledged
    assert node.occurrence(occ("j", T0 + MIN))["status"] == "cancelled"
    assert cancelled_events(node) == [ANNOUNCED], "once, whatever is resent"


def test_a_cancelled_run_whose_worker_vanished_is_not_retried(node):
    token = _running(node)
    assert token
    cancel(node, occ("j", T0 + MIN), T0 + MIN + 200)
    r = node.sweep([att("j", T0 + MIN)], T0 + MIN + 10_000)
    assert r["lost"] == [att("j", T0 + MIN)]
    o = node.occurrence(occ("j", T0 + MIN))
    assert (o["status"], o["reason"]) == ("cancelled", "cancelled by alice")
    assert node.attempt(att("j", T0 + MIN, 2)) is None
    assert cancelled_events(node) == [ANNOUNCED]


def test_a_replaced_run_that_succeeded_still_counts_as_succeeded(node):
    """`replace` asks a run to stop too, but without a person's cancel a success stands."""
    node.create(overlap_policy="replace")
    node.fire("j", T0 + MIN)
    token = node.lease([att("j", T0 + MIN)], T0 + MIN)["leases"][0]["fencing_token"]
    node.fire("j", T0 + 2 * MIN)
    done = node.complete(att("j", T0 + MIN), token, T0 + 2 * MIN + 5)
    assert done["status"] == "succeeded"
    assert cancelled_events(node) == [], "nobody cancelled it"


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_cancelling_a_finished_run_is_refused_naming_its_state(node, outcome):
    token = _running(node)
    node.complete(att("j", T0 + MIN), token, T0 + MIN + 100, outcome, 0 if outcome ==
                  "succeeded" else 1)
    if outcome == "failed":  # the retry is queued: the run has not ended
        assert cancel(node, occ("j", T0 + MIN), T0 + MIN + 200)["status"] == "cancelled"
        outcome = "cancelled"
    r = cancel(node, occ("j", T0 + MIN), T0 + MIN + 300)
    assert not r["ok"] and r["rejected"] == "invalid_state" and r["status"] == outcome, r
    assert r["field"] == "status" and outcome in r["message"]


def test_a_second_cancel_while_it_stops_changes_nothing(node):
    _running(node)
    cancel(node, occ("j", T0 + MIN), T0 + MIN + 200, who="alice")
    r = cancel(node, occ("j", T0 + MIN), T0 + MIN + 300, who="bob")
    assert r["ok"] and r["already_requested"], r
    assert node.one("SELECT who FROM cancellations")[0] == "alice"
    assert cancelled_events(node) == []


def test_another_tenants_run_is_not_found_in_apply(node):
    node.create(tenant="t1")
    node.fire("j", T0 + MIN)
    r = cancel(node, occ("j", T0 + MIN), T0 + MIN + 10, tenants=["t2"])
    assert not r["ok"] and r["rejected"] == "not_found"
    assert node.occurrence(occ("j", T0 + MIN))["status"] == "pending"
    assert cancel(node, occ("j", T0 + MIN), T0 + MIN + 10, tenants=["t1"])["ok"]


def test_a_cancelled_runs_record_is_pruned_with_it(node):
    node.create()
    node.fire("j", T0 + MIN)
    cancel(node, occ("j", T0 + MIN), T0 + MIN + 10)
    node.apply(c.Prune(node.rid(), T0 + 10 * MIN, T0 + 5 * MIN))
    assert node.one("SELECT count(*) FROM cancellations")[0] == 0


# --- concurrency groups ------------------------------------------------------------------

def _group_jobs(node: Node, n: int, group: str = "db", tenant: str = "default") -> list[str]:
    """Jobs of one group, each with a run due at T0 + MIN (instants are claimed later
    than the creations, whose time the cluster clock would otherwise raise past them)."""
    jobs = [f"{tenant}-g{i}" for i in range(n)]
    for job in jobs:
        node.create(job, tenant=tenant, concurrency_group=group)
    node.claim([[job, 1, T0 + MIN, T0 + MIN, "fire"] for job in jobs], now=T0 + MIN)
    return [att(job, T0 + MIN) for job in jobs]


def put_group(node: Node, limit: int, name: str = "db", tenant: str = "default") -> dict:
    return node.apply(c.PutConcurrencyGroup(node.rid(), T0, tenant, name, limit))


def test_a_lease_never_exceeds_the_group_limit_in_one_command_or_across_workers(node):
    assert put_group(node, 2)["ok"]
    node.create("free")
    ids = _group_jobs(node, 4)
    node.fire("free", T0 + MIN)
    r = node.lease([*ids, att("free", T0 + MIN)], T0 + MIN, worker="w1")
    assert len(r["leases"]) == 3  # two of the group, and the job outside it
    assert r["held_groups"] == [["default", "db", sorted(j.split("@")[0] for j in ids[2:])]]
    again = node.lease(ids, T0 + MIN + 1, worker="w2")  # another worker, another command
    assert again["leases"] == [] and again["held_groups"]
    token = r["leases"][0]["fencing_token"]
    node.complete(r["leases"][0]["attempt_id"], token, T0 + MIN + 5)
    third = node.lease(ids, T0 + MIN + 6, worker="w2")
    assert len(third["leases"]) == 1


def test_an_unset_group_has_limit_one_and_raising_it_lets_more_run(node):
    ids = _group_jobs(node, 3)
    assert len(node.lease(ids, T0 + MIN)["leases"]) == 1
    put_group(node, 3)
    assert len(node.lease(ids, T0 + MIN + 1)["leases"]) == 2


def test_the_same_group_name_in_two_tenants_is_two_groups(node):
    put_group(node, 1, tenant="t1")
    put_group(node, 1, tenant="t2")
    for job in ("t2-g0", "t2-g1"):
        node.create(job, tenant="t2", concurrency_group="db")
    t1 = _group_jobs(node, 2, tenant="t1")
    node.claim([[job, 1, T0 + MIN, T0 + MIN, "fire"] for job in ("t2-g0", "t2-g1")],
               now=T0 + MIN)
    t2 = [att(job, T0 + MIN) for job in ("t2-g0", "t2-g1")]
    r = node.lease([*t1, *t2], T0 + MIN)
    tenants = sorted(lease["tenant"] for lease in r["leases"])
    assert tenants == ["t1", "t2"]


def test_a_group_slot_held_back_by_the_tenant_limit_is_given_back(node):
    node.apply(c.PutTenant(node.rid(), T0, "default", max_concurrent_runs=1))
    put_group(node, 2)
    node.create("other")
    ids = _group_jobs(node, 2)
    node.fire("other", T0 + MIN)
    first = node.lease([att("other", T0 + MIN), *ids], T0 + MIN)
    assert [x["job_id"] for x in first["leases"]] == ["other"]
    node.complete(att("other", T0 + MIN), first["leases"][0]["fencing_token"], T0 + MIN + 1)
    node.apply(c.PutTenant(node.rid(), T0, "default", max_concurrent_runs=5))
    assert len(node.lease(ids, T0 + MIN + 2)["leases"]) == 2


def test_old_specs_and_old_entries_decode_without_a_group(node):
    node.create("old")  # no concurrency_group: the spec has no such key
    assert "concurrency_group" not in node.job_spec("old")
    node.fire("old", T0 + MIN)
    r = node.lease([att("old", T0 + MIN)], T0 + MIN)
    assert len(r["leases"]) == 1 and r["held_groups"] == []
    old = c.decode(b'{"v":1,"t":"lease","a":{"epoch":1,"now_ms":1,"worker_id":"w",'
                   b'"attempt_ids":[]}}')
    assert isinstance(old, c.Lease)
