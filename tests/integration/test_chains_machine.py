"""Chains in the state machine on real SQLite: one downstream run per upstream end, the
references a chained job may make, and what the downstream run knows of its upstream."""

from __future__ import annotations

import pytest

from raftcron.core import commands as c
from raftcron.core import errors, identity
from raftcron.core.model import parse_job
from raftcron.core.protocol import unmet
from tests.integration.test_machine import MIN, T0, Node, occ


def chained(job_id: str, upstream: str, on: str = "success", **kw: object) -> dict:
    return parse_job({"id": job_id, "after": {"job": upstream, "on": on},
                      "target": {"shell": "true"}, **kw}).to_spec()


@pytest.fixture
def node(tmp_path) -> Node:
    n = Node(tmp_path / "state.db")
    n.begin(1)
    return n


def put(n: Node, spec: dict, create: bool = True) -> dict:
    return n.apply(c.PutJob(n.rid(), T0, spec, create))


def run_upstream(n: Node, at: int, outcome: str = "succeeded", job: str = "a",
                 attempts: int = 1) -> str:
    """Fire `job` at `at` and end each of its attempts with `outcome`."""
    n.fire(job, at)
    oid = occ(job, at)
    for number in range(1, attempts + 1):
        att = identity.attempt_id(oid, number)
        lease = n.lease([att], at + number * 10)["leases"][0]
        r = n.complete(att, lease["fencing_token"], at + number * 10 + 5, outcome=outcome,
                       exit_code=0 if outcome == "succeeded" else 1)
        assert r["ok"], r
    return oid


def downstream(n: Node, job: str) -> list[dict]:
    rows = n.q("SELECT id FROM occurrences WHERE job_id = ? ORDER BY id", job)
    return [n.occurrence(r[0]) for r in rows]


@pytest.mark.parametrize(("on", "outcome", "starts"), [
    ("success", "succeeded", True), ("success", "failed", False),
    ("failure", "failed", True), ("failure", "succeeded", False),
    ("finish", "succeeded", True), ("finish", "failed", True),
])
def test_a_chained_job_gets_one_run_per_upstream_end_it_follows(node, on, outcome, starts):
    node.create("a", max_attempts=1)
    assert put(node, chained("b", "a", on))["ok"]
    up = run_upstream(node, T0 + MIN, outcome)
    runs = downstream(node, "b")
    if not starts:
        assert runs == []
        return
    [run] = runs
    assert run["id"] == identity.chained_occurrence_id("b", up, T0 + MIN + 15)
    assert (run["upstream"], run["upstream_outcome"], run["status"]) == (up, outcome, "pending")
    att = node.attempt(identity.attempt_id(run["id"], 1))
    assert att["status"] == "pending" and att["not_before_ms"] == T0 + MIN + 15


def test_a_failure_starts_the_chain_after_the_last_retry_only(node):
    node.create("a", max_attempts=3, retry_backoff_s=1)
    assert put(node, chained("b", "a", "failure"))["ok"]
    node.fire("a", T0 + MIN)
    oid = occ("a", T0 + MIN)
    now = T0 + MIN
    for number in (1, 2, 3):
        assert downstream(node, "b") == []
        att = identity.attempt_id(oid, number)
        now += 10 * 1000
        token = node.lease([att], now)["leases"][0]["fencing_token"]
        node.complete(att, token, now + 1, outcome="failed", exit_code=2)
    [run] = downstream(node, "b")
    assert run["upstream"] == oid and run["upstream_outcome"] == "failed"


def test_a_resent_completion_starts_nothing_more(node):
    node.create("a")
    put(node, chained("b", "a"))
    node.fire("a", T0 + MIN)
    att = identity.attempt_id(occ("a", T0 + MIN), 1)
    token = node.lease([att], T0 + MIN)["leases"][0]["fencing_token"]
    assert node.complete(att, token, T0 + MIN + 5)["duplicate"] is False
    assert node.complete(att, token, T0 + MIN + 6)["duplicate"] is True
    assert len(downstream(node, "b")) == 1


def test_every_follower_starts_and_a_chain_runs_on(node):
    """a -> b, a -> c, b -> d: a's success starts b and c; b's success starts d."""
    node.create("a")
    for job, up in (("b", "a"), ("c", "a"), ("d", "b")):
        assert put(node, chained(job, up))["ok"]
    up = run_upstream(node, T0 + MIN)
    assert [r["upstream"] for r in downstream(node, "b")] == [up]
    assert [r["upstream"] for r in downstream(node, "c")] == [up]
    assert downstream(node, "d") == []
    b_run = downstream(node, "b")[0]["id"]
    att = identity.attempt_id(b_run, 1)
    token = node.lease([att], T0 + 2 * MIN)["leases"][0]["fencing_token"]
    node.complete(att, token, T0 + 2 * MIN + 1)
    [d_run] = downstream(node, "d")
    assert d_run["upstream"] == b_run


