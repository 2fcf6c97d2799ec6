"""Operations routes (admin scope): backup download and cluster membership."""

from __future__ import annotations

import os
from typing import Any

import anyio
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Route

from raftcron.api.auth import principal_of
from raftcron.api.errors import HTTPError, json_body
from raftcron.api.jobs import ctx_of
from raftcron.ops import node_ops as ops


def _require_admin(request: Request) -> None:
    principal = principal_of(request)
    if not principal.admin:
        raise HTTPError(403, "forbidden", f"token {principal.name!r} needs the admin scope",
                        "Authorization")


def _ops_error(e: ops.OpsError) -> HTTPError:
    headers = {"Retry-After": "1"} if e.status == 503 else None
    return HTTPError(e.status, e.code, e.message, e.field, headers)


async def get_backup(request: Request) -> FileResponse:
    """A consistent copy of this node's state database (SQLite). `?consistent=true` first
    commits a barrier, so the copy holds every write acknowledged before the request."""
    _require_admin(request)
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    path, info = await anyio.to_thread.run_sync(ops.take_backup, ctx.node)
    node_id = ctx.node.config.node_id
    return FileResponse(
        path, media_type="application/vnd.sqlite3",
        filename=f"raftcron-{node_id}-{info.last_applied_index}.db",
        headers={"X-Raftcron-Node-Id": node_id,
                 "X-Raftcron-Last-Applied-Index": str(info.last_applied_index),
                 "X-Raftcron-Epoch": str(info.epoch),
                 "Cache-Control": "no-store"},
        background=BackgroundTask(os.unlink, path),
    )


async def list_members(request: Request) -> JSONResponse:
    _require_admin(request)
    return JSONResponse(ops.members_view(ctx_of(request).node))


async def _json_object(request: Request) -> dict[str, Any]:
    body = await json_body(request)  # size and depth bounded like every other body
    if not isinstance(body, dict):
        raise HTTPError(400, "invalid", "the body must be a JSON object")
    return body


async def add_member(request: Request) -> JSONResponse:
    """`{"id", "raft_addr", "http_url"}`: add a voter. Start the new node (empty data dir,
    its config listing the current members as peers) after this answered."""
    _require_admin(request)
    body = await _json_object(request)
    for key in ("id", "raft_addr", "http_url"):
        if not isinstance(body.get(key), str):
            raise HTTPError(400, "invalid", "is required (a string)", key)
    try:
        view = await ops.add_member(ctx_of(request).node, body["id"], body["raft_addr"],
                                    body["http_url"])
    except ops.OpsError as e:
        raise _ops_error(e) from None
    return JSONResponse(view)


async def remove_member(request: Request) -> JSONResponse:
    _require_admin(request)
    try:
        view = await ops.remove_member(ctx_of(request).node,
                                       request.path_params["member_id"])
    except ops.OpsError as e:
        raise _ops_error(e) from None
    return JSONResponse(view)


ROUTES: list[Route] = [
    Route("/v1/backup", get_backup, methods=["GET"]),
    Route("/v1/cluster/members", list_members, methods=["GET"]),
    Route("/v1/cluster/members", add_member, methods=["POST"]),
    Route("/v1/cluster/members/{member_id}", remove_member, methods=["DELETE"]),
]
