"""The pipelined worker: leases ahead within a bound, reports in the background."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import httpx
import pytest

from raftcron.worker.runner import Worker, WorkerOptions
from tests.unit.test_worker_runner import FAST, FakeCluster, lease, make_worker, run_until


def with_prefetch(n: int | None, **kw: Any) -> WorkerOptions:
    return dataclasses.replace(FAST, prefetch=n, **kw)


class Ledger:
    """Server-side count of the leases a worker holds: granted minus completed/released."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.held: set[str] = set()
        self.max_held = 0
        cluster.overrides["/v1/leases"] = self.leases
        cluster.overrides["/v1/completions"] = self.done("completions")
        cluster.overrides["/v1/releases"] = self.done("attempts")

    async def leases(self, request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        response = await self.cluster.default(request, body)
        import json
        for granted in json.loads(response.content)["leases"]:
            self.held.add(granted["attempt_id"])
        self.max_held = max(self.max_held, len(self.held))
        return response

    def done(self, key: str) -> Any:
        async def handler(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
            for item in body[key]:
                self.held.discard(item["attempt_id"])
            return await self.cluster.default(request, body)
        return handler


def slow_acknowledgements(cluster: FakeCluster, seconds: float) -> None:
    """Heartbeats answered after `seconds`, as a slow Raft commit would be."""
    async def slow(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        await asyncio.sleep(seconds)
        return await cluster.default(request, body)
    cluster.overrides["/v1/heartbeats"] = slow


@pytest.mark.parametrize("prefetch", [0, 1, 3])
async def test_never_holds_more_than_concurrency_plus_prefetch(prefetch: int) -> None:
    cluster = FakeCluster()
    ledger = Ledger(cluster)
    slow_acknowledgements(cluster, 0.3)  # round trip 0.6 s: 6 runs of 0.2 s on 2 slots
    cluster.leases_to_give = [lease(n, "sleep 0.2") for n in range(16)]
    worker = make_worker(cluster, concurrency=2, options=with_prefetch(prefetch))
    await run_until(worker, lambda: len(cluster.completed) == 16, timeout=30)
    # Reached, so leasing ahead happens, and never exceeded.
    assert ledger.max_held == 2 + prefetch
    assert all(b["max"] <= 2 + prefetch for b in cluster.bodies("/v1/leases"))
    assert len(worker.running) == 0 and worker.held == 0


async def test_slow_runs_are_not_leased_far_ahead() -> None:
    cluster = FakeCluster()
    ledger = Ledger(cluster)
    cluster.leases_to_give = [lease(n, "sleep 0.4") for n in range(8)]
    worker = make_worker(cluster, concurrency=2, options=with_prefetch(10))
    await run_until(worker, lambda: len(cluster.completed) == 8, timeout=30)
    # Acknowledgements answer at once, runs take 0.4 s: no slot frees within a round
    # trip, so one lease ahead at most once measured (two before: the concurrency).
    assert ledger.max_held <= 4
    assert worker.lease_ahead == 1


async def test_default_prefetch_bound_is_sixteen_per_slot() -> None:
    worker = make_worker(FakeCluster(), concurrency=3, options=FAST)
    assert worker.prefetch == 48
    assert worker.lease_ahead == 3  # nothing measured yet: as many as the concurrency
    with pytest.raises(ValueError):
        make_worker(FakeCluster(), options=with_prefetch(-1))


async def test_a_freed_slot_takes_a_prefetched_run_without_a_lease_round_trip() -> None:
    cluster = FakeCluster()
    polls = 0

    async def one_batch_then_hang(request: httpx.Request, body: dict[str, Any]
                                  ) -> httpx.Response:
        nonlocal polls
        polls += 1
        if polls == 1:
            return httpx.Response(200, json={"leases": [lease(1), lease(2)][: body["max"]]})
        await asyncio.sleep(body["wait_s"])  # the cluster has nothing more to lease
        return httpx.Response(200, json={"leases": []})

    cluster.overrides["/v1/leases"] = one_batch_then_hang
    worker = make_worker(cluster, concurrency=1, options=with_prefetch(1))
    await run_until(worker, lambda: len(cluster.completed) == 2, timeout=5)
    # The second run was acknowledged with (or right after) the first, before it started.
    beats = [a["attempt_id"] for b in cluster.bodies("/v1/heartbeats") for a in b["attempts"]]
    assert beats[:2] == ["att-1", "att-2"]


async def test_completions_are_retried_in_the_background_while_the_slot_runs_on() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1, "echo one"), lease(2, "echo two")]
    failures = 0
    first_answered = asyncio.Event()
    second_started_before_first_answered = False

    async def flaky(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        nonlocal failures
        if failures < 3 and any(c["attempt_id"] == "att-1" for c in body["completions"]):
            failures += 1
            await asyncio.sleep(0.1)
            return httpx.Response(503, json={"error": {"code": "no_leader", "message": "x"}})
        response = await cluster.default(request, body)
        first_answered.set()
        return response

    real_start = Worker._start

    def spy_start(self: Worker, run: Any) -> None:
        nonlocal second_started_before_first_answered
        if run.lease.attempt_id == "att-2" and not first_answered.is_set():
            second_started_before_first_answered = True
        real_start(self, run)

    cluster.overrides["/v1/completions"] = flaky
    worker = make_worker(cluster, concurrency=1, options=with_prefetch(1))
    worker._start = spy_start.__get__(worker)  # type: ignore[method-assign]
    await run_until(worker, lambda: len(cluster.completed) == 2, timeout=10)
    assert failures == 3
    assert second_started_before_first_answered
    sent = [c for b in cluster.bodies("/v1/completions") for c in b["completions"]
            if c["attempt_id"] == "att-1"]
    assert len(sent) == 4 and all(c == sent[0] for c in sent)  # resent identically
    assert cluster.completed["att-1"]["output"] == "one\n"


async def test_shutdown_releases_waiting_leases_and_waits_for_completions() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1, "sleep 0.3; echo done"), lease(2, "sleep 0.3"),
                              lease(3), lease(4)]
    answered_late = False

    async def slow_answer(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        nonlocal answered_late
        await asyncio.sleep(0.5)  # the completion commit outlasts the run
        answered_late = True
        return await cluster.default(request, body)

    cluster.overrides["/v1/completions"] = slow_answer
    worker = make_worker(cluster, concurrency=2, options=with_prefetch(2))
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    async with asyncio.timeout(5):
        while not (len(worker.running) == 2 and len(worker._ready) == 2):
            await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 10)
    released = [a["attempt_id"] for b in cluster.bodies("/v1/releases") for a in b["attempts"]]
    assert sorted(released) == ["att-3", "att-4"]
    assert answered_late and cluster.completed["att-1"]["output"] == "done\n"
    assert set(cluster.completed) == {"att-1", "att-2"}  # the waiting ones never ran