def test_the_lease_of_a_chained_run_names_its_upstream(node):
    node.create("a")
    put(node, chained("b", "a"))
    up = run_upstream(node, T0 + MIN)
    run = downstream(node, "b")[0]["id"]
    [lease] = node.lease([identity.attempt_id(run, 1)], T0 + 2 * MIN)["leases"]
    assert lease["upstream"] == {"job_id": "a", "occurrence_id": up, "outcome": "succeeded"}
    other = node.lease([identity.attempt_id(occ("a", T0 + MIN), 1)], T0 + 2 * MIN)
    assert all("upstream" not in item for item in other["leases"])


def test_a_paused_follower_accounts_for_the_run_as_skipped(node):
    node.create("a")
    put(node, chained("b", "a", paused=True))
    run_upstream(node, T0 + MIN)
    [run] = downstream(node, "b")
    assert (run["status"], run["reason"]) == ("skipped", "paused")
    assert node.attempt(identity.attempt_id(run["id"], 1)) is None


def test_a_forbidding_follower_with_a_run_going_skips_the_next(node):
    node.create("a")
    put(node, chained("b", "a", overlap_policy="forbid"))
    run_upstream(node, T0 + MIN)
    first = downstream(node, "b")[0]["id"]
    node.lease([identity.attempt_id(first, 1)], T0 + MIN + 100)
    run_upstream(node, T0 + 2 * MIN)
    runs = {r["id"]: r for r in downstream(node, "b")}
    [second] = [r for i, r in runs.items() if i != first]
    assert (second["status"], second["reason"]) == ("skipped", "overlap")


@pytest.mark.parametrize(("make", "field", "message"), [
    (lambda n: chained("b", "missing"), "after.job", "does not exist in tenant 'default'"),
    (lambda n: chained("b", "x", tenant="t2"), "after.job", "does not exist in tenant 't2'"),
])
def test_a_chain_to_a_missing_or_foreign_job_is_refused(node, make, field, message):
    node.create("x")
    r = put(node, make(node))
    assert r["ok"] is False and r["rejected"] == errors.INVALID_REFERENCE
    assert r["field"] == field and message in r["message"]
    assert node.one("SELECT count(*) FROM jobs WHERE id = 'b'")[0] == 0


def test_a_cycle_is_refused_at_any_length(node):
    node.create("a")
    for job, up in (("b", "a"), ("c", "b"), ("d", "c")):
        assert put(node, chained(job, up))["ok"]
    before = node.job_spec("a")
    r = put(node, chained("a", "d"), create=False)
    assert r["rejected"] == errors.INVALID_REFERENCE and r["field"] == "after.job"
    assert r["message"] == "a cycle: a after d after c after b after a"
    assert node.job_spec("a") == before
    # Following itself is refused before anything is proposed.
    with pytest.raises(ValueError, match="after.job: a job cannot run after itself"):
        chained("a", "a")


def test_a_chain_deeper_than_the_bound_is_refused(node):
    node.create("j0")
    for i in range(1, 33):
        assert put(node, chained(f"j{i}", f"j{i - 1}"))["ok"], i
    r = put(node, chained("j33", "j32"))
    assert r["rejected"] == errors.INVALID_REFERENCE and "longer than 32" in r["message"]


def test_an_upstream_recreated_in_another_tenant_starts_nothing(node):
    node.create("a")
    put(node, chained("b", "a"))
    node.apply(c.DeleteJob(node.rid(), T0 + 1, "a"))
    node.create("a", now=T0 + 2, tenant="t2")
    run_upstream(node, T0 + MIN)
    assert downstream(node, "b") == []


def test_chains_need_protocol_level_2():
    put_job = c.PutJob("r", T0, chained("b", "a"), True)
    assert unmet(put_job, 1).feature == "chains" and unmet(put_job, 2) is None



def test_an_upstream_takes_at_most_max_followers(node):
    from raftcron.core.chains import MAX_FOLLOWERS
    node.create("a")
    for i in range(MAX_FOLLOWERS):
        assert put(node, chained(f"f{i}", "a"))["ok"]
    r = put(node, chained("one-more", "a"))
    assert r["rejected"] == errors.QUOTA_EXCEEDED and r["field"] == "after.job"
    assert f"already has {MAX_FOLLOWERS} chained jobs" in r["message"]
    # A follower's own edit is not counted against it.
    assert put(node, chained("f0", "a", "finish"), create=False)["ok"]


def test_a_follower_of_a_deleted_upstream_stays_editable(node):
    node.create("a")
    put(node, chained("b", "a"))
    node.apply(c.DeleteJob(node.rid(), T0 + 1, "a"))
    assert put(node, chained("b", "a", max_attempts=5), create=False)["ok"]
    r = put(node, chained("b", "gone"), create=False)  # a new upstream is judged
    assert r["rejected"] == errors.INVALID_REFERENCE
