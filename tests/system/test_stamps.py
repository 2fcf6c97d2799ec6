"""A node whose wall clock is fast does not stamp the cluster's state with its own time.

Client writes and worker calls are stamped by the node that receives them. A follower
262 s fast (a chaos run) stamped completions minutes in the future and set lease
deadlines 262 s late. The skew here is real: time-machine moves the node process's
`time.time()` through a sitecustomize module (as the chaos suite does), and the fast
node is a follower on purpose: its election timeout is far longer than any test step,
so it never stands, and the healthy leader's clock stays confirmed (nothing hands
leadership to it).
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftcron.testing import LocalCluster, wait_until

pytestmark = pytest.mark.system

CLOCK_DIR = Path(__file__).resolve().parents[2] / "chaos" / "clock"
SKEW_S = 90
FAST = "n1"
HEALTHY = ["n2", "n3"]
SLACK_S = 3.0  # how far a committed stamp may be from the real time around the request
HEARTBEAT_TIMEOUT_S = 60


def seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def assert_real_time(iso: str | None, before: float, after: float, what: str) -> None:
    """`iso` lies within [before, after] of the real clock, give or take SLACK_S."""
    assert iso is not None, f"{what}: not stamped"
    at = seconds(iso)
    assert before - SLACK_S <= at <= after + SLACK_S, (
        f"{what} is {at - after:+.1f} s after the request (stamped {iso})")


def metric(c: LocalCluster, nid: str, name: str) -> float | None:
    found = re.search(rf"^{name} (\S+)$", c.http.get(c.urls[nid] + "/metrics").text, re.M)
    return float(found[1]) if found else None


def start_fast(c: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FAST with its wall clock SKEW_S ahead from its first instant, and an election
    timeout (60-70 s) that keeps it a follower for the whole test."""
    pytest.importorskip("time_machine", reason="needs the chaos extra (time-machine)")
    offset_file = tmp_path / f"{FAST}.offset"
    offset_file.write_text(str(SKEW_S))
    c.set_raft_options(FAST, raftMinTimeout=60, raftMaxTimeout=70)
    with monkeypatch.context() as env:
        env.setenv("PYTHONPATH", f"{CLOCK_DIR}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        env.setenv("CHAOS_CLOCK_FILE", str(offset_file))
        c.start(FAST)
    view = wait_until(lambda: c.cluster_view(FAST), 30, message="the fast node serving")
    # The skew is real: the node's own clock, as it reports it, is SKEW_S ahead.
    assert abs(view["now_ms"] / 1000 - time.time() - SKEW_S) < 2, view["now_ms"]


def healthy_pair_leading(tmp_path: Path) -> tuple[LocalCluster, str]:
    """The two healthy nodes started, and the one that leads. They lead before the fast
    one starts, so the cluster level (raised once every member announced it) is not
    waited for."""
    c = LocalCluster(tmp_path)
    c.ready_level = None
    try:
        for nid in HEALTHY:
            c.start(nid)
        return c, c.wait_leader(timeout=30, among=HEALTHY)
    except BaseException:
        c.close()
        raise


def stamp_source(c: LocalCluster, nid: str) -> str | None:
    return ((c.cluster_view(nid) or {}).get("stamp_clock") or {}).get("source")


def as_worker(c: LocalCluster, nid: str) -> Callable[[str, dict[str, Any]], httpx.Response]:
    def call(path: str, body: dict[str, Any]) -> httpx.Response:
        return c.http.post(c.urls[nid] + path, json=body,
                           headers=c.auth_headers(c.worker_token))
    return call


def assert_follower(c: LocalCluster, nid: str) -> None:
    view = c.cluster_view(nid)
    assert view is not None and view["role"] == "follower", view


def test_a_fast_follower_stamps_writes_and_worker_calls_with_the_cluster_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c, leader = healthy_pair_leading(tmp_path)
    try:
        start_fast(c, tmp_path, monkeypatch)
        wait_until(lambda: stamp_source(c, FAST) == "cluster", 30,
                   message="the fast node learning the cluster's time")
        assert_follower(c, FAST)

        # A job write through the fast follower.
        before = time.time()
        resp = c.post(FAST, "/v1/jobs", {
            "id": "stamped", "schedule": {"cron": "0 0 1 1 *"}, "queue": "stamps",
            "heartbeat_timeout_s": HEARTBEAT_TIMEOUT_S, "target": {"shell": "true"}})
        assert resp.status_code == 201, resp.text
        after = time.time()
        job = c.get(leader, "/v1/jobs/stamped?consistent=true")
        assert_real_time(job["created_at"], before, after, "the job's created_at")
        assert_real_time(job["updated_at"], before, after, "the job's updated_at")
        before = time.time()
        paused = c.post(FAST, "/v1/jobs/stamped/pause")
        assert paused.status_code == 200, paused.text
        assert_real_time(paused.json()["updated_at"], before, time.time(),
                         "the paused job's updated_at")
        assert c.post(FAST, "/v1/jobs/stamped/resume").status_code == 200

        # A manual run, leased (by the leader, through the fast node), heartbeated and
        # completed through the fast follower.
        before = time.time()
        trig = c.post(FAST, "/v1/jobs/stamped/trigger", {},
                      headers={"Idempotency-Key": "stamp-run"})
        assert trig.status_code == 202, trig.text
        occ_id = trig.json()["id"]
        occ = c.get(leader, f"/v1/occurrences/{occ_id}?consistent=true")
        assert_real_time(occ["created_at"], before, time.time(), "the run's created_at")
        assert_real_time(occ["scheduled_for"], before, time.time(), "the run's instant")
        worker = as_worker(c, FAST)
        (lease,) = worker("/v1/leases", {"worker_id": "w1", "queues": ["stamps"],
                                         "wait_s": 10}).json()["leases"]
        pair = {"attempt_id": lease["attempt_id"], "fencing_token": lease["fencing_token"]}
        before = time.time()
        beat = worker("/v1/heartbeats", {"worker_id": "w1", "attempts": [pair]})
        assert beat.status_code == 200 and beat.json()["results"][0]["ok"], beat.text
        after = time.time()
        (att,) = c.get(leader, f"/v1/occurrences/{occ_id}?consistent=true")["attempt_list"]
        assert_real_time(att["heartbeat_at"], before, after, "the heartbeat")
        # The lease deadline is the heartbeat timeout after the real time, not SKEW_S
        # later: a run whose worker dies now is recovered on time.
        assert_real_time(att["lease_expires_at"], before + HEARTBEAT_TIMEOUT_S,
                         after + HEARTBEAT_TIMEOUT_S, "the lease deadline")
        before = time.time()
        done = worker("/v1/completions", {"worker_id": "w1", "completions": [
            {**pair, "outcome": "succeeded", "exit_code": 0}]})
        assert done.status_code == 200 and done.json()["results"][0]["ok"], done.text
        after = time.time()
        occ = c.get(leader, f"/v1/occurrences/{occ_id}?consistent=true")
        assert occ["status"] == "succeeded", occ
        assert_real_time(occ["finished_at"], before, after, "the run's finished_at")
        assert_real_time(occ["attempt_list"][0]["finished_at"], before, after,
                         "the attempt's finished_at")
        assert_follower(c, FAST)

        # The disagreement is shown: per node in /v1/cluster and as a gauge.
        stamp = c.cluster_view(FAST)["stamp_clock"]  # type: ignore[index]
        assert stamp["source"] == "cluster" and abs(stamp["offset_ms"] - SKEW_S * 1000) < 2000
        offset = metric(c, FAST, "raftcron_stamp_offset_ms")
        assert offset is not None and abs(offset - SKEW_S * 1000) < 2000, offset
        healthy = metric(c, leader, "raftcron_stamp_offset_ms")
        assert healthy is not None and abs(healthy) < 1000, healthy
        log = (tmp_path / f"{FAST}.log").read_text()
        assert len(re.findall(r"ms off the cluster's confirmed time", log)) == 1, log[-3000:]
    finally:
        c.close()


def test_a_node_that_knows_no_confirmed_time_refuses_to_stamp_until_it_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two of three nodes, one of them fast: no majority confirms any clock, so no leader
    ever begins an epoch or confirms its clock. A write through the fast node is refused
    (503, retryable), not stamped SKEW_S ahead; once the third node joins and a leader's
    clock is confirmed, the same request (same Idempotency-Key) is accepted and stamped
    with the real time."""
    c = LocalCluster(tmp_path)
    try:
        c.start("n2")
        start_fast(c, tmp_path, monkeypatch)
        # Both nodes measured each other (the fast clock is seen 90 s off), and still
        # nothing confirms a time: the fast node has no estimate to stamp with.
        wait_until(lambda: abs(((c.cluster_view("n2") or {}).get("clock") or {})
                               .get("skew_ms") or 0) > 60_000, 30,
                   message="n2 measuring the fast clock")
        assert c.leader() is None
        assert stamp_source(c, FAST) == "none"
        assert stamp_source(c, "n2") == "none"
        job = {"id": "later", "schedule": {"cron": "0 0 1 1 *"}, "target": {"shell": "true"}}
        key = {"Idempotency-Key": "put-later"}
        refused = c.post(FAST, "/v1/jobs", job, headers=key)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "clock_unconfirmed", refused.text
        assert refused.headers["Retry-After"] == "1"

        c.start("n3")
        c.wait_leader(timeout=30, among=HEALTHY)
        wait_until(lambda: stamp_source(c, FAST) == "cluster", 30,
                   message="the fast node learning the cluster's time")
        assert_follower(c, FAST)
        before = time.time()
        accepted = c.post(FAST, "/v1/jobs", job, headers=key)
        assert accepted.status_code == 201, accepted.text
        assert_real_time(accepted.json()["created_at"], before, time.time(),
                         "the job's created_at")
    finally:
        c.close()


def test_a_completion_through_a_node_whose_estimate_went_stale_waits_for_a_confirmed_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader stops confirming its clock (its only healthy peer is paused, so no
    majority agrees with it): the fast node's estimate expires, and a completion sent
    through it is refused (503, retryable) instead of being stamped SKEW_S ahead. Once the
    peer resumes and a leader's clock is confirmed again, the same completion is accepted,
    finished at the real time: nothing was lost."""
    c, leader = healthy_pair_leading(tmp_path)
    try:
        (paused,) = [n for n in HEALTHY if n != leader]
        start_fast(c, tmp_path, monkeypatch)
        wait_until(lambda: stamp_source(c, FAST) == "cluster", 30,
                   message="the fast node learning the cluster's time")
        resp = c.post(FAST, "/v1/jobs", {
            "id": "stale", "schedule": {"cron": "0 0 1 1 *"}, "queue": "stale",
            "heartbeat_timeout_s": 300, "target": {"shell": "true"}})
        assert resp.status_code == 201, resp.text
        occ_id = c.post(FAST, "/v1/jobs/stale/trigger", {}).json()["id"]
        worker = as_worker(c, FAST)
        (lease,) = worker("/v1/leases", {"worker_id": "w1", "queues": ["stale"],
                                         "wait_s": 10}).json()["leases"]
        completion = {"worker_id": "w1", "completions": [{
            "attempt_id": lease["attempt_id"], "fencing_token": lease["fencing_token"],
            "outcome": "succeeded", "exit_code": 0}]}

        c.signal(paused, signal.SIGSTOP)
        try:
            wait_until(lambda: stamp_source(c, FAST) == "none", 30,
                       message="the fast node's estimate expiring")
            refused = worker("/v1/completions", completion)
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "clock_unconfirmed", refused.text
        finally:
            c.signal(paused, signal.SIGCONT)
        occ = c.get(leader, f"/v1/occurrences/{occ_id}")
        assert occ["status"] == "running" and occ["finished_at"] is None, occ

        c.wait_leader(timeout=30, among=HEALTHY)
        wait_until(lambda: stamp_source(c, FAST) == "cluster", 30,
                   message="the fast node learning the cluster's time again")
        before = time.time()
        done = worker("/v1/completions", completion)
        assert done.status_code == 200 and done.json()["results"][0]["ok"], done.text
        after = time.time()
        occ = c.get(FAST, f"/v1/occurrences/{occ_id}?consistent=true")
        assert occ["status"] == "succeeded", occ
        assert_real_time(occ["finished_at"], before, after, "the run's finished_at")
    finally:
        c.close()