async def test_waiting_leases_are_heartbeated_and_a_rejected_one_never_starts() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1, "sleep 1.6"), lease(2, "echo never"), lease(3)]
    beats = 0

    async def reject_att2_after_ack(request: httpx.Request, body: dict[str, Any]
                                    ) -> httpx.Response:
        nonlocal beats
        beats += 1
        results = []
        for a in body["attempts"]:
            ok = not (a["attempt_id"] == "att-2" and beats > 1)
            results.append({"attempt_id": a["attempt_id"], "ok": ok, "cancel": False,
                            **({} if ok else {"rejected": "lease_expired"})})
        return httpx.Response(200, json={"results": results})

    cluster.overrides["/v1/heartbeats"] = reject_att2_after_ack
    worker = make_worker(cluster, concurrency=1, options=with_prefetch(1))
    await run_until(worker, lambda: {"att-1", "att-3"} <= set(cluster.completed), timeout=10)
    periodic = [sorted(a["attempt_id"] for a in b["attempts"])
                for b in cluster.bodies("/v1/heartbeats") if len(b["attempts"]) > 1]
    assert ["att-1", "att-2"] in periodic  # the waiting lease kept alive
    assert "att-2" not in cluster.completed


async def test_a_waiting_lease_cancelled_by_the_server_is_reported_without_running() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1, "sleep 1.6"), lease(2, "echo never")]
    beats = 0

    async def cancel_att2_later(request: httpx.Request, body: dict[str, Any]
                                ) -> httpx.Response:
        nonlocal beats
        beats += 1
        return httpx.Response(200, json={"results": [
            {"attempt_id": a["attempt_id"], "ok": True,
             "cancel": a["attempt_id"] == "att-2" and beats > 1} for a in body["attempts"]]})

    cluster.overrides["/v1/heartbeats"] = cancel_att2_later
    worker = make_worker(cluster, concurrency=1, options=with_prefetch(1))
    await run_until(worker, lambda: len(cluster.completed) == 2, timeout=10)
    assert cluster.completed["att-2"]["outcome"] == "failed"
    assert "cancelled before it started" in cluster.completed["att-2"]["output"]
