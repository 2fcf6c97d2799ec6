"""Execution end to end: real nodes, real workers, real shell processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job, assert_every_second_once

pytestmark = pytest.mark.system


def occ(c: LocalCluster, nid: str, occ_id: str) -> dict[str, Any]:
    return c.get(nid, f"/v1/occurrences/{occ_id}")


def job_occs(c: LocalCluster, nid: str, job_id: str) -> list[dict[str, Any]]:
    return c.occurrences(nid, job_id)


def lease_one(c: LocalCluster, nid: str, worker: str, queue: str, wait_s: float = 10
              ) -> dict[str, Any]:
    resp = c.post(nid, "/v1/leases", {"worker_id": worker, "queues": [queue], "max": 1,
                                      "wait_s": wait_s})
    assert resp.status_code == 200, resp.text
    leases = resp.json()["leases"]
    assert leases, "no lease handed out"
    return leases[0]


def test_runs_execute_once_with_env_and_unique_tokens(cluster: LocalCluster,
                                                      tmp_path: Path) -> None:
    out = tmp_path / "runs.txt"
    leader = cluster.wait_leader()
    add_job(cluster, leader, "echo", target={
        "shell": f'echo "$RAFTCRON_OCCURRENCE_ID $RAFTCRON_FENCING_TOKEN '
                 f'$RAFTCRON_IDEMPOTENCY_KEY $RAFTCRON_ATTEMPT_ID" >> {out}'})
    cluster.start_worker("w1")
    cluster.start_worker("w2")
    time.sleep(6)
    occs = [o for o in job_occs(cluster, leader, "echo") if o["status"] == "succeeded"]
    assert len(occs) >= 3
    lines = out.read_text().splitlines()
    ran = [line.split()[0] for line in lines]
    assert len(ran) == len(set(ran)), "an occurrence ran twice"
    tokens = [int(line.split()[1]) for line in lines]
    assert len(tokens) == len(set(tokens))
    for line in lines:
        occ_id, _, key, attempt = line.split()
        assert key == occ_id and attempt == f"{occ_id}~1"
    for o in occs:
        assert o["id"] in ran


def test_worker_sigkill_mid_run_is_retried_and_late_completion_rejected(
        cluster: LocalCluster, tmp_path: Path) -> None:
    leader = cluster.wait_leader()
    marker = tmp_path / "attempts.txt"
    add_job(cluster, leader, "slow", cron="0 0 1 1 *", queue="slowq", heartbeat_timeout_s=3,
            retry_backoff_s=0, target={"shell": f"echo $RAFTCRON_ATTEMPT_ID >> {marker}; "
                                                f"sleep 4"})
    occ_id = cluster.post(leader, "/v1/jobs/slow/trigger", {}).json()["id"]
    doomed = cluster.start_worker("doomed", queues="slowq")
    wait_until(lambda: marker.exists() and marker.read_text(), 15, message="first attempt")
    first = occ(cluster, leader, occ_id)["attempt_list"][0]
    os.killpg(doomed.pid, signal.SIGKILL)
    cluster.start_worker("rescuer", queues="slowq")
    done = wait_until(lambda: (o := occ(cluster, leader, occ_id))["status"] == "succeeded"
                      and o, 40, message="retry to succeed")
    attempts = done["attempt_list"]
    assert attempts[0]["status"] == "lost" and attempts[1]["status"] == "succeeded"
    assert attempts[1]["worker_id"] == "rescuer"
    assert attempts[1]["fencing_token"] > first["fencing_token"]
    # The dead worker's late completion, with its old token, changes nothing.
    late = cluster.post(leader, f"/v1/attempts/{first['id']}/complete", {
        "worker_id": "doomed", "fencing_token": first["fencing_token"],
        "outcome": "succeeded", "exit_code": 0, "output": "late"})
    assert late.status_code == 409, late.text
    assert occ(cluster, leader, occ_id)["attempt_list"][0]["status"] == "lost"


def test_completion_retried_after_lost_ack_records_one_outcome(cluster: LocalCluster) -> None:
    leader = cluster.wait_leader()
    follower = cluster.followers()[0]
    add_job(cluster, leader, "manual", cron="0 0 1 1 *", queue="q-ack")
    occ_id = cluster.post(follower, "/v1/jobs/manual/trigger", {}).json()["id"]
    lease = lease_one(cluster, follower, "w-ack", "q-ack")
    body = {"worker_id": "w-ack", "fencing_token": lease["fencing_token"],
            "outcome": "succeeded", "exit_code": 0, "output": "done"}
    first = cluster.post(follower, f"/v1/attempts/{lease['attempt_id']}/complete", body)
    # The first response is "lost"; the worker retries the identical completion elsewhere.
    second = cluster.post(leader, f"/v1/attempts/{lease['attempt_id']}/complete", body)
    assert first.status_code == 200 and second.status_code == 200
    assert first.json()["duplicate"] is False and second.json()["duplicate"] is True
    other = cluster.post(leader, f"/v1/attempts/{lease['attempt_id']}/complete",
                         {**body, "outcome": "failed", "exit_code": 1})
    assert other.status_code == 409
    o = occ(cluster, leader, occ_id)
    assert o["status"] == "succeeded" and len(o["attempt_list"]) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proxy_events(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def test_completion_whose_ack_a_proxy_drops_is_resent_and_recorded_once(
        cluster: LocalCluster, tmp_path: Path) -> None:
    """The race made to happen: a real worker reaches the cluster only through the ack-loss
    proxy (chaos/proxy.py); once its run has started, the proxy drops every answer, so the
    completion commits and the worker never learns it. The worker resends; the cluster
    records one outcome, one attempt, and the job ran once."""
    leader = cluster.wait_leader()
    marker = tmp_path / "runs.txt"
    add_job(cluster, leader, "acked", cron="0 0 1 1 *", queue="q-drop",
            target={"shell": f"echo $RAFTCRON_ATTEMPT_ID >> {marker}; sleep 1"})
    control, log, port = tmp_path / "drop_p", tmp_path / "proxy.jsonl", _free_port()
    control.write_text("0\n")
    root = Path(__file__).resolve().parents[2]
    proxy = subprocess.Popen(
        [sys.executable, "-m", "chaos.proxy", "--host", "127.0.0.1", "--map",
         f"{port}={cluster.urls[leader]}", "--control", str(control), "--log", str(log)],
        cwd=root, start_new_session=True)
    try:
        wait_until(lambda: any(e["event"] == "start" for e in _proxy_events(log)), 10,
                   message="the proxy to listen")
        worker = subprocess.Popen(
            [sys.executable, "-m", "raftcron", "worker", "--server", f"http://127.0.0.1:{port}",
             "--id", "w-drop", "--concurrency", "1", "--queues", "q-drop"],
            env={**os.environ, "RAFTCRON_TOKEN": cluster.worker_token},
            stdout=open(tmp_path / "worker.log", "ab"), stderr=subprocess.STDOUT,
            start_new_session=True)
        cluster.workers.append(worker)
        occ_id = cluster.post(leader, "/v1/jobs/acked/trigger", {}).json()["id"]
        wait_until(lambda: marker.exists() and marker.read_text(), 20,
                   message="the run to start (its lease was delivered)")
        control.write_text("1\n")  # from now on every answer is dropped
        wait_until(lambda: [e for e in _proxy_events(log) if e["event"] == "drop"
                            and e["path"].startswith("/v1/completions")], 20,
                   message="a completion whose answer was dropped")
        control.write_text("0\n")
        done = wait_until(lambda: (o := occ(cluster, leader, occ_id))["status"] == "succeeded"
                          and o, 20, message="the occurrence to succeed")
        time.sleep(2)  # room for a wrong second attempt to appear
        again = occ(cluster, leader, occ_id)
        assert again["status"] == "succeeded"
        assert [a["status"] for a in again["attempt_list"]] == ["succeeded"], again
        assert done["attempt_list"][0]["id"] == again["attempt_list"][0]["id"]
        assert marker.read_text().split() == [again["attempt_list"][0]["id"]]
        completions = [e for e in _proxy_events(log) if e["event"] == "drop"
                       and e["path"].startswith("/v1/completions")]
        assert completions, "the race did not happen: no completion answer was dropped"
    finally:
        proxy.kill()
        proxy.wait()


def test_max_runtime_kills_the_process_group(cluster: LocalCluster, tmp_path: Path) -> None:
    leader = cluster.wait_leader()
    pidfile = tmp_path / "child.pid"
    add_job(cluster, leader, "hog", cron="0 0 1 1 *", queue="q-hog", max_runtime_s=2,
            max_attempts=1, target={"shell": f"sleep 60 & echo $! > {pidfile}; wait"})
    occ_id = cluster.post(leader, "/v1/jobs/hog/trigger", {}).json()["id"]
    cluster.start_worker("w-hog", queues="q-hog")
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 15,
               message="the job to start")
    child = int(pidfile.read_text())
    final = wait_until(lambda: (o := occ(cluster, leader, occ_id))["status"] == "failed" and o,
                       30, message="the run to time out")
    assert final["attempt_list"][0]["status"] == "timed_out"

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{child}/stat") as f:
            return f.read().split()[2] == "Z"

    wait_until(gone, 15, message="the background child to be killed")


def test_retries_are_bounded_and_end_failed(cluster: LocalCluster) -> None:
    leader = cluster.wait_leader()
    add_job(cluster, leader, "flaky", cron="0 0 1 1 *", queue="q-fail", max_attempts=3,
            retry_backoff_s=0, target={"shell": "exit 3"})
    occ_id = cluster.post(leader, "/v1/jobs/flaky/trigger", {}).json()["id"]
    cluster.start_worker("w-fail", queues="q-fail")
    final = wait_until(lambda: (o := occ(cluster, leader, occ_id))["status"] == "failed" and o,
                       30, message="retries to run out")
    assert [a["status"] for a in final["attempt_list"]] == ["failed"] * 3
    assert all(a["exit_code"] == 3 for a in final["attempt_list"])
    time.sleep(1)
    assert len(occ(cluster, leader, occ_id)["attempt_list"]) == 3


def test_same_idempotency_key_triggers_one_run(cluster: LocalCluster, tmp_path: Path) -> None:
    leader = cluster.wait_leader()
    out = tmp_path / "once.txt"
    add_job(cluster, leader, "once", cron="0 0 1 1 *", queue="q-once",
            target={"shell": f"echo run >> {out}"})
    ids = {cluster.post(n, "/v1/jobs/once/trigger", {},
                        headers={"Idempotency-Key": "invoice-2026-11"}).json()["id"]
           for n in cluster.procs}
    assert len(ids) == 1
    cluster.start_worker("w-once", queues="q-once")
    occ_id = ids.pop()
    wait_until(lambda: occ(cluster, leader, occ_id)["status"] == "succeeded", 20,
               message="the run")
    time.sleep(1)
    assert out.read_text().splitlines() == ["run"]


@pytest.mark.parametrize("policy", ["forbid", "allow", "replace", "buffer_one"])
def test_overlap_policies_end_to_end(cluster: LocalCluster, policy: str) -> None:
    leader = cluster.wait_leader()
    queue = f"q-{policy}"
    add_job(cluster, leader, f"ov-{policy}", queue=queue, overlap_policy=policy,
            max_attempts=1, heartbeat_timeout_s=3, target={"shell": "sleep 3"})
    cluster.start_worker(f"w-{policy}", queues=queue, concurrency=4)

    def statuses() -> list[tuple[str, str | None]]:
        return [(o["status"], o["reason"]) for o in job_occs(cluster, leader, f"ov-{policy}")]

    def count(rows: list[tuple[str, str | None]], status: str, reason: str | None = None
              ) -> int:
        return sum(1 for s, r in rows if s == status and (reason is None or r == reason))

    # Wait for the evidence each policy must produce (a loaded machine starts the worker
    # late), then check what must never happen on the same rows.
    if policy == "allow":
        rows = wait_until(lambda: (r := statuses()) and count(r, "running") >= 2 and r, 30,
                          message="two overlapping runs")
        assert count(rows, "skipped", "overlap") == 0
    elif policy == "forbid":
        rows = wait_until(lambda: (r := statuses()) and count(r, "skipped", "overlap") >= 2
                          and r, 30, message="two instants skipped as overlapping")
        assert count(rows, "running") <= 1
    elif policy == "buffer_one":
        rows = wait_until(lambda: (r := statuses()) and count(r, "skipped", "overlap") >= 1
                          and r, 30, message="an instant skipped behind the buffered one")
        assert count(rows, "running") <= 1 and count(rows, "pending") <= 1
    else:  # replace: each new instant cancels the running one
        rows = wait_until(lambda: (r := statuses()) and count(r, "cancelled") >= 1 and r, 30,
                          message="a run cancelled by a newer instant")
        assert count(rows, "running") <= 1, rows


def test_leader_failover_with_runs_in_flight_loses_nothing_and_fencing_stops_dups(
        cluster: LocalCluster, tmp_path: Path) -> None:
    sink = tmp_path / "sink.db"
    script = (
        "import os, sqlite3, sys\n"
        "from raftcron.fencing import FencedStore\n"
        f"s = FencedStore({str(sink)!r})\n"
        "key = os.environ['RAFTCRON_OCCURRENCE_ID']\n"
        "tok = int(os.environ['RAFTCRON_FENCING_TOKEN'])\n"
        "ok = s.accept(key, tok)\n"
        f"c = sqlite3.connect({str(sink)!r})\n"
        "c.execute('create table if not exists effects (key, token, accepted)')\n"
        "c.execute('insert into effects values (?, ?, ?)', (key, tok, int(ok)))\n"
        "c.commit()\n"
    )
    script_path = tmp_path / "effect.py"
    script_path.write_text(script)
    leader = cluster.wait_leader()
    add_job(cluster, leader, "fx", queue="q-fx",
            target={"shell": f"sleep 0.5; {os.sys.executable} {script_path}"})
    cluster.start_worker("w-fx1", queues="q-fx")
    cluster.start_worker("w-fx2", queues="q-fx")
    time.sleep(3)
    # The subject is a run in flight at the kill: wait until one is running, then kill.
    in_flight = wait_until(lambda: [o["id"] for o in job_occs(cluster, leader, "fx")
                                    if o["status"] == "running"], 10,
                           message="a run in flight")
    killed_at = time.time()
    cluster.kill(leader)
    new_leader = cluster.wait_leader(timeout=15)
    time.sleep(6)
    cluster.start(leader)
    cluster.wait_converged(timeout=40)
    occs = job_occs(cluster, new_leader, "fx")
    # Loses nothing: every second from before the kill to well after it has its occurrence,
    # once, and the run that was in flight at the kill is among those that settled.
    assert_every_second_once(occs, covering=(killed_at - 2, killed_at + 6))
    settled = [o for o in occs if o["scheduled_for"] and o["status"] not in ("pending",
                                                                              "running")]
    assert set(in_flight) <= {o["id"] for o in settled}, in_flight
    assert all(o["status"] == "succeeded" for o in settled), [
        (o["id"], o["status"]) for o in settled if o["status"] != "succeeded"]
    conn = sqlite3.connect(sink)
    rows = conn.execute("select key, token, accepted from effects").fetchall()
    accepted: dict[str, list[int]] = {}
    for key, token, ok in rows:
        if ok:
            accepted.setdefault(key, []).append(token)
    # Each succeeded run left its effect, and the fence only ever moved forward.
    missing = [o["id"] for o in settled if o["id"] not in accepted]
    assert not missing, f"succeeded without an accepted effect: {missing}"
    for key, toks in accepted.items():
        assert toks == sorted(toks), f"accepted tokens not increasing for {key}"


@pytest.mark.parametrize("via", ["leader", "follower"])
def test_leases_whose_poller_gave_up_are_released_not_stranded(cluster: LocalCluster,
                                                               via: str) -> None:
    """A poll that times out on the client before its Lease commits (a worker's timeout,
    or a forwarding follower's) must not leave that run `running` under a worker that
    never saw it: it is released at once, keeps its attempt number, and the next poll
    gets it. Through a follower, the worker's poll is forwarded with at most 2 s of wait,
    so it is sent 1.8 s before the instant."""
    c = cluster
    leader = c.wait_leader()
    node = leader if via == "leader" else next(n for n in c.ids if n != leader)
    # Created just after a ten-second boundary: its first instant is ~9.8 s away.
    time.sleep(10.2 - time.time() % 10)
    add_job(c, leader, "strand", cron="*/10 * * * * *", queue="strand")
    instant = int(time.time()) // 10 * 10 + 10
    if via == "follower":
        time.sleep(max(0.0, instant - 1.8 - time.time()))
    with pytest.raises(httpx.TimeoutException):
        c.post(node, "/v1/leases", {"worker_id": "gone", "queues": ["strand"], "max": 1,
                                    "wait_s": 20}, timeout=1)
    occ_id = f"strand@{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(instant))}"

    def released() -> dict[str, Any] | None:
        got = occ(c, leader, occ_id)
        return got if got["status"] == "pending" and got["attempt_list"] else None

    time.sleep(max(0.0, instant - time.time() + 1.5))  # its Lease commits just before
    view = wait_until(released, 5, message="the undelivered lease released")
    attempt = view["attempt_list"][0]
    assert attempt["status"] == "pending" and attempt["worker_id"] is None, attempt
    lease = lease_one(c, leader, "here", "strand", wait_s=5)
    assert (lease["occurrence_id"], lease["attempt"]) == (occ_id, 1)
