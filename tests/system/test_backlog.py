"""A queue no worker serves raises its backlog alert; a worker for it resolves it (real
node processes, a real worker)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job
from tests.system.test_operability import configure

pytestmark = pytest.mark.system

BOUND_S = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path)
    configure(c, [f"backlog_alert_s = {BOUND_S}"])
    c.start()
    try:
        c.wait_leader(timeout=30)
        yield c
    finally:
        c.close()


def backlog_alert(c: LocalCluster, nid: str, status: str) -> dict[str, Any] | None:
    alerts = c.get(nid, "/v1/alerts", params={"status": status})["alerts"]
    return next((a for a in alerts if a["id"] == "backlog:unstaffed"), None)


def gauges(c: LocalCluster, nid: str, name: str) -> dict[str, float]:
    text = c.http.get(c.urls[nid] + "/metrics").text
    return {s.labels["queue"]: s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == name}


def test_unserved_queue_raises_backlog_alert_and_a_worker_resolves_it(
        cluster: LocalCluster) -> None:
    c = cluster
    leader = c.wait_leader()
    follower = next(n for n in c.ids if n != leader)
    add_job(c, leader, "stranded", cron="* * * * * *", queue="unstaffed")
    # Nobody leases from "unstaffed": the wait grows past the bound on purpose.
    alert = wait_until(lambda: backlog_alert(c, follower, "open"), 30,
                       message="a backlog alert")
    assert alert["kind"] == "backlog" and alert["job_id"] is None
    assert "unstaffed" in alert["message"]
    assert gauges(c, follower, "raftcron_queue_depth")["unstaffed"] >= BOUND_S
    assert gauges(c, follower, "raftcron_queue_oldest_due_age_seconds")["unstaffed"] > BOUND_S
    queues = {q["queue"]: q for q in c.get(follower, "/v1/status/queues")["queues"]}
    assert queues["unstaffed"]["oldest_due_age_s"] > BOUND_S

    c.start_worker("staff", queues="unstaffed")
    resolved = wait_until(lambda: backlog_alert(c, follower, "resolved"), 30,
                          message="the backlog alert resolved")
    assert [h["event"] for h in resolved["history"]] == ["raised", "resolved"]
    assert backlog_alert(c, follower, "open") is None
    assert gauges(c, follower, "raftcron_queue_oldest_due_age_seconds")["unstaffed"] < BOUND_S
