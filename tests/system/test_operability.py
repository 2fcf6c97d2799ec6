"""Operability end to end: deadline alerts, signed webhooks across failover, /metrics."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from raftcron.core.timefmt import parse_iso_ms
from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job

pytestmark = pytest.mark.system

HOOK_SECRET = "webhook-secret-for-tests-0123456789"


class _Server(ThreadingHTTPServer):
    # The outbox sends up to 16 requests at once per receiver: with the default listen
    # backlog of 5, a loaded machine dropped connection attempts, the sender timed out,
    # and a test counted 147 of 150 deliveries.
    request_queue_size = 128
    daemon_threads = True


class Receiver:
    """A tiny HTTP server on 127.0.0.1 that records every request it gets."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                with receiver.lock:
                    status = receiver.status if self.path.startswith("/hook") else 200
                    receiver.requests.append({
                        "method": self.command, "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body, "answered": status, "at": time.time()})
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            do_POST = _record
            do_GET = _record

            def log_message(self, *args: Any) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def hooks(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if r["path"].startswith("/hook")]

    def pings(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if r["path"].startswith("/watchdog")]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def configure(c: LocalCluster, lines: list[str]) -> None:
    """Put top-level keys before the [[peers]] tables of every node config."""
    for path in c.configs:
        path.write_text("\n".join(lines) + "\n" + path.read_text())


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


@pytest.fixture
def hooked(tmp_path: Path, receiver: Receiver) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path)
    (tmp_path / "hook.secret").write_text(HOOK_SECRET + "\n")
    configure(c, [f'webhooks = ["{receiver.url}/hook"]', 'webhook_secret_file = "hook.secret"',
                  f'watchdog_url = "{receiver.url}/watchdog"', "watchdog_interval_s = 2"])
    c.start()
    c.wait_leader(timeout=30)
    try:
        yield c
    finally:
        c.close()


def signature(body: bytes) -> str:
    return "sha256=" + hmac.new(HOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()


def open_alerts(c: LocalCluster, nid: str, job_id: str, status: str = "open"
                ) -> list[dict[str, Any]]:
    return c.get(nid, "/v1/alerts", params={"status": status, "job_id": job_id})["alerts"]


def test_missed_deadline_alerts_signed_webhook_and_resolves(hooked: LocalCluster,
                                                             receiver: Receiver) -> None:
    c = hooked
    leader = c.wait_leader()
    follower = next(n for n in c.ids if n != leader)
    add_job(c, leader, "nightly", cron="* * * * * *", deadline_s=1, queue="unstaffed")
    alerts = wait_until(lambda: open_alerts(c, follower, "nightly"), 20,
                        message="a deadline alert")
    assert c.post(leader, "/v1/jobs/nightly/pause").status_code == 200
    alert = alerts[-1]
    assert alert["kind"] == "deadline" and alert["reason"] == "missed"
    assert alert["id"] == f"deadline:{alert['occurrence_id']}"
    assert alert["scheduled_for"] and alert["occurrence_id"].endswith(alert["scheduled_for"])
    assert alert["history"][0]["event"] == "raised"

    def raised_hook() -> dict[str, Any] | None:
        for r in receiver.hooks():
            doc = json.loads(r["body"])
            if doc["event"] == "alert.raised" and doc["data"]["alert_id"] == alert["id"]:
                return r
        return None

    hook = wait_until(raised_hook, 15, message="the signed alert.raised webhook")
    body = hook["body"]
    assert hook["method"] == "POST"
    assert hook["headers"]["content-type"] == "application/json"
    assert hmac.compare_digest(hook["headers"]["x-raftcron-signature"], signature(body))
    doc = json.loads(body)
    assert hook["headers"]["idempotency-key"] == (
        f"{doc['id']}-{parse_iso_ms(doc['created_at'], 'created_at')}")
    assert doc["data"] == {
        "alert_id": alert["id"], "kind": "deadline", "job_id": "nightly",
        "occurrence_id": alert["occurrence_id"], "reason": "missed",
        "scheduled_for": alert["scheduled_for"], "message": alert["message"],
        "at_ms": doc["data"]["at_ms"]}
    assert body == json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    # A worker finally runs the pending occurrences: the alert resolves, and says so.
    c.start_worker("late-worker", queues="unstaffed")
    resolved = wait_until(
        lambda: [a for a in open_alerts(c, leader, "nightly", "resolved")
                 if a["id"] == alert["id"]], 30, message="the alert to resolve")[0]
    assert [h["event"] for h in resolved["history"]] == ["raised", "resolved"]
    assert resolved["resolved_at"] >= resolved["raised_at"]
    wait_until(lambda: any(json.loads(r["body"])["event"] == "alert.resolved"
                           for r in receiver.hooks()), 15, message="alert.resolved webhook")
    assert c.get(leader, "/v1/alerts", params={"status": "bogus"})["error"]["field"] == "status"

    # The leader pinged the watchdog after ticks, but not more than once per interval.
    pings = receiver.pings()
    assert pings, "no watchdog ping"
    gaps = [b["at"] - a["at"] for a, b in zip(pings, pings[1:], strict=False)]
    assert all(g > 1.5 for g in gaps), gaps


def test_pending_delivery_survives_leader_failover_with_the_same_key(
        hooked: LocalCluster, receiver: Receiver) -> None:
    c = hooked
    receiver.status = 503
    leader = c.wait_leader()
    add_job(c, leader, "flaky", cron="* * * * * *", deadline_s=1, queue="unstaffed")
    wait_until(lambda: receiver.hooks(), 20, message="a first (refused) delivery")
    assert c.post(leader, "/v1/jobs/flaky/pause").status_code == 200
    first = receiver.hooks()[0]
    key = first["headers"]["idempotency-key"]
    c.kill(leader)
    receiver.status = 200
    new_leader = c.wait_leader(timeout=30)
    assert new_leader != leader

    def delivered() -> dict[str, Any] | None:
        return next((r for r in receiver.hooks() if r["answered"] == 200
                     and r["headers"]["idempotency-key"] == key), None)

    again = wait_until(delivered, 30, message="the same row delivered by the new leader")
    assert again["body"] == first["body"]
    assert again["headers"]["x-raftcron-signature"] == signature(again["body"])

    def drained() -> bool:
        text = c.http.get(c.urls[new_leader] + "/metrics").text
        return "raftcron_outbox_pending 0.0" in text

    wait_until(drained, 60, interval=0.5, message="every outbox row delivered")
    keys = {r["headers"]["idempotency-key"] for r in receiver.hooks()}
    ok_keys = {r["headers"]["idempotency-key"] for r in receiver.hooks()
               if r["answered"] == 200}
    assert keys == ok_keys, "a row was never delivered"


def test_metrics_names_types_and_cluster_views(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path)
    c.start()
    try:
        leader = c.wait_leader(timeout=30)
        add_job(c, leader, "metered", cron="* * * * * *")
        c.start_worker("mw")
        wait_until(lambda: any(o["status"] == "succeeded"
                               for o in c.occurrences(leader, "metered")), 20,
                   message="a run")
        resp = c.http.get(c.urls[leader] + "/metrics")
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/plain")
        families = {f.name: f for f in text_string_to_metric_families(resp.text)}
        expected = {
            "raftcron_fire_lag_seconds": "histogram",
            "raftcron_occurrences": "gauge", "raftcron_attempts": "gauge",
            "raftcron_active_leases": "gauge", "raftcron_retry_attempts": "gauge",
            "raftcron_raft_term": "gauge", "raftcron_raft_commit_index": "gauge",
            "raftcron_raft_applied_index": "gauge", "raftcron_is_leader": "gauge",
            "raftcron_epoch_changes": "counter", "raftcron_open_alerts": "gauge",
            "raftcron_outbox_pending": "gauge", "raftcron_last_tick_timestamp_seconds": "gauge",
            "raftcron_clock_skew_seconds": "gauge", "raftcron_leases_granted": "counter",
            "raftcron_webhook_deliveries": "counter", "raftcron_watchdog_pings": "counter",
        }
        for name, kind in expected.items():
            assert name in families, name
            assert families[name].type == kind, (name, families[name].type)
        lag = {s.name: s.value for s in families["raftcron_fire_lag_seconds"].samples
               if s.labels.get("kind") == "scheduled" and s.name.endswith("_count")}
        assert lag["raftcron_fire_lag_seconds_count"] >= 1
        assert next(s.value for s in families["raftcron_is_leader"].samples) == 1
        succeeded = [s.value for s in families["raftcron_occurrences"].samples
                     if s.labels["status"] == "succeeded"]
        assert succeeded[0] >= 1
        tick = next(s.value for s in families["raftcron_last_tick_timestamp_seconds"].samples)
        assert abs(time.time() - tick) < 10

        follower = next(n for n in c.ids if n != leader)
        text = c.http.get(c.urls[follower] + "/metrics").text
        fam = {f.name: f for f in text_string_to_metric_families(text)}
        assert next(s.value for s in fam["raftcron_is_leader"].samples) == 0
        assert fam["raftcron_last_tick_timestamp_seconds"].samples, "follower lacks tick time"

        ready = c.http.get(c.urls[follower] + "/readyz").json()
        assert ready["ready"] and ready["tick_age_s"] is not None
        # One sample may miss a peer that took longer than the view's 1 s timeout on a
        # loaded machine; the fields must be filled once every node answers.
        views: list[dict] = []

        def all_reachable() -> bool:
            views.append(c.get(follower, "/v1/cluster/nodes"))
            return all(n["reachable"] and n["replication_lag"] is not None
                       for n in views[-1]["nodes"])

        try:
            wait_until(all_reachable, 15, interval=0.5)
        except TimeoutError:
            pytest.fail(f"a node stayed unreachable in the cluster view: {views[-1:]}")
        nodes = views[-1]
        assert [n["node_id"] for n in nodes["nodes"]] == sorted(c.ids)
        assert nodes["leader_id"] == leader
        assert all(abs(n["clock_skew_vs_leader_ms"]) < 1000 for n in nodes["nodes"])
        herd = c.get(follower, "/v1/schedule/herd")
        assert len(herd["counts"]) == 1440 and herd["counts"][0] == 60
        assert c.http.get(c.urls[follower] + "/v1/schedule/herd",
                          params={"hours": "x"}).status_code == 400
        overview = c.get(follower, "/v1/status/jobs")["jobs"][0]
        assert overview["describe"] and len(overview["next_fire_times"]) == 5
        assert c.get(leader, "/v1/workers")["workers"][0]["worker_id"] == "mw"
    finally:
        c.close()

