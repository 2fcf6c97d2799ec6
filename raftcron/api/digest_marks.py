"""Digest marks (admin): the state digest of every node at one exact log index.

`POST /v1/digest/marks` commits a mark (a barrier entry, state.digest_marks) through Raft
like any write and answers its id and index once this node applied it and (within
`LOCAL_WAIT_S`) digested it. `GET /v1/digest/marks/{mark}` on any node answers that
node's digest at the mark's index: compare the answers of every node to compare their
states at one index, however fast they keep applying.
"""

from __future__ import annotations

from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from raftcron.api.auth import require_admin
from raftcron.api.errors import HTTPError
from raftcron.api.jobs import ctx_of
from raftcron.core.commands import Barrier
from raftcron.state.digest_marks import MARK_PREFIX, MarkDigest, is_mark_id, new_mark

# How long the POST waits for this node's own digest of the mark, so that a GET on the
# same node right after it finds the digest (a large state takes seconds to hash); after
# that it answers without one.
LOCAL_WAIT_S = 10.0


def _view(entry: MarkDigest, node_id: str) -> dict[str, Any]:
    view: dict[str, Any] = {"mark": entry.mark, "index": entry.index,
                            "digest": entry.digest, "node_id": node_id}
    if entry.error is not None:
        view["error"] = entry.error
    return view


async def create_mark(request: Request) -> JSONResponse:
    require_admin(request)
    ctx = ctx_of(request)
    mark = new_mark()
    try:
        result = await ctx.propose(Barrier(request_id=mark))
    except HTTPError as e:
        # An unknown outcome may still commit: the id lets the caller look for it.
        e.extra = {**e.extra, "mark": mark}
        raise
    entry = await anyio.to_thread.run_sync(ctx.node.digest_marks.wait, mark, LOCAL_WAIT_S)
    # A proposal retried after an unknown outcome can apply the mark twice: the registry
    # keeps the first index (the one every node keeps), so that is the one answered.
    body: dict[str, Any] = {"mark": mark, "index": result["index"]}
    if entry is not None:
        body = _view(entry, ctx.node.config.node_id) if entry.done else {
            "mark": mark, "index": entry.index}
    return JSONResponse(body, status_code=201,
                        headers={"Location": f"/v1/digest/marks/{mark}"})


async def get_mark(request: Request) -> JSONResponse:
    require_admin(request)
    mark = request.path_params["mark"]
    if not is_mark_id(mark):
        raise HTTPError(400, "invalid", f"must be {MARK_PREFIX} followed by 32 lowercase "
                                        "hexadecimal digits", "mark")
    node = ctx_of(request).node
    entry = node.digest_marks.get(mark)
    if entry is None:
        raise HTTPError(404, "not_found", f"this node holds no digest mark {mark}: not "
                        "applied here yet, evicted (a node keeps the newest "
                        f"{node.digest_marks.capacity}), or never made", "mark")
    if not entry.done:
        raise HTTPError(404, "not_found", f"digest mark {mark} is applied here at index "
                        f"{entry.index}; its digest is being computed", "mark",
                        extra={"index": entry.index})
    return JSONResponse(_view(entry, node.config.node_id))


ROUTES: list[Route] = [
    Route("/v1/digest/marks", create_mark, methods=["POST"]),
    Route("/v1/digest/marks/{mark}", get_mark, methods=["GET"]),
]
