"""The check just before a run leased ahead starts (`before_start`), on real nodes: sent
to a follower right after a job was paused through the leader, it sees the pause (the node
answers after a barrier) and the run is skipped, while the other run's lease stays live;
a worker token for another queue is refused.

The test is the worker here, over HTTP, so each step happens in its order on purpose:
lease ahead, acknowledge, pause, check."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job, serving_cluster

pytestmark = pytest.mark.system

QUEUE = "checked"


def cron_at(t: float) -> str:
    d = datetime.fromtimestamp(t, tz=UTC)
    return f"{d.second} {d.minute} {d.hour} {d.day} {d.month} *"


def lease_ahead_on(c: LocalCluster) -> None:
    """Pinned, not left to the default: the test needs leases ahead whatever it is."""
    for path in c.configs:
        path.write_text("lease_ahead_s = 2\n" + path.read_text())


@pytest.fixture
def cluster(tmp_path: Path):
    with serving_cluster(tmp_path, lease_ahead_on) as c:
        yield c


def test_a_check_on_a_follower_sees_a_pause_made_through_the_leader(cluster) -> None:
    c = cluster
    leader = c.wait_leader(timeout=30)
    follower = next(n for n in c.ids if n != leader)
    instant = int(time.time()) + 8
    for job in ("paused-one", "live-one"):
        add_job(c, leader, job, cron=cron_at(instant), queue=QUEUE)
    worker = c.auth_headers(c.worker_token)
    leases: dict[str, dict] = {}

    def leased() -> bool:
        resp = c.http.post(f"{c.urls[leader]}/v1/leases", headers=worker, json={
            "worker_id": "w1", "queues": [QUEUE], "max": 10, "wait_s": 1,
            "acknowledge": True, "ahead": True})
        assert resp.status_code == 200, resp.text
        for lease in resp.json()["leases"]:
            leases[lease["job_id"]] = lease
        return len(leases) == 2

    wait_until(leased, timeout=15, interval=0.1, message="both runs leased ahead")
    assert time.time() < instant, "leased after the instant: not ahead"
    pairs = {job: {"attempt_id": x["attempt_id"], "fencing_token": x["fencing_token"]}
             for job, x in leases.items()}
    ack = c.http.post(f"{c.urls[leader]}/v1/heartbeats", headers=worker, json={
        "worker_id": "w1", "attempts": list(pairs.values())})
    assert ack.status_code == 200 and all(r["ok"] for r in ack.json()["results"]), ack.text

    paused = c.post(leader, "/v1/jobs/paused-one/pause", {})
    assert paused.status_code == 200, paused.text
    # At once, on a follower: its answer comes after a barrier, so it sees the pause even
    # if it had not applied it when the check arrived.
    check = c.http.post(f"{c.urls[follower]}/v1/heartbeats", headers=worker, json={
        "worker_id": "w1", "before_start": True,
        "attempts": [pairs["paused-one"], pairs["live-one"]]})
    assert time.time() < instant, "checked after the instant: the test proves nothing"
    assert check.status_code == 200, check.text
    got_paused, got_live = check.json()["results"]
    assert got_paused["ok"] is False and got_paused["rejected"] == "lease_expired"
    assert "paused" in got_paused["message"]
    assert got_live == {"attempt_id": pairs["live-one"]["attempt_id"], "ok": True,
                        "cancel": False}

    occ = c.get(leader, f"/v1/occurrences/{leases['paused-one']['occurrence_id']}")
    assert occ["status"] == "skipped", occ
    live = c.get(leader, f"/v1/occurrences/{leases['live-one']['occurrence_id']}")
    assert live["attempt_list"][0]["status"] == "running", live

    other = c.create_token("worker:elsewhere", name="other-queue")
    refused = c.http.post(f"{c.urls[follower]}/v1/heartbeats", headers=c.auth_headers(other),
                          json={"worker_id": "w1", "before_start": True,
                                "attempts": [pairs["live-one"]]})
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "forbidden"
