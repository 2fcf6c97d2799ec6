"""Webhook delivery against real nodes: per-tenant keys, the generated cluster key, dead
deliveries listed and retried by an admin, and who may do none of that."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job
from tests.system.test_operability import Receiver, configure

pytestmark = pytest.mark.system

NEVER = "0 0 1 1 *"  # the job runs only when triggered


@pytest.fixture(scope="module")
def receivers() -> Iterator[tuple[Receiver, Receiver]]:
    ops, dead = Receiver(), Receiver()
    dead.status = 503
    try:
        yield ops, dead
    finally:
        ops.close()
        dead.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory,
            receivers: tuple[Receiver, Receiver]) -> Iterator[LocalCluster]:
    ops, _ = receivers
    c = LocalCluster(Path(tmp_path_factory.mktemp("outbox")))
    # No webhook_secret_file: the cluster key is generated and replicated. One failed
    # try makes a delivery dead, so the test does not wait for a day.
    configure(c, [f'webhooks = ["{ops.url}/hook/ops"]', "outbox_give_up_attempts = 1"])
    c.start()
    c.wait_leader(timeout=30)
    c.wait_serving()
    c.start_worker("w1")
    try:
        yield c
    finally:
        c.close()


def verifies(key: str, request: dict[str, Any]) -> bool:
    expected = "sha256=" + hmac.new(key.encode(), request["body"], hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, request["headers"]["x-raftcron-signature"])


def hooks_of(receiver: Receiver, path: str, event: str) -> list[dict[str, Any]]:
    return [r for r in receiver.hooks() if r["path"] == path
            and json.loads(r["body"])["event"] == event]


def trigger(c: LocalCluster, job_id: str) -> None:
    resp = c.post(c.ids[0], f"/v1/jobs/{job_id}/trigger")
    assert resp.status_code == 202, resp.text


def cluster_key(c: LocalCluster) -> str:
    def got() -> str | None:
        resp = c.http.get(c.urls[c.ids[1]] + "/v1/webhook-key")
        return resp.json()["key"] if resp.status_code == 200 else None
    return wait_until(got, 20, message="the generated cluster webhook key")


def dead_gauge(c: LocalCluster) -> float:
    text = c.http.get(c.urls[c.ids[0]] + "/metrics").text
    return next(s.value for f in text_string_to_metric_families(text)
                if f.name == "raftcron_outbox_dead_deliveries" for s in f.samples)


def test_every_node_sees_one_generated_cluster_key(cluster: LocalCluster) -> None:
    key = cluster_key(cluster)
    for nid in cluster.ids:
        resp = cluster.http.get(cluster.urls[nid] + "/v1/webhook-key",
                                params={"consistent": "true"})
        assert resp.json() == {"key": key, "source": "generated"}
    secret = (cluster.root / "cluster.secret").read_text().strip()
    assert key != secret


ADMIN_ONLY = [("GET", "/v1/outbox"), ("GET", "/v1/outbox?status=pending"),
              ("POST", "/v1/outbox/1/retry"), ("PUT", "/v1/tenants/acme/webhook-key"),
              ("GET", "/v1/tenants/acme/webhook-key"), ("GET", "/v1/webhook-key")]


@pytest.mark.parametrize("scope", ["tenant:acme", "read", "worker"])
def test_only_an_admin_reaches_the_outbox_and_webhook_keys(cluster: LocalCluster,
                                                           scope: str) -> None:
    token = cluster.create_token(scope, name=f"not-admin-{scope}")
    for method, path in ADMIN_ONLY:
        resp = httpx.request(method, cluster.urls[cluster.ids[0]] + path,
                             headers=cluster.auth_headers(token), timeout=10)
        assert resp.status_code == 403, (scope, method, path, resp.text)
        assert resp.json()["error"]["code"] == "forbidden"
        assert "key" not in resp.json()


@pytest.mark.parametrize(("method", "path", "field"), [
    ("GET", "/v1/outbox?status=delivered", "status"),
    ("GET", "/v1/outbox?limit=0", "limit"),
    ("GET", "/v1/outbox?cursor=x", "cursor"),
    ("POST", "/v1/outbox/abc/retry", "id"),
    ("POST", "/v1/outbox/99999999999999999999/retry", "id"),
    ("PUT", "/v1/tenants/a%20b/webhook-key", "name"),
])
def test_bad_outbox_input_is_a_400_naming_the_field(cluster: LocalCluster, method: str,
                                                    path: str, field: str) -> None:
    resp = cluster.http.request(method, cluster.urls[cluster.ids[0]] + path)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["field"] == field


def test_retry_body_and_unknown_rows(cluster: LocalCluster) -> None:
    url = cluster.urls[cluster.ids[0]]
    resp = cluster.http.post(url + "/v1/outbox/1/retry", json={"receiver": 5})
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "receiver"
    resp = cluster.http.post(url + "/v1/outbox/1/retry", json={"nope": 1})
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "nope"
    resp = cluster.http.post(url + "/v1/outbox/4000000/retry")
    assert resp.status_code == 404 and resp.json()["error"]["field"] == "id"


def test_tenant_notify_is_signed_with_the_tenant_key_not_the_cluster_key(
        cluster: LocalCluster, receivers: tuple[Receiver, Receiver]) -> None:
    ops, _ = receivers
    key = cluster_key(cluster)
    rotated = cluster.http.put(cluster.urls[cluster.ids[2]] + "/v1/tenants/acme/webhook-key")
    assert rotated.status_code == 200, rotated.text
    acme_key = rotated.json()["key"]
    assert rotated.json()["source"] == "rotated" and acme_key != key
    shown = cluster.get(cluster.ids[0], "/v1/tenants/acme/webhook-key",
                        params={"consistent": "true"})
    assert shown["key"] == acme_key
    add_job(cluster, cluster.ids[0], "acme-fails", cron=NEVER, tenant="acme",
            target={"shell": "false"}, max_attempts=1, notify=[f"{ops.url}/hook/acme"])
    trigger(cluster, "acme-fails")
    tenant_hook = wait_until(lambda: hooks_of(ops, "/hook/acme", "occurrence.failed"), 30,
                             message="the tenant's occurrence.failed webhook")[0]
    assert verifies(acme_key, tenant_hook) and not verifies(key, tenant_hook)
    ops_hook = wait_until(
        lambda: [r for r in hooks_of(ops, "/hook/ops", "occurrence.failed")
                 if r["body"] == tenant_hook["body"]], 30, message="the cluster copy")[0]
    assert verifies(key, ops_hook) and not verifies(acme_key, ops_hook)


def test_a_dead_receiver_is_listed_alerted_and_retried_by_an_admin(
        cluster: LocalCluster, receivers: tuple[Receiver, Receiver]) -> None:
    ops, dead = receivers
    receiver = f"{dead.url}/hook/x?token=t0ps3cret"
    add_job(cluster, cluster.ids[0], "to-dead", cron=NEVER, target={"shell": "false"},
            max_attempts=1, notify=[receiver])
    trigger(cluster, "to-dead")

    def dead_rows() -> list[dict[str, Any]]:
        rows = cluster.get(cluster.ids[1], "/v1/outbox", params={"status": "dead"})
        return [d for d in rows["deliveries"] if d["receiver"] == receiver]
    row = wait_until(dead_rows, 30, message="the dead delivery listed")[0]
    assert row["event"] == "occurrence.failed" and row["attempts"] == 1
    assert row["last_error"] == "HTTP 503" and row["signer"] == "tenant:default"
    alert_id = "webhook_dead:" + hashlib.sha256(receiver.encode()).hexdigest()[:16]
    alert = wait_until(lambda: [r for r in hooks_of(ops, "/hook/ops", "alert.raised")
                                if json.loads(r["body"])["data"]["alert_id"] == alert_id],
                       30, message="the receiver's alert at the other receiver")[0]
    assert "t0ps3cret" not in alert["body"].decode()
    alerts = cluster.get(cluster.ids[0], "/v1/alerts", params={"status": "open"})["alerts"]
    assert alert_id in {a["id"] for a in alerts}
    assert dead_gauge(cluster) == 1

    dead.status = 200
    before = len(dead.hooks())
    resp = cluster.post(cluster.ids[2], f"/v1/outbox/{row['id']}/retry",
                        {"receiver": receiver})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"id": row["id"], "retried": 1}
    wait_until(lambda: len(dead.hooks()) > before, 30, message="the retried delivery")
    wait_until(lambda: not dead_rows(), 30, message="no longer dead")
    wait_until(lambda: alert_id in {a["id"] for a in cluster.get(
        cluster.ids[0], "/v1/alerts", params={"status": "resolved"})["alerts"]}, 30,
        message="the receiver's alert resolved")
    assert dead_gauge(cluster) == 0
    again = cluster.post(cluster.ids[0], f"/v1/outbox/{row['id']}/retry")
    assert again.status_code == 409 and again.json()["error"]["field"] == "id"


def test_a_replayed_rotation_key_rotates_once_and_never_answers_another_principal(
        cluster: LocalCluster) -> None:
    url = cluster.urls[cluster.ids[0]] + "/v1/tenants/replay/webhook-key"
    key_header = {"Idempotency-Key": "rotate-replay-1"}
    first = cluster.http.put(url, headers=key_header)
    again = cluster.http.put(url, headers=key_header)
    assert first.status_code == again.status_code == 200
    assert again.json()["key"] == first.json()["key"], "the same rotation, not a second one"
    tenant = cluster.create_token("tenant:replay", name="replayer")
    stolen = httpx.put(url, headers={**cluster.auth_headers(tenant), **key_header}, timeout=10)
    assert stolen.status_code == 403 and first.json()["key"] not in stolen.text
    fresh = cluster.http.put(url, headers={"Idempotency-Key": "rotate-replay-2"})
    assert fresh.json()["key"] != first.json()["key"]
