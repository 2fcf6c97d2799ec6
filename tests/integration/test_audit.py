"""The audit trail: one JSON line per write, with the principal, outcome and request id,
including the writes the auth middleware refuses; reads are not logged."""

from __future__ import annotations

import io
import json
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from raftcron.api.audit import STDERR_PREFIX, AuditMiddleware, AuditSink
from raftcron.api.auth import Authenticator, AuthMiddleware
from raftcron.auth import create_token


async def ok(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


async def boom(request: Request) -> JSONResponse:
    return JSONResponse({"error": {"code": "invalid"}}, status_code=400)


def app(tmp_path: Path, sink: AuditSink) -> tuple[Starlette, str, str]:
    tokens = str(tmp_path / "tokens.json")
    admin = create_token(tokens, ["admin"], "ops-admin")
    reader = create_token(tokens, ["read"], "dashboard")
    auth = Authenticator(tokens, False, None)
    routes = [Route("/v1/jobs", ok, methods=["GET", "POST"]),
              Route("/v1/bad", boom, methods=["POST"])]
    return Starlette(routes=routes, middleware=[
        Middleware(AuditMiddleware, sink=sink, node_id="n1"),
        Middleware(AuthMiddleware, authenticator=auth)]), admin, reader


@pytest.mark.asyncio
async def test_every_write_is_one_json_line(tmp_path: Path) -> None:
    log_path = tmp_path / "audit.jsonl"
    sink = AuditSink(str(log_path))
    application, admin, reader = app(tmp_path, sink)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application),
                                 base_url="http://n1") as c:
        created = await c.post("/v1/jobs", headers={"Authorization": f"Bearer {admin}",
                                                    "Idempotency-Key": "k-1"})
        await c.get("/v1/jobs", headers={"Authorization": f"Bearer {admin}"})
        await c.post("/v1/jobs", headers={"Authorization": f"Bearer {reader}"})
        await c.post("/v1/jobs", headers={"Authorization": "Bearer rc_wrong"})
        await c.post("/v1/bad", headers={"Authorization": f"Bearer {admin}"})
    sink.close()
    lines = [json.loads(x) for x in log_path.read_text().splitlines()]
    got = [(x["principal"], x["method"], x["path"], x["status"], x["outcome"])
           for x in lines]
    assert got == [("ops-admin", "POST", "/v1/jobs", 200, "ok"),
                   ("dashboard", "POST", "/v1/jobs", 403, "denied"),
                   (None, "POST", "/v1/jobs", 401, "denied"),
                   ("ops-admin", "POST", "/v1/bad", 400, "rejected")]
    assert lines[0]["idempotency_key"] == "k-1" and lines[0]["node"] == "n1"
    assert lines[0]["request_id"] == created.headers["x-request-id"]
    assert len({x["request_id"] for x in lines}) == 4
    assert all(x["time"].endswith("Z") for x in lines)


def test_without_a_file_lines_go_to_stderr_with_a_prefix() -> None:
    stream = io.StringIO()
    AuditSink(stream=stream).write({"principal": "x"})
    assert stream.getvalue() == STDERR_PREFIX + '{"principal":"x"}\n'
