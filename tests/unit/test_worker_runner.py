from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from raftcron.worker.client import ServerUnavailable, WorkerClient
from raftcron.worker.runner import Worker, WorkerConfigError, WorkerOptions, run_worker

FAST = WorkerOptions(
    wait_s=0.2, busy_wait_s=0.1, drain_timeout_s=3.0, report_timeout_s=3.0,
    kill_grace_s=0.3, request_timeout_s=2.0, backoff_initial_s=0.01, backoff_cap_s=0.05,
)


def lease(n: int, shell: str = "true", **kw: Any) -> dict[str, Any]:
    d = {
        "attempt_id": f"att-{n}", "occurrence_id": f"occ-{n}", "job_id": "job-1",
        "scheduled_for": "2026-03-08T07:00:00Z", "attempt": 1, "fencing_token": 100 + n,
        "idempotency_key": f"idem-{n}", "target": {"shell": shell},
        "max_runtime_s": None, "heartbeat_interval_s": 1,
    }
    d.update(kw)
    return d


Handler = Callable[[httpx.Request, dict[str, Any]], Awaitable[httpx.Response]]


class FakeCluster:
    """Routes requests by (host, path); records every request body."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.headers: list[httpx.Headers] = []
        self.down: set[str] = set()
        self.unavailable: set[str] = set()
        self.leases_to_give: list[dict[str, Any]] = []
        self.completed: dict[str, dict[str, Any]] = {}
        self.overrides: dict[str, Handler] = {}

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [b for _, p, b in self.calls if p == path]

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        host, path = request.url.host, request.url.path
        if host in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        body = json.loads(request.content or b"{}")
        self.calls.append((host, path, body))
        self.headers.append(request.headers)
        if host in self.unavailable:
            return httpx.Response(
                503, headers={"Retry-After": "0"},
                json={"error": {"code": "no_leader", "message": "no leader"}},
            )
        if path in self.overrides:
            return await self.overrides[path](request, body)
        return await self.default(request, body)

    async def default(self, request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        path = request.url.path
        if path == "/v1/leases":
            give = self.leases_to_give[: body["max"]]
            del self.leases_to_give[: len(give)]
            if not give:
                await asyncio.sleep(min(body["wait_s"], 0.05))
            return httpx.Response(200, json={"leases": give})
        if path == "/v1/heartbeats":
            return httpx.Response(200, json={"results": [
                {"attempt_id": a["attempt_id"], "ok": True, "cancel": False}
                for a in body["attempts"]
            ]})
        if path == "/v1/completions":
            return httpx.Response(200, json={"results": [self.record(c)
                                                         for c in body["completions"]]})
        if path == "/v1/releases":
            return httpx.Response(200, json={"results": [
                {"attempt_id": a["attempt_id"], "ok": True} for a in body["attempts"]
            ]})
        return httpx.Response(404, json={"error": {"code": "not_found", "message": path}})

    def record(self, c: dict[str, Any]) -> dict[str, Any]:
        prev = self.completed.get(c["attempt_id"])
        if prev is None:
            self.completed[c["attempt_id"]] = c
            return {"attempt_id": c["attempt_id"], "ok": True, "status": c["outcome"],
                    "duplicate": False}
        if prev == c:
            return {"attempt_id": c["attempt_id"], "ok": True, "status": c["outcome"],
                    "duplicate": True}
        return {"attempt_id": c["attempt_id"], "ok": False, "rejected": "conflict",
                "message": "different outcome"}


def make_worker(cluster: FakeCluster, *, concurrency: int = 2, token: str | None = None,
                options: WorkerOptions = FAST) -> Worker:
    return Worker(["http://a:1", "http://b:1"], ["default"], concurrency, "w1", token=token,
                  options=options, transport=httpx.MockTransport(cluster))


async def run_until(worker: Worker, cond: Callable[[], bool], timeout: float = 10) -> None:
    """Run `worker` until `cond()` holds, then stop it gracefully and wait for it."""
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        async with asyncio.timeout(timeout):
            while not cond():
                await asyncio.sleep(0.02)
        stop.set()
        await asyncio.wait_for(task, timeout)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# --- client failover ---------------------------------------------------------------------

async def test_client_fails_over_when_first_refuses_connections() -> None:
    cluster = FakeCluster()
    cluster.down.add("a")
    cluster.leases_to_give = [lease(1)]
    async with WorkerClient(["http://a:1", "http://b:1"],
                            transport=httpx.MockTransport(cluster)) as client:
        got = await client.lease("w1", ["q"], 5, 0.1)
        assert [g.attempt_id for g in got] == ["att-1"]
        assert client.current_server == "http://b:1"
        await client.lease("w1", ["q"], 5, 0.1)
    assert [h for h, _, _ in cluster.calls] == ["b", "b"]


async def test_client_fails_over_on_503() -> None:
    cluster = FakeCluster()
    cluster.unavailable.add("a")
    async with WorkerClient(["http://a:1", "http://b:1"],
                            transport=httpx.MockTransport(cluster)) as client:
        assert await client.lease("w1", ["q"], 1, 0.01) == []
    assert [h for h, _, _ in cluster.calls] == ["a", "b"]


async def test_client_raises_unavailable_when_all_fail() -> None:
    cluster = FakeCluster()
    cluster.down.add("a")
    cluster.unavailable.add("b")
    async with WorkerClient(["http://a:1", "http://b:1"],
                            transport=httpx.MockTransport(cluster)) as client:
        with pytest.raises(ServerUnavailable) as info:
            await client.lease("w1", ["q"], 1, 0.01)
    assert info.value.retry_after == 0


# --- runner ------------------------------------------------------------------------------

async def test_runs_leases_and_reports_with_bearer_token() -> None:
    cluster = FakeCluster()
    cluster.down.add("a")
    cluster.leases_to_give = [lease(1, "echo hi"), lease(2, "exit 7")]
    worker = make_worker(cluster, token="s3cret")
    await run_until(worker, lambda: len(cluster.completed) == 2)
    c1, c2 = cluster.completed["att-1"], cluster.completed["att-2"]
    assert (c1["outcome"], c1["exit_code"], c1["output"], c1["fencing_token"]) == (
        "succeeded", 0, "hi\n", 101)
    assert (c2["outcome"], c2["exit_code"]) == ("failed", 7)
    assert all(h["authorization"] == "Bearer s3cret" for h in cluster.headers)
    # concurrency 2 plus the default prefetch (as many as the concurrency)
    assert cluster.bodies("/v1/leases")[0]["max"] == 4


async def test_lost_completion_response_is_retried_identically() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1, "echo out; exit 1")]
    answered = 0

    async def flaky(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        nonlocal answered
        for c in body["completions"]:
            cluster.record(c)
        answered += 1
        if answered <= 2:
            # committed on the server, but the answer never reaches the worker
            raise httpx.ReadTimeout("timed out", request=request)
        return await cluster.default(request, body)

    cluster.overrides["/v1/completions"] = flaky
    worker = make_worker(cluster)
    await run_until(worker, lambda: answered >= 3)
    sent = cluster.bodies("/v1/completions")
    assert len(sent) == 3
    assert all(s == sent[0] for s in sent)
    assert [c["attempt_id"] for c in sent[0]["completions"]] == ["att-1"]
    assert cluster.completed["att-1"]["outcome"] == "failed"
    assert cluster.completed["att-1"]["exit_code"] == 1
    hosts = [h for h, p, _ in cluster.calls if p == "/v1/completions"]
    assert hosts[:2] == ["a", "b"]


async def test_rejected_heartbeat_stops_run_without_completion() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1, "echo started; sleep 30")]

    async def reject(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        if len(cluster.bodies("/v1/heartbeats")) == 1:  # the acknowledgement is accepted
            return await cluster.default(request, body)
        return httpx.Response(200, json={"results": [
            {"attempt_id": a["attempt_id"], "ok": False, "rejected": "stale_token",
             "message": "newer token"} for a in body["attempts"]
        ]})

    cluster.overrides["/v1/heartbeats"] = reject
    worker = make_worker(cluster)
    saw_run = False

    def ended() -> bool:
        nonlocal saw_run
        saw_run = saw_run or bool(worker.running)
        return saw_run and bool(cluster.bodies("/v1/heartbeats")) and not worker.running

    await run_until(worker, ended, timeout=8)
    assert cluster.bodies("/v1/heartbeats")[0]["attempts"] == [
        {"attempt_id": "att-1", "fencing_token": 101}]
    assert cluster.bodies("/v1/completions") == []
    assert cluster.completed == {}


async def test_heartbeat_cancel_kills_run_and_reports_failed() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1, "sleep 30")]

    async def cancel(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        if len(cluster.bodies("/v1/heartbeats")) == 1:  # the acknowledgement is accepted
            return await cluster.default(request, body)
        return httpx.Response(200, json={"results": [
            {"attempt_id": a["attempt_id"], "ok": True, "cancel": True}
            for a in body["attempts"]
        ]})

    cluster.overrides["/v1/heartbeats"] = cancel
    worker = make_worker(cluster)
    await run_until(worker, lambda: "att-1" in cluster.completed, timeout=8)
    c = cluster.completed["att-1"]
    assert c["outcome"] == "failed"
    assert "cancel requested" in c["output"]


async def test_heartbeats_are_batched() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1, "sleep 1.5"), lease(2, "sleep 1.5")]
    worker = make_worker(cluster)
    await run_until(worker, lambda: len(cluster.completed) == 2)
    beats = cluster.bodies("/v1/heartbeats")
    assert beats
    assert sorted(a["attempt_id"] for a in beats[0]["attempts"]) == ["att-1", "att-2"]


async def test_graceful_stop_releases_unstarted_leases() -> None:
    cluster = FakeCluster()
    stop = asyncio.Event()

    async def stop_then_grant(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        stop.set()
        return httpx.Response(200, json={"leases": [lease(1), lease(2)]})

    cluster.overrides["/v1/leases"] = stop_then_grant
    await asyncio.wait_for(
        run_worker(["http://a:1"], ["default"], 2, "w1", stop=stop, options=FAST,
                   transport=httpx.MockTransport(cluster)),
        5,
    )
    released = cluster.bodies("/v1/releases")
    assert released == [{"worker_id": "w1", "attempts": [
        {"attempt_id": "att-1", "fencing_token": 101},
        {"attempt_id": "att-2", "fencing_token": 102},
    ]}]
    assert cluster.completed == {}


async def test_graceful_stop_lets_running_attempts_finish() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1, "sleep 0.5; echo done")]
    worker = make_worker(cluster)
    await run_until(worker, lambda: bool(worker.running))
    assert cluster.completed["att-1"]["outcome"] == "succeeded"
    assert cluster.completed["att-1"]["output"] == "done\n"
    assert cluster.bodies("/v1/releases") == []


async def test_drain_timeout_kills_and_reports_failed() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1, "sleep 30")]
    worker = make_worker(cluster, options=dataclasses.replace(FAST, drain_timeout_s=0.3))
    await run_until(worker, lambda: bool(worker.running))
    c = cluster.completed["att-1"]
    assert c["outcome"] == "failed"
    assert "shutting down" in c["output"]


async def test_leasing_backs_off_and_recovers_when_cluster_unavailable() -> None:
    cluster = FakeCluster()
    cluster.unavailable.update({"a", "b"})
    cluster.leases_to_give = [lease(1)]
    worker = make_worker(cluster)

    async def heal() -> None:
        await asyncio.sleep(0.3)
        cluster.unavailable.clear()

    healer = asyncio.create_task(heal())
    await run_until(worker, lambda: "att-1" in cluster.completed)
    await healer
    assert cluster.completed["att-1"]["outcome"] == "succeeded"


def test_no_wait_between_tries_exceeds_two_seconds_by_default() -> None:
    """A long outage must not leave a worker asleep after the cluster is back: each wait
    is capped (30 s used to strand runs for that long after a failover)."""
    from raftcron.worker.runner import Backoff

    opts = WorkerOptions()
    backoff = Backoff(opts.backoff_initial_s, opts.backoff_cap_s)
    waits = [backoff.next() for _ in range(50)] + [backoff.next(retry_after=120)]
    assert max(waits) <= 2.0
    assert waits[0] < 1.0  # the first retry still comes quickly


def refuse_leases(cluster: FakeCluster, times: int, status: int = 401) -> list[int]:
    """The next `times` lease requests are refused with `status`; then leases as usual.
    Returns the list the refusals are counted in."""
    refused: list[int] = []

    async def handler(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        if len(refused) < times:
            refused.append(status)
            return httpx.Response(status, json={"error": {
                "code": "unauthorized", "message": "unknown token", "field": "Authorization"}})
        return await cluster.default(request, body)

    cluster.overrides["/v1/leases"] = handler
    return refused


async def test_a_refused_token_is_retried_through_the_grace_period() -> None:
    cluster = FakeCluster()
    refused = refuse_leases(cluster, times=3)
    cluster.leases_to_give = [lease(1)]
    worker = make_worker(cluster, options=dataclasses.replace(FAST, refused_grace_s=30))
    await run_until(worker, lambda: "att-1" in cluster.completed)
    assert refused == [401, 401, 401]


async def test_a_token_still_refused_after_the_grace_period_stops_the_worker() -> None:
    cluster = FakeCluster()
    refused = refuse_leases(cluster, times=10_000, status=403)
    worker = make_worker(cluster, options=dataclasses.replace(FAST, refused_grace_s=0.3))
    with pytest.raises(WorkerConfigError, match="cannot lease: unknown token"):
        await asyncio.wait_for(worker.run(asyncio.Event()), 10)
    assert len(refused) >= 2  # asked again within the grace period before stopping
    # No grace: the first refusal stops it.
    once = FakeCluster()
    refused_once = refuse_leases(once, times=1)
    once.leases_to_give = [lease(1)]
    no_grace = make_worker(once, options=dataclasses.replace(FAST, refused_grace_s=0))
    with pytest.raises(WorkerConfigError):
        await asyncio.wait_for(no_grace.run(asyncio.Event()), 10)
    assert refused_once == [401] and not once.completed


async def test_after_a_first_lease_a_refusal_is_retried_for_good() -> None:
    """Once the configuration worked, a 401 is a token rollout in progress or a node's
    hiccup: the worker keeps asking, past any grace period."""
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1)]
    worker = make_worker(cluster, options=dataclasses.replace(FAST, refused_grace_s=0))
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        async with asyncio.timeout(10):
            while "att-1" not in cluster.completed:
                await asyncio.sleep(0.02)
        refused = refuse_leases(cluster, times=5)
        cluster.leases_to_give = [lease(2)]
        async with asyncio.timeout(10):
            while "att-2" not in cluster.completed:
                assert not task.done()
                await asyncio.sleep(0.02)
        assert refused == [401] * 5
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_main_exits_zero_on_sigterm() -> None:
    import socket
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "import sys; from raftcron.worker.runner import main; "
        f"sys.exit(main(['http://127.0.0.1:{port}'], ['default'], 1, 'w-main'))"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(10):
            while b"starting" not in await proc.stderr.readline():
                pass
            proc.send_signal(signal.SIGTERM)
            err = await proc.stderr.read()
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert b"shutting down gracefully" in err


# --- explicit delivery: acknowledge, then start -------------------------------------------

class RecordingExecutor:
    """Stands in for the job process: records which leases started, and what the cluster
    had been told by then."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.started: list[str] = []
        self.heartbeats_before_start: list[int] = []

    async def __call__(self, lease: Any, **_: Any) -> Any:
        from raftcron.worker.executors import RunResult
        self.started.append(lease.attempt_id)
        self.heartbeats_before_start.append(len(self.cluster.bodies("/v1/heartbeats")))
        return RunResult("succeeded", 0, "")


