"""The worker with runs leased ahead (issue 18 §4), against a fake cluster: it asks for
runs ahead only once its clock is measured and agrees with the server's, starts each run
at its instant and never before, and does not start one the check before its start
refuses."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from tests.unit.test_worker_runner import FakeCluster, lease, make_worker, run_until


def clock_at(cluster: FakeCluster, offset_ms: float) -> None:
    """The server's /healthz clock, `offset_ms` off this process's."""
    async def healthz(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(200, json={"status": "ok",
                                         "now_ms": int(time.time() * 1000 + offset_ms)})
    cluster.overrides["/healthz"] = healthz


def ahead_leases(cluster: FakeCluster, log: Path, lead_ms: int, n: int = 2) -> list[int]:
    """Hand out `n` runs `lead_ms` before their instant, once the worker asks for runs
    ahead; returns their instants (ms), filled when handed out."""
    instants: list[int] = []

    async def leases(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        if not body.get("ahead") or instants:
            await asyncio.sleep(0.05)  # a long poll that found nothing
            return httpx.Response(200, json={"leases": []})
        now = int(time.time() * 1000)
        instants.extend([now + lead_ms] * n)
        got = [lease(i, f'date +%s.%N >> {log}', start_at_ms=now + lead_ms)
               for i in range(n)]
        return httpx.Response(200, json={"leases": got, "server_now_ms": now})
    cluster.overrides["/v1/leases"] = leases
    return instants


def started_at(log: Path) -> list[float]:
    return [float(x) for x in log.read_text().split()] if log.exists() else []


async def test_runs_leased_ahead_start_at_their_instant_and_never_before(tmp_path: Path):
    cluster = FakeCluster()
    clock_at(cluster, 0)
    log = tmp_path / "starts"
    instants = ahead_leases(cluster, log, lead_ms=800)
    worker = make_worker(cluster, concurrency=2)
    await run_until(worker, lambda: len(cluster.completed) == 2, timeout=20)
    starts = started_at(log)
    assert len(starts) == 2 and instants
    assert all(s >= instants[0] / 1000 for s in starts), (starts, instants[0] / 1000)
    # Acknowledged on receipt, then checked just before the start.
    hbs = cluster.bodies("/v1/heartbeats")
    assert not hbs[0].get("before_start") and any(b.get("before_start") for b in hbs)
    first_ahead = next(i for i, b in enumerate(cluster.bodies("/v1/leases")) if b.get("ahead"))
    assert all(b.get("ahead_refused") == "unmeasured" or b.get("ahead")
               for b in cluster.bodies("/v1/leases")[:first_ahead])


async def test_a_run_the_check_before_its_start_refuses_is_not_started(tmp_path: Path):
    cluster = FakeCluster()
    clock_at(cluster, 0)
    log = tmp_path / "starts"
    ahead_leases(cluster, log, lead_ms=700, n=1)

    async def heartbeats(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        if body.get("before_start"):  # the job was paused since the lease
            return httpx.Response(200, json={"results": [
                {"attempt_id": a["attempt_id"], "ok": False, "rejected": "lease_expired",
                 "message": "the job was paused before this run started"}
                for a in body["attempts"]]})
        return await cluster.default(request, body)
    cluster.overrides["/v1/heartbeats"] = heartbeats
    worker = make_worker(cluster, concurrency=2)
    await run_until(worker, lambda: any(b.get("before_start")
                                        for b in cluster.bodies("/v1/heartbeats")), timeout=20)
    await run_until(worker, lambda: True, timeout=5)
    assert started_at(log) == [] and cluster.completed == {}


async def test_a_worker_off_the_servers_clock_takes_nothing_ahead(tmp_path: Path):
    cluster = FakeCluster()
    clock_at(cluster, 5_000)
    log = tmp_path / "starts"
    ahead_leases(cluster, log, lead_ms=500)
    worker = make_worker(cluster, concurrency=2)
    await run_until(worker, lambda: any(b.get("ahead_refused") == "skewed"
                                        for b in cluster.bodies("/v1/leases")), timeout=20)
    bodies = cluster.bodies("/v1/leases")
    assert not any(b.get("ahead") for b in bodies)
    assert started_at(log) == []


async def test_a_worker_whose_clock_probe_fails_takes_nothing_ahead(tmp_path: Path):
    cluster = FakeCluster()  # no /healthz: 404, a failed probe
    ahead_leases(cluster, tmp_path / "starts", lead_ms=500)
    worker = make_worker(cluster, concurrency=2)
    await run_until(worker, lambda: len(cluster.bodies("/v1/leases")) >= 5, timeout=20)
    bodies = cluster.bodies("/v1/leases")
    assert all(b.get("ahead_refused") == "unmeasured" and not b.get("ahead") for b in bodies)


async def checks_before_start_at(cluster: FakeCluster, ack_delay_s: float) -> list[float]:
    """Acknowledge after `ack_delay_s`; returns when each check before a start arrived."""
    checks: list[float] = []

    async def heartbeats(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        if body.get("before_start"):
            checks.append(time.time())
        else:
            await asyncio.sleep(ack_delay_s)
        return await cluster.default(request, body)
    cluster.overrides["/v1/heartbeats"] = heartbeats
    return checks


async def check_lead(tmp_path: Path, ack_delay_s: float, lead_ms: int) -> float:
    """One run leased `lead_ms` ahead by a cluster that acknowledges after `ack_delay_s`:
    how long before its instant its check came (the run started at it or after it)."""
    cluster = FakeCluster()
    clock_at(cluster, 0)
    log = tmp_path / "starts"
    instants = ahead_leases(cluster, log, lead_ms=lead_ms, n=1)
    checks = await checks_before_start_at(cluster, ack_delay_s)
    worker = make_worker(cluster, concurrency=2)
    await run_until(worker, lambda: len(cluster.completed) == 1, timeout=20)
    assert len(checks) == 1
    assert all(s >= instants[0] / 1000 for s in started_at(log))
    return instants[0] / 1000 - checks[0]


async def test_a_slow_cluster_is_checked_earlier_so_its_answer_comes_before_the_instant(
        tmp_path: Path):
    # The acknowledgement takes 0.4 s: a lease round trip of 0.8 s, so the check goes
    # 0.3 + 0.8 s before the instant, not 0.3 s. (Bounds loose for a busy machine: sent
    # late shortens the lead; the old lead was 0.3 s.)
    lead = await check_lead(tmp_path, ack_delay_s=0.4, lead_ms=3_000)
    assert 0.9 <= lead <= 1.6, lead


async def test_a_fast_cluster_is_checked_just_before_the_instant(tmp_path: Path):
    lead = await check_lead(tmp_path, ack_delay_s=0.0, lead_ms=2_000)
    assert 0.1 <= lead <= 0.6, lead


def test_the_check_lead_grows_with_the_round_trip_and_is_bounded(tmp_path: Path):
    from raftcron.worker.runner import BEFORE_START_CHECK_S, MAX_CHECK_EXTRA_S
    worker = make_worker(FakeCluster(), concurrency=1)
    assert worker.check_lead_s() == BEFORE_START_CHECK_S  # nothing measured yet
    worker._round_trip_s = 0.2
    assert worker.check_lead_s() == BEFORE_START_CHECK_S + 0.2
    worker._round_trip_s = 60.0
    assert worker.check_lead_s() == BEFORE_START_CHECK_S + MAX_CHECK_EXTRA_S
