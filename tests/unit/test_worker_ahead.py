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