def make_recording_worker(cluster: FakeCluster,
                          options: WorkerOptions = FAST) -> tuple[Worker, RecordingExecutor]:
    executor = RecordingExecutor(cluster)
    worker = Worker(["http://a:1", "http://b:1"], ["default"], 2, "w1", options=options,
                    transport=httpx.MockTransport(cluster), executor=executor)
    return worker, executor


async def test_a_lease_is_acknowledged_before_its_run_starts() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1, ack_timeout_s=3)]
    worker, executor = make_recording_worker(cluster)
    await run_until(worker, lambda: "att-1" in cluster.completed)
    assert cluster.bodies("/v1/leases")[0]["acknowledge"] is True
    assert executor.started == ["att-1"]
    assert executor.heartbeats_before_start == [1]
    assert cluster.bodies("/v1/heartbeats")[0]["attempts"] == [
        {"attempt_id": "att-1", "fencing_token": 101}]


async def test_a_refused_acknowledgement_never_starts_the_run() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1), lease(2)]

    async def refuse_first(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(200, json={"results": [
            {"attempt_id": a["attempt_id"], "ok": False, "rejected": "stale_token",
             "message": "released: not acknowledged"} if a["attempt_id"] == "att-1"
            else {"attempt_id": a["attempt_id"], "ok": True, "cancel": False}
            for a in body["attempts"]
        ]})

    cluster.overrides["/v1/heartbeats"] = refuse_first
    worker, executor = make_recording_worker(cluster)
    await run_until(worker, lambda: "att-2" in cluster.completed)
    assert executor.started == ["att-2"]
    assert "att-1" not in cluster.completed


async def test_a_lost_acknowledgement_answer_is_retried_and_the_run_starts_once() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1)]
    answers = 0

    async def lose_two(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        nonlocal answers
        answers += 1
        if answers <= 2:  # applied on the server, the answer never arrives
            raise httpx.ReadTimeout("timed out", request=request)
        return await cluster.default(request, body)

    cluster.overrides["/v1/heartbeats"] = lose_two
    worker, executor = make_recording_worker(cluster)
    await run_until(worker, lambda: "att-1" in cluster.completed)
    assert executor.started == ["att-1"]
    assert executor.heartbeats_before_start == [3]
    sent = cluster.bodies("/v1/heartbeats")[:3]
    assert all(s == sent[0] for s in sent)  # the same acknowledgement, resent


async def test_no_answer_to_the_acknowledgement_means_no_run() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1)]

    async def never(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(503, headers={"Retry-After": "0"},
                              json={"error": {"code": "no_leader", "message": "no leader"}})

    cluster.overrides["/v1/heartbeats"] = never
    worker, executor = make_recording_worker(
        cluster, dataclasses.replace(FAST, ack_give_up_s=0.3))
    await run_until(worker, lambda: len(cluster.bodies("/v1/leases")) >= 2)
    assert len(cluster.bodies("/v1/heartbeats")) >= 2  # it kept asking until giving up
    assert executor.started == []
    assert cluster.bodies("/v1/completions") == []


async def test_a_refused_acknowledgement_request_means_no_run() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1)]

    async def forbidden(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(403, json={"error": {"code": "forbidden", "message": "no"}})

    cluster.overrides["/v1/heartbeats"] = forbidden
    worker, executor = make_recording_worker(cluster)
    await run_until(worker, lambda: len(cluster.bodies("/v1/leases")) >= 2)
    assert executor.started == []


async def test_a_lease_cancelled_before_it_started_is_reported_without_running() -> None:
    cluster = FakeCluster()
    cluster.leases_to_give = [lease(1)]

    async def cancel(request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(200, json={"results": [
            {"attempt_id": a["attempt_id"], "ok": True, "cancel": True}
            for a in body["attempts"]]})

    cluster.overrides["/v1/heartbeats"] = cancel
    worker, executor = make_recording_worker(cluster)
    await run_until(worker, lambda: "att-1" in cluster.completed)
    assert executor.started == []
    assert cluster.completed["att-1"]["outcome"] == "failed"
    assert "cancelled before it started" in cluster.completed["att-1"]["output"]


def test_lease_from_dict_reads_the_ack_timeout() -> None:
    from raftcron.worker.client import Lease
    assert Lease.from_dict(lease(1, ack_timeout_s=4)).ack_timeout_s == 4
    assert Lease.from_dict(lease(1)).ack_timeout_s is None
