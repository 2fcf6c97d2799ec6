"""POST /v1/alerts/{id}/ack and /resolve through the real app, codec and state machine,
with real bearer tokens: who may act, what the history keeps, what is refused."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftcron.core import commands as c
from raftcron.core.model import parse_job
from raftcron.state.digest import digest
from tests.integration.inprocess import InProcessNode, api_fixture

T0 = 1_767_225_600_000


class Cluster:
    """One in-process node with jobs of two tenants, alerts on them, and tokens."""

    def __init__(self, root: Path) -> None:
        self.node = InProcessNode(root)
        self.tokens = self.node.require_tokens(root)
        self.apply(c.BeginEpoch(1, "n1", T0))
        for job_id, tenant in (("invoices", "acme"), ("payroll", "other")):
            spec = parse_job({"id": job_id, "tenant": tenant, "schedule": "0 9 * * *",
                              "target": {"shell": "true"}}).to_spec()
            assert self.apply(c.PutJob(f"put-{job_id}", T0, spec, True))["ok"]
        self.raise_alert("deadline:invoices", "invoices")
        self.raise_alert("deadline:payroll", "payroll")
        self.raise_alert("webhook:dead", None)

    def apply(self, cmd: c.Command) -> dict[str, Any]:
        return self.node.machine.apply(self.node.machine.last_applied + 1, cmd)

    def raise_alert(self, alert_id: str, job_id: str | None, now: int = T0) -> None:
        assert self.apply(c.RaiseAlert(1, now, alert_id, "deadline", job_id=job_id,
                                       reason="missed", message="did not run"))["ok"]

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def q(self, sql: str, params: tuple = ()) -> list[tuple]:
        return self.node.writer.execute(sql, params).fetchall()


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


api = api_fixture("cluster")


async def act(api: httpx.AsyncClient, cluster: Cluster, who: str, alert_id: str, action: str,
              body: Any = None, key: str | None = None) -> httpx.Response:
    headers = cluster.auth(who)
    if key:
        headers["Idempotency-Key"] = key
    return await api.post(f"/v1/alerts/{alert_id}/{action}", headers=headers,
                          json={"note": "looking"} if body is None else body)


async def listed(api: httpx.AsyncClient, cluster: Cluster, alert_id: str) -> dict[str, Any]:
    resp = await api.get("/v1/alerts", params={"status": "all"}, headers=cluster.auth("ops"))
    assert resp.status_code == 200
    return next(a for a in resp.json()["alerts"] if a["id"] == alert_id)


async def test_ack_then_resolve_keeps_both_with_who_and_note(
        api: httpx.AsyncClient, cluster: Cluster) -> None:
    resp = await act(api, cluster, "ops", "deadline:invoices", "ack",
                     {"note": "on it, disk full on db-2"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "open"
    assert body["acknowledged"]["by"] == "ops"
    assert body["acknowledged"]["note"] == "on it, disk full on db-2"

    shown = await listed(api, cluster, "deadline:invoices")
    assert shown["acknowledged"] == body["acknowledged"]
    resp = await act(api, cluster, "ops", "deadline:invoices", "resolve",
                     {"note": "reran by hand"})
    assert resp.status_code == 200, resp.text
    shown = await listed(api, cluster, "deadline:invoices")
    assert shown["status"] == "resolved" and shown["resolved_at"] is not None
    assert [(h["event"], h.get("by"), h.get("note")) for h in shown["history"]] == [
        ("raised", None, None),
        ("acknowledged", "ops", "on it, disk full on db-2"),
        ("resolved", "ops", "reran by hand"),
    ]
    # Receivers hear of a resolve by hand as of any other, and from whom.
    payloads = [json.loads(p) for (p,) in cluster.q(
        "SELECT payload FROM outbox WHERE event = 'alert.resolved'")]
    assert [(p["alert_id"], p["by"], p["message"]) for p in payloads] == [
        ("deadline:invoices", "ops", "reran by hand")]


async def test_a_resolved_alert_refuses_ack_and_resolve_and_a_second_ack_is_refused(
        api: httpx.AsyncClient, cluster: Cluster) -> None:
    assert (await act(api, cluster, "ops", "deadline:invoices", "ack")).status_code == 200
    again = await act(api, cluster, "acme-bot", "deadline:invoices", "ack")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "invalid_state"
    assert "already acknowledged by ops" in again.json()["error"]["message"]
    assert (await act(api, cluster, "ops", "deadline:invoices", "resolve")).status_code == 200
    for action in ("resolve", "ack"):
        resp = await act(api, cluster, "ops", "deadline:invoices", action)
        assert resp.status_code == 409, action
        assert resp.json()["error"] == {"code": "invalid_state", "field": "id",
                                        "message": "alert 'deadline:invoices' is already "
                                                   "resolved"}
    assert len(cluster.q("SELECT 1 FROM alert_actions")) == 2


async def test_a_replayed_idempotency_key_acks_once(api: httpx.AsyncClient,
                                                    cluster: Cluster) -> None:
    first = await act(api, cluster, "acme-bot", "deadline:invoices", "ack", key="k1")
    second = await act(api, cluster, "acme-bot", "deadline:invoices", "ack", key="k1")
    assert first.status_code == second.status_code == 200, second.text
    assert second.json()["acknowledged"] == first.json()["acknowledged"]
    assert cluster.q("SELECT action, who FROM alert_actions") == [("acknowledged", "acme-bot")]
    # The same key with another note is another request, refused rather than replayed.
    other = await act(api, cluster, "acme-bot", "deadline:invoices", "ack",
                      {"note": "something else"}, key="k1")
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    # Another principal's same key is its own request: decided afresh (already acked).
    assert (await act(api, cluster, "ops", "deadline:invoices", "ack",
                      key="k1")).status_code == 409


async def test_a_tenant_acts_on_its_own_jobs_alerts_only(api: httpx.AsyncClient,
                                                        cluster: Cluster) -> None:
    resp = await act(api, cluster, "acme-bot", "deadline:invoices", "ack")
    assert resp.status_code == 200 and resp.json()["acknowledged"]["by"] == "acme-bot"
    for alert_id in ("deadline:payroll", "webhook:dead"):  # another tenant's; a cluster one
        for action in ("ack", "resolve"):
            resp = await act(api, cluster, "acme-bot", alert_id, action)
            assert resp.status_code == 404, (alert_id, action)
            assert resp.json()["error"]["field"] == "id"
    assert (await listed(api, cluster, "deadline:payroll"))["acknowledged"] is None
    assert (await listed(api, cluster, "webhook:dead"))["status"] == "open"


async def test_read_and_worker_tokens_never_act(api: httpx.AsyncClient,
                                                cluster: Cluster) -> None:
    for who in ("reader", "runner"):
        for action in ("ack", "resolve"):
            resp = await act(api, cluster, who, "deadline:invoices", action)
            assert resp.status_code == 403, (who, action)
            assert resp.json()["error"]["code"] == "forbidden"
    assert cluster.q("SELECT 1 FROM alert_actions") == []
    unauthenticated = await api.post("/v1/alerts/deadline:invoices/ack", json={"note": "x"})
    assert unauthenticated.status_code == 401


async def test_apply_checks_the_tenant_on_the_committed_alert(cluster: Cluster) -> None:
    """The API check runs before proposing; apply decides again on the stored alert (a
    job moved to another tenant in between is refused, the same on every node)."""
    refused = cluster.apply(c.AlertAction("r1", T0, "deadline:invoices", "ack", "other-bot",
                                          "mine?", tenants=["other"]))
    assert refused["rejected"] == "not_found"
    assert cluster.apply(c.AlertAction("r2", T0, "deadline:invoices", "ack", "acme-bot",
                                       "mine", tenants=["acme"]))["ok"]
    cluster.node.close()


@pytest.mark.parametrize(("body", "field"), [
    ({}, "note"),
    ({"note": ""}, "note"),
    ({"note": "   "}, "note"),
    ({"note": 5}, "note"),
    ({"note": "x" * 1001}, "note"),
    ({"note": "ok", "who": "someone-else"}, "who"),
    ([], "body"),
])
async def test_bad_input_is_a_400_naming_the_field(api: httpx.AsyncClient, cluster: Cluster,
                                                   body: Any, field: str) -> None:
    resp = await act(api, cluster, "ops", "deadline:invoices", "ack", body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["field"] == field
    assert cluster.q("SELECT 1 FROM alert_actions") == []


async def test_no_body_and_unknown_alert(api: httpx.AsyncClient, cluster: Cluster) -> None:
    resp = await api.post("/v1/alerts/deadline:invoices/ack", headers=cluster.auth("ops"))
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "body"
    resp = await act(api, cluster, "ops", "deadline:nope", "resolve")
    assert resp.status_code == 404
    assert resp.json()["error"] == {"code": "not_found", "field": "id",
                                    "message": "alert 'deadline:nope' does not exist"}


async def test_raising_again_clears_the_acknowledgement(api: httpx.AsyncClient,
                                                        cluster: Cluster) -> None:
    assert (await act(api, cluster, "ops", "deadline:invoices", "ack")).status_code == 200
    later = int(time.time() * 1000) + 1000  # after the ack, which the API stamped now
    assert cluster.apply(c.ResolveAlert(1, later, "deadline:invoices", "it ran"))["ok"]
    cluster.raise_alert("deadline:invoices", "invoices", now=later + 1)
    shown = await listed(api, cluster, "deadline:invoices")
    assert shown["status"] == "open" and shown["acknowledged"] is None
    assert [h["event"] for h in shown["history"]] == [
        "raised", "acknowledged", "resolved", "raised"]
    assert (await act(api, cluster, "ops", "deadline:invoices", "ack")).status_code == 200


def test_an_empty_actions_table_leaves_the_digest_as_before(cluster: Cluster) -> None:
    """A node of the previous version has no alert_actions table: until someone acts on
    an alert, both digest alike (a rolling upgrade waits for equal digests)."""
    conn: sqlite3.Connection = cluster.node.writer
    with_table = digest(conn)
    conn.execute("DROP TABLE alert_actions")
    assert digest(conn) == with_table
    cluster.node.close()


def test_a_database_from_before_acknowledgements_opens_and_acks(tmp_path: Path) -> None:
    """An alerts table without the ack columns (and no alert_actions table) is brought up
    to date when opened; its alerts list and can be acknowledged."""
    from raftcron.state.db import open_writer
    from raftcron.state.machine import StateMachine

    path = str(tmp_path / "old.db")
    old = open_writer(path)
    old.execute("DROP TABLE alert_actions")
    old.execute("ALTER TABLE alerts DROP COLUMN ack_note")
    old.execute("ALTER TABLE alerts DROP COLUMN acked_by")
    old.execute("ALTER TABLE alerts DROP COLUMN acked_ms")
    # The row as the previous version wrote it.
    old.execute("INSERT INTO alerts (id, kind, reason, status, raised_ms) "
                "VALUES ('webhook:dead', 'webhook', 'dead', 'open', ?)", (T0,))
    before = digest(old)
    old.close()

    upgraded = open_writer(path)
    assert digest(upgraded) == before  # the new, empty columns and table change nothing
    machine = StateMachine(upgraded)
    assert machine.apply(1, c.AlertAction("r", T0 + 1, "webhook:dead", "ack", "ops", "on it"))[
        "ok"]
    assert upgraded.execute("SELECT acked_by, ack_note FROM alerts").fetchall() == [
        ("ops", "on it")]
    upgraded.close()
