"""Cluster, health and digest routes."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from raftcron.api.jobs import ctx_of
from raftcron.state.db import last_applied
from raftcron.state.digest import digest

MAX_READY_LAG = 1000


async def cluster(request: Request) -> JSONResponse:
    return JSONResponse(ctx_of(request).node.status())


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    st = ctx_of(request).node.status()
    problems = []
    if st["leader_id"] is None:
        problems.append("no leader")
    if not st.get("has_quorum"):
        problems.append("no quorum: this node reaches no majority")
    if not st["ready"]:
        problems.append("not caught up with the leader")
    commit, applied = st.get("commit_index") or 0, st.get("raft_last_applied") or 0
    if commit - applied > MAX_READY_LAG:
        problems.append(f"{commit - applied} entries behind")
    body = {"ready": not problems, "problems": problems, "node_id": st["node_id"],
            "leader_id": st["leader_id"]}
    return JSONResponse(body, status_code=200 if not problems else 503)


async def state_digest(request: Request) -> JSONResponse:
    """The canonical digest of this node's state and the index it reflects."""
    node = ctx_of(request).node
    with node.apply_lock:
        return JSONResponse({"node_id": node.config.node_id,
                             "last_applied_index": last_applied(node.writer),
                             "digest": digest(node.writer)})
