from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from raftcron.worker.client import Lease
from raftcron.worker.executors import (
    OUTPUT_LIMIT,
    Cancel,
    execute,
    run_http,
    run_shell,
    tail_text,
)


def make_lease(target: dict, *, max_runtime_s: int | None = None, **kw: object) -> Lease:
    base = {
        "attempt_id": "att-1",
        "occurrence_id": "occ-1",
        "job_id": "job-1",
        "scheduled_for": "2026-03-08T07:00:00Z",
        "attempt": 1,
        "fencing_token": 42,
        "idempotency_key": "idem-1",
        "target": target,
        "max_runtime_s": max_runtime_s,
        "heartbeat_interval_s": 5,
    }
    base.update(kw)
    return Lease.from_dict(base)


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie awaiting a reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def wait_gone(pid: int, within_s: float = 3.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        await asyncio.sleep(0.05)
    return not alive(pid)


def child_pid(output: str) -> int:
    for line in output.splitlines():
        if line.startswith("child="):
            return int(line.split("=", 1)[1])
    raise AssertionError(f"no child pid in {output!r}")


# --- shell -------------------------------------------------------------------------------

async def test_exit_zero_succeeds_and_captures_stdout_and_stderr() -> None:
    r = await run_shell("echo out; echo err >&2")
    assert r.outcome == "succeeded"
    assert r.exit_code == 0
    assert "out" in r.output and "err" in r.output
    assert r.killed is None


async def test_nonzero_exit_fails_with_code() -> None:
    r = await run_shell("echo nope; exit 3")
    assert (r.outcome, r.exit_code) == ("failed", 3)
    assert "nope" in r.output


async def test_environment_has_raftcron_ids_and_not_the_worker_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAFTCRON_TEST_INHERITED", "yes")
    monkeypatch.setenv("RAFTCRON_TOKEN", "rc_worker_secret")
    r = await execute(make_lease({"shell": "env"}))
    assert "rc_worker_secret" not in r.output
    env = dict(line.split("=", 1) for line in r.output.splitlines() if "=" in line)
    assert r.outcome == "succeeded"
    assert env["RAFTCRON_JOB_ID"] == "job-1"
    assert env["RAFTCRON_OCCURRENCE_ID"] == "occ-1"
    assert env["RAFTCRON_ATTEMPT_ID"] == "att-1"
    assert env["RAFTCRON_SCHEDULED_FOR"] == "2026-03-08T07:00:00Z"
    assert env["RAFTCRON_FENCING_TOKEN"] == "42"
    assert env["RAFTCRON_IDEMPOTENCY_KEY"] == "idem-1"
    assert env["RAFTCRON_TEST_INHERITED"] == "yes"


async def test_output_keeps_only_last_64_kib() -> None:
    # 200 KiB of numbered lines, then a marker at the very end.
    cmd = "i=0; while [ $i -lt 3000 ]; do printf '%070d\\n' $i; i=$((i+1)); done; echo END"
    r = await run_shell(cmd)
    assert r.outcome == "succeeded"
    data = r.output.encode()
    assert len(data) == OUTPUT_LIMIT
    assert r.output.endswith("END\n")
    assert f"{2999:070d}" in r.output
    assert f"{0:070d}" not in r.output


def test_tail_text_never_exceeds_limit_in_bytes() -> None:
    blob = ("é" * 40000).encode()[1:]  # starts mid-character
    text = tail_text(blob, 1001)
    assert len(text.encode()) <= 1001
    assert text.endswith("é")


async def test_max_runtime_kills_whole_process_group() -> None:
    cmd = "sleep 30 & echo child=$!; sleep 30"
    started = time.monotonic()
    r = await run_shell(cmd, max_runtime_s=0.5, kill_grace_s=0.5)
    assert time.monotonic() - started < 5
    assert r.outcome == "failed"
    assert r.killed and "max_runtime_s" in r.killed
    assert r.exit_code is not None and r.exit_code != 0
    assert await wait_gone(child_pid(r.output))


async def test_sigterm_ignoring_group_gets_sigkill() -> None:
    cmd = "trap '' TERM; sh -c 'trap \"\" TERM; sleep 30' & echo child=$!; sleep 30"
    r = await run_shell(cmd, max_runtime_s=0.3, kill_grace_s=0.3)
    assert r.outcome == "failed"
    assert r.exit_code is not None and r.exit_code < 0
    assert await wait_gone(child_pid(r.output))


async def test_cancel_kills_whole_process_group() -> None:
    cancel = Cancel()
    task = asyncio.create_task(
        run_shell("sleep 30 & echo child=$!; sleep 30", cancel=cancel, kill_grace_s=0.5)
    )
    await asyncio.sleep(0.3)
    cancel.set("cancel requested by the server")
    r = await asyncio.wait_for(task, 5)
    assert r.outcome == "failed"
    assert r.killed == "cancel requested by the server"
    assert "cancel requested" in r.output
    assert await wait_gone(child_pid(r.output))


async def test_background_leftovers_are_killed_after_shell_exits() -> None:
    r = await asyncio.wait_for(run_shell("sleep 30 & echo child=$!", kill_grace_s=0.5), 5)
    assert (r.outcome, r.exit_code) == ("succeeded", 0)
    assert await wait_gone(child_pid(r.output))


async def test_unsupported_target_fails_without_running() -> None:
    r = await execute(make_lease({"grpc": {}}))
    assert r.outcome == "failed"
    assert "unsupported" in r.output


# --- http --------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def http_server() -> AsyncIterator[tuple[str, list[dict]]]:
    seen: list[dict] = []

    async def echo(request: Request) -> Response:
        body = await request.body()
        seen.append({"method": request.method, "headers": dict(request.headers),
                     "body": body.decode()})
        status = int(request.query_params.get("status", "200"))
        return JSONResponse({"ok": status < 300}, status_code=status)

    async def big(request: Request) -> Response:
        return PlainTextResponse("H" * 100_000 + "T" * 100_000)

    async def slow(request: Request) -> Response:
        await asyncio.sleep(10)
        return PlainTextResponse("late")

    app = Starlette(routes=[
        Route("/echo", echo, methods=["GET", "POST", "PUT"]),
        Route("/big", big),
        Route("/slow", slow),
    ])
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server.started:
            break
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.should_exit = True
        server.force_exit = True
        await asyncio.wait_for(task, 5)


async def test_http_2xx_succeeds_with_fencing_headers(http_server) -> None:
    base, seen = http_server
    lease = make_lease({"http": {"url": f"{base}/echo", "method": "POST",
                                 "headers": {"X-Custom": "1"}, "body": "payload"}})
    r = await execute(lease)
    assert (r.outcome, r.exit_code) == ("succeeded", None)
    assert json.loads(r.output) == {"ok": True}
    h = seen[0]["headers"]
    assert seen[0]["method"] == "POST"
    assert seen[0]["body"] == "payload"
    assert h["idempotency-key"] == "idem-1"
    assert h["x-raftcron-fencing-token"] == "42"
    assert h["x-custom"] == "1"


async def test_http_5xx_fails_with_status_code(http_server) -> None:
    base, _ = http_server
    r = await execute(make_lease({"http": {"url": f"{base}/echo?status=503", "method": "GET"}}))
    assert (r.outcome, r.exit_code) == ("failed", 503)
    assert r.output.startswith("HTTP 503 Service Unavailable\n"), r.output


async def test_http_body_keeps_head_and_tail(http_server) -> None:
    base, _ = http_server
    r = await execute(make_lease({"http": {"url": f"{base}/big"}}))
    assert r.outcome == "succeeded"
    assert len(r.output.encode()) <= OUTPUT_LIMIT
    assert r.output.startswith("HHHH") and r.output.endswith("TTTT")
    assert "truncated" in r.output


async def test_http_runtime_limit_is_the_timeout(http_server) -> None:
    base, _ = http_server
    started = time.monotonic()
    r = await run_http({"url": f"{base}/slow"}, max_runtime_s=0.3)
    assert time.monotonic() - started < 3
    assert (r.outcome, r.exit_code) == ("failed", None)


async def test_http_transport_error_fails_with_text() -> None:
    r = await run_http({"url": f"http://127.0.0.1:{_free_port()}/"}, max_runtime_s=5)
    assert (r.outcome, r.exit_code) == ("failed", None)
    assert "ConnectError" in r.output


async def test_http_cancel_aborts_request() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(10)
        return httpx.Response(200)

    cancel = Cancel()
    task = asyncio.create_task(run_http({"url": "http://x/"}, cancel=cancel,
                                        transport=httpx.MockTransport(handler)))
    await asyncio.sleep(0.1)
    cancel.set("stop")
    r = await asyncio.wait_for(task, 3)
    assert (r.outcome, r.killed) == ("failed", "stop")


async def test_exit_poll_starts_short_and_backs_off_to_its_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A trivial command's slot is free within milliseconds, not one 50 ms poll later."""
    from raftcron.worker import executors

    class Proc:
        returncode: int | None = None

    proc = Proc()
    delays: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        delays.append(seconds)
        if len(delays) == 10:
            proc.returncode = 0

    monkeypatch.setattr(executors.asyncio, "sleep", fake_sleep)
    assert await executors._exited(proc, poll_s=0.05) == 0  # type: ignore[arg-type]
    assert delays[0] <= 0.001
    assert delays == sorted(delays) and max(delays) == 0.05
    assert sum(delays[:4]) < 0.02  # four looks within the first 20 ms
