"""POST /v1/occurrences/{id}/cancel and /v1/concurrency-groups through the real app, codec
and state machine, with real tokens: who may act, what is refused, and how."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from raftcron.core import commands as c
from raftcron.core import identity
from raftcron.core.model import parse_job
from tests.integration.inprocess import InProcessNode, api_fixture

T0 = 1_767_225_600_000
AT = T0 + 60_000


class Cluster:
    """One in-process node with a queued and a running run in each of two tenants."""

    def __init__(self, root: Path) -> None:
        self.node = InProcessNode(root)
        self.tokens = self.node.require_tokens(root)
        self.apply(c.BeginEpoch(1, "n1", T0))
        for job_id, tenant in (("invoices", "acme"), ("payroll", "other"),
                               ("reports", "acme")):
            spec = parse_job({"id": job_id, "tenant": tenant, "schedule": "* * * * *",
                              "concurrency_group": "db", "target": {"shell": "true"}}).to_spec()
            assert self.apply(c.PutJob(f"put-{job_id}", T0, spec, True))["ok"]
        assert self.apply(c.Claim(1, AT, [[j, 1, AT, AT, "fire"] for j in
                                          ("invoices", "payroll", "reports")]))["ok"]
        self.token = self.apply(c.Lease(1, AT, "w1", [self.att("invoices")]))["leases"][0][
            "fencing_token"]

    @staticmethod
    def occ(job: str) -> str:
        return identity.scheduled_occurrence_id(job, AT)

    def att(self, job: str) -> str:
        return identity.attempt_id(self.occ(job), 1)

    def apply(self, cmd: c.Command) -> dict[str, Any]:
        return self.node.machine.apply(self.node.machine.last_applied + 1, cmd)

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def status(self, job: str) -> str:
        return self.node.writer.execute("SELECT status FROM occurrences WHERE id = ?",
                                        (self.occ(job),)).fetchone()[0]


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


api = api_fixture("cluster")


async def cancel(api: httpx.AsyncClient, cluster: Cluster, who: str, job: str,
                 body: Any = None, key: str | None = None) -> httpx.Response:
    headers = cluster.auth(who)
    if key:
        headers["Idempotency-Key"] = key
    return await api.post(f"/v1/occurrences/{cluster.occ(job)}/cancel", headers=headers,
                          json={"note": "wrong month"} if body is None else body)


# --- cancel ------------------------------------------------------------------------------

async def test_the_tenant_cancels_its_queued_run_and_the_api_says_who(api, cluster):
    resp = await cancel(api, cluster, "acme-bot", "reports")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "cancelled" and body["reason"] == "cancelled by acme-bot"
    assert body["cancellation"]["by"] == "acme-bot"
    assert body["cancellation"]["note"] == "wrong month"
    got = (await api.get(f"/v1/occurrences/{cluster.occ('reports')}",
                         headers=cluster.auth("reader"))).json()
    assert got["cancellation"]["by"] == "acme-bot"
    assert got["attempt_list"][0]["status"] == "cancelled"


async def test_a_running_run_is_asked_to_stop(api, cluster):
    resp = await cancel(api, cluster, "ops", "invoices")
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "running" and resp.json()["cancel_requested"] is True
    hb = await api.post("/v1/heartbeats", headers=cluster.auth("runner"), json={
        "worker_id": "w1", "attempts": [{"attempt_id": cluster.att("invoices"),
                                         "fencing_token": cluster.token}]})
    assert hb.json()["results"][0]["cancel"] is True


async def test_another_tenants_run_is_not_found_and_unchanged(api, cluster):
    resp = await cancel(api, cluster, "other-bot", "reports")
    assert resp.status_code == 404 and resp.json()["error"]["field"] == "id"
    assert cluster.status("reports") == "pending"


@pytest.mark.parametrize("who", ["reader", "runner"])
async def test_a_read_or_worker_token_may_not_cancel(api, cluster, who):
    resp = await cancel(api, cluster, who, "reports")
    assert resp.status_code == 403, resp.text
    assert cluster.status("reports") == "pending"


async def test_a_finished_run_is_409_naming_its_state(api, cluster):
    done = c.Complete(AT + 5, "w1", [[cluster.att("invoices"), cluster.token, "succeeded", 0,
                                     ""]])
    assert cluster.apply(done)["ok"]
    resp = await cancel(api, cluster, "ops", "invoices")
    assert resp.status_code == 409
    err = resp.json()["error"]
    assert err["code"] == "invalid_state" and err["field"] == "status"
    assert "succeeded" in err["message"]


async def test_a_replayed_key_replays_and_the_same_key_for_another_run_is_refused(api, cluster):
    first = await cancel(api, cluster, "acme-bot", "reports", key="k1")
    assert first.status_code == 200
    again = await cancel(api, cluster, "acme-bot", "reports", key="k1")
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    other = await cancel(api, cluster, "acme-bot", "reports", {"note": "another"}, key="k1")
    assert other.status_code == 422
    # The same key from another tenant's token is another request, checked on its own.
    foreign = await cancel(api, cluster, "other-bot", "reports", key="k1")
    assert foreign.status_code == 404


@pytest.mark.parametrize(("body", "field"), [
    ({}, "note"), ({"note": "  "}, "note"), ({"note": "n" * 1001}, "note"),
    ({"note": "x", "force": True}, "force"), ([], "body")])
async def test_bad_cancel_bodies_name_the_field(api, cluster, body, field):
    resp = await cancel(api, cluster, "ops", "reports", body)
    assert resp.status_code == 400 and resp.json()["error"]["field"] == field
    assert cluster.status("reports") == "pending"


async def test_an_unknown_run_is_404(api, cluster):
    resp = await api.post("/v1/occurrences/nope@x/cancel", headers=cluster.auth("ops"),
                          json={"note": "x"})
    assert resp.status_code == 404


# --- concurrency groups ------------------------------------------------------------------

async def test_a_tenant_sets_its_groups_limit_and_sees_holders_and_waiters(api, cluster):
    resp = await api.put("/v1/concurrency-groups/db", headers=cluster.auth("acme-bot"),
                         json={"limit": 1})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert (body["tenant"], body["limit"], body["configured"]) == ("acme", 1, True)
    assert [h["job_id"] for h in body["holders"]] == ["invoices"]
    assert body["holders"][0]["worker_id"] == "w1"
    assert [w["job_id"] for w in body["waiters"]] == ["reports"]
    assert (body["holding"], body["waiting"]) == (1, 1)
    assert body["jobs"] == ["invoices", "reports"]  # not the other tenant's payroll


async def test_groups_are_per_tenant_in_reads(api, cluster):
    await api.put("/v1/concurrency-groups/db", headers=cluster.auth("acme-bot"),
                  json={"limit": 3})
    listed = (await api.get("/v1/concurrency-groups", headers=cluster.auth("other-bot"))).json()
    assert listed["concurrency_groups"] == [{
        "tenant": "other", "name": "db", "limit": 1, "configured": False, "updated_at": None,
        "holding": 0, "waiting": 1}]
    admin = (await api.get("/v1/concurrency-groups", headers=cluster.auth("ops"))).json()
    assert [(g["tenant"], g["limit"]) for g in admin["concurrency_groups"]] == [
        ("acme", 3), ("other", 1)]
    hidden = await api.get("/v1/concurrency-groups/db", params={"tenant": "acme"},
                           headers=cluster.auth("other-bot"))
    assert hidden.status_code == 404


async def test_another_tenants_group_may_not_be_set(api, cluster):
    resp = await api.put("/v1/concurrency-groups/db", headers=cluster.auth("other-bot"),
                         json={"limit": 100, "tenant": "acme"})
    assert resp.status_code == 403
    for who in ("reader", "runner"):
        resp = await api.put("/v1/concurrency-groups/db", headers=cluster.auth(who),
                             json={"limit": 2})
        assert resp.status_code == 403
    assert cluster.node.writer.execute("SELECT count(*) FROM concurrency_groups"
                                       ).fetchone()[0] == 0


@pytest.mark.parametrize(("body", "field"), [
    ({}, "limit"), ({"limit": 0}, "limit"), ({"limit": 10_001}, "limit"),
    ({"limit": 1.5}, "limit"), ({"limit": "2"}, "limit"), ({"limit": 2, "tenant": "a b"},
                                                           "tenant"),
    ({"limit": 2, "max": 3}, "max")])
async def test_bad_group_bodies_name_the_field(api, cluster, body, field):
    resp = await api.put("/v1/concurrency-groups/db", headers=cluster.auth("ops"), json=body)
    assert resp.status_code == 400 and resp.json()["error"]["field"] == field


async def test_a_job_names_its_group_and_a_bad_name_is_refused(api, cluster):
    job = {"id": "x", "tenant": "acme", "schedule": "0 9 * * *", "target": {"shell": "true"}}
    bad = await api.post("/v1/jobs", headers=cluster.auth("ops"),
                         json={**job, "concurrency_group": "a b"})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "concurrency_group"
    ok = await api.post("/v1/jobs", headers=cluster.auth("ops"),
                        json={**job, "concurrency_group": "db"})
    assert ok.status_code == 201 and ok.json()["concurrency_group"] == "db"
    plain = await api.post("/v1/jobs", headers=cluster.auth("ops"), json={**job, "id": "y"})
    assert plain.json()["concurrency_group"] is None
