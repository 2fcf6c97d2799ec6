"""Explicit delivery with real nodes (issue 18, section 1): a lease that was committed but
never delivered is released after the job's ack_timeout_s and run by another worker as
the same attempt, instead of waiting out the 30 s heartbeat timeout and using up an
attempt. Both ways a lease goes undelivered are made to happen on purpose: a proxy that
drops the lease answer after the cluster committed it, and the leader SIGKILLed right
after committing it."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from raftcron.core.identity import token_epoch
from raftcron.testing import LocalCluster, free_port_base, wait_until
from raftcron.worker.client import ServerUnavailable, WorkerClient
from tests.system.helpers import add_job

pytestmark = pytest.mark.system

ACK_TIMEOUT_S = 2
# Without explicit delivery the run would wait out its 30 s heartbeat timeout; a bound
# well under that, with room for a loaded machine, separates the two behaviours.
RESCUE_WITHIN_S = ACK_TIMEOUT_S + 12


def occurrence(c: LocalCluster, nid: str, occ_id: str) -> dict[str, Any]:
    return c.get(nid, f"/v1/occurrences/{occ_id}")


def unacknowledged_total(c: LocalCluster, nid: str) -> float:
    text = c.http.get(c.urls[nid] + "/metrics").text
    m = re.search(r"^raftcron_leases_unacknowledged_total (\S+)$", text, re.M)
    assert m, "raftcron_leases_unacknowledged_total missing from /metrics"
    return float(m.group(1))


def assert_rescued(c: LocalCluster, nid: str, occ_id: str, first: dict[str, Any],
                   rescuer: str) -> dict[str, Any]:
    """The run succeeded under the rescuer as attempt 1 (the release was not counted:
    the job allows one attempt only), with a newer token; the first holder is fenced."""
    done = wait_until(lambda: (o := occurrence(c, nid, occ_id))["status"] == "succeeded"
                      and o, RESCUE_WITHIN_S, message="the released run to succeed")
    assert done["attempts"] == 1
    [attempt] = done["attempt_list"]
    assert (attempt["number"], attempt["status"], attempt["worker_id"]) == (
        1, "succeeded", rescuer)
    assert (attempt["unacknowledged_releases"], attempt["release_reason"]) == (
        1, "not acknowledged")
    assert attempt["fencing_token"] > first["fencing_token"]
    assert attempt["acknowledged_at"] is not None
    for path, body in (
        ("heartbeat", {}),
        ("complete", {"outcome": "succeeded", "exit_code": 0, "output": "late"}),
    ):
        late = c.post(nid, f"/v1/attempts/{first['attempt_id']}/{path}",
                      {"worker_id": first["worker"], "fencing_token": first["fencing_token"],
                       **body})
        assert late.status_code == 409, late.text
    return attempt


def test_a_lease_answer_lost_after_commit_is_released_and_run_as_the_same_attempt(
        cluster: LocalCluster, tmp_path: Path) -> None:
    c = cluster
    leader = c.wait_leader()
    add_job(c, leader, "lostreply", cron="0 0 1 1 *", queue="q-lost", max_attempts=1,
            ack_timeout_s=ACK_TIMEOUT_S, target={"shell": "true"})
    occ_id = c.post(leader, "/v1/jobs/lostreply/trigger", {}).json()["id"]

    control = tmp_path / "drop"
    control.write_text("1.0")  # drop every successful lease answer
    port = free_port_base(1)
    proxy = subprocess.Popen(
        [sys.executable, "-m", "chaos.proxy", "--host", "127.0.0.1",
         "--map", f"{port}={c.urls[leader]}", "--control", str(control),
         "--log", str(tmp_path / "proxy.jsonl")],
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        async def lease_through_proxy() -> None:
            async with WorkerClient([f"http://127.0.0.1:{port}"], token=c.worker_token,
                                    timeout_s=5) as client:
                with pytest.raises(ServerUnavailable):
                    await client.lease("never-hears", ["q-lost"], 1, 5)

        wait_until(lambda: subprocess.run(
            [sys.executable, "-c", f"import socket; socket.create_connection(('127.0.0.1', "
             f"{port}), 1)"], capture_output=True).returncode == 0, 10,
                   message="the proxy to listen")
        asyncio.run(lease_through_proxy())
    finally:
        proxy.kill()
        proxy.wait()
    assert '"event": "drop"' in (tmp_path / "proxy.jsonl").read_text()
    held = occurrence(c, leader, occ_id)["attempt_list"][0]
    # committed: the cluster handed it to a worker that never heard of it
    assert (held["status"], held["worker_id"]) == ("running", "never-hears"), held
    assert held["ack_deadline"] is not None and held["acknowledged_at"] is None
    first = {"attempt_id": held["id"], "fencing_token": held["fencing_token"],
             "worker": "never-hears"}

    c.start_worker("rescuer", queues="q-lost")
    assert_rescued(c, leader, occ_id, first, "rescuer")
    assert unacknowledged_total(c, leader) == 1


def test_a_lease_committed_by_a_leader_killed_at_once_is_released_by_the_next_leader(
        cluster: LocalCluster) -> None:
    c = cluster
    leader = c.wait_leader()
    add_job(c, leader, "orphan", cron="0 0 1 1 *", queue="q-orphan", max_attempts=1,
            ack_timeout_s=ACK_TIMEOUT_S, target={"shell": "true"})
    occ_id = c.post(leader, "/v1/jobs/orphan/trigger", {}).json()["id"]
    c.wait_converged()
    resp = c.post(leader, "/v1/leases", {"worker_id": "died-with-leader",
                                         "queues": ["q-orphan"], "max": 1, "wait_s": 5,
                                         "acknowledge": True})
    c.kill(leader)  # before anyone could acknowledge; the answer is thrown away
    assert resp.status_code == 200, resp.text
    [lease] = resp.json()["leases"]
    assert lease["ack_timeout_s"] == ACK_TIMEOUT_S
    new_leader = c.wait_leader(timeout=20, among=[n for n in c.ids if n != leader])
    first = {"attempt_id": lease["attempt_id"], "fencing_token": lease["fencing_token"],
             "worker": "died-with-leader"}

    c.start_worker("survivor", queues="q-orphan")
    attempt = assert_rescued(c, new_leader, occ_id, first, "survivor")
    assert token_epoch(attempt["fencing_token"]) > token_epoch(lease["fencing_token"])
    assert unacknowledged_total(c, new_leader) == 1


def test_ack_fields_are_validated(cluster: LocalCluster) -> None:
    c = cluster
    leader = c.wait_leader()
    bad = c.post(leader, "/v1/jobs", {"id": "badack", "schedule": {"cron": "* * * * *"},
                                      "target": {"shell": "true"}, "ack_timeout_s": 0})
    assert bad.status_code == 400
    assert bad.json()["error"]["field"] == "ack_timeout_s"
    bad = c.post(leader, "/v1/leases", {"worker_id": "w", "acknowledge": "yes"})
    assert bad.status_code == 400
    assert bad.json()["error"]["field"] == "acknowledge"
