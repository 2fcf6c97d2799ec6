"""Cluster, health and digest routes."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse

from raftcron.api.errors import HTTPError
from raftcron.api.heavy import heavy_reads
from raftcron.api.jobs import ctx_of
from raftcron.cluster import membership
from raftcron.config import ConfigError
from raftcron.core.errors import ValidationError
from raftcron.state.db import META_LAST_APPLIED, last_applied
from raftcron.state.digest import digest

if TYPE_CHECKING:
    from raftcron.node_view import NodeView

MAX_READY_LAG = 1000
PEER_TIMEOUT_S = 1.0
LEADER_VIEW_TTL_S = 1.0
# A digest is the answer for as long as the applied index it was asked at has not moved.
DIGEST_KEEP_S = 3600.0


async def cluster(request: Request) -> JSONResponse:
    """This node's view. With `?member_challenge=<hex nonce>` (asked by a leader before it
    makes this node a voter, ops.node_ops) it also carries `member_proof`: this node's id
    and Raft address with an HMAC over them and the nonce under a key derived from the
    cluster secret (cluster.membership.member_proof), which only a holder of the secret
    can compute."""
    node = ctx_of(request).node
    view = node.status()
    challenge = request.query_params.get("member_challenge")
    if challenge is not None:
        if not membership.CHALLENGE_RE.fullmatch(challenge):
            raise ValidationError("member_challenge", "must be 32-128 lowercase hex digits")
        try:
            secret = node.config.read_secret()
        except ConfigError as e:
            raise HTTPError(503, "unavailable", str(e), headers={"Retry-After": "1"}) from None
        view["member_proof"] = {
            "node_id": node.config.node_id, "raft_addr": node.config.raft_addr,
            "proof": membership.member_proof(secret, challenge, node.config.node_id,
                                             node.config.raft_addr)}
    return JSONResponse(view)


async def healthz(request: Request) -> JSONResponse:
    # now_ms lets peers compare wall clocks (leader.clock.ClockGuard); protocol_level
    # announces what this node reads (cluster.levels), for the leader's cluster level.
    return JSONResponse({"status": "ok", "now_ms": int(time.time() * 1000),
                         "protocol_level": ctx_of(request).node.protocol_level})


async def cluster_tick(request: Request, status: dict[str, Any]) -> dict[str, Any]:
    """When the leader's ticker last ran: this node's own ticker on the leader, else the
    leader's `/v1/cluster` (short timeout, cached for a second)."""
    if status["role"] == "leader":
        return {"last_tick_ms": status.get("last_tick_ms"), "source": status["node_id"]}
    url = status.get("leader_url")
    if not url:
        return {"last_tick_ms": None, "source": None, "error": "no leader"}
    cache = getattr(request.app.state, "leader_view", None)
    mono = time.monotonic()
    if cache and cache[0] == url and mono - cache[1] < LEADER_VIEW_TTL_S:
        return cache[2]
    try:
        resp = await request.app.state.http.get(f"{url}/v1/cluster", timeout=0.5)
        view = resp.json()
        out = {"last_tick_ms": view.get("last_tick_ms"), "source": view.get("node_id")}
    except (httpx.HTTPError, ValueError, AttributeError) as e:
        out = {"last_tick_ms": None, "source": None,
               "error": f"cannot reach the leader at {url}: {type(e).__name__}"}
    request.app.state.leader_view = (url, mono, out)
    return out


async def readyz(request: Request) -> JSONResponse:
    node = ctx_of(request).node
    st = node.status()
    problems = []
    warnings = []
    if st["leader_id"] is None:
        problems.append("no leader")
    if not st.get("has_quorum"):
        problems.append("no quorum: this node reaches no majority")
    if not st["ready"]:
        problems.append("not caught up with the leader")
    commit, applied = st.get("commit_index") or 0, st.get("raft_last_applied") or 0
    if commit - applied > MAX_READY_LAG:
        problems.append(f"{commit - applied} entries behind")
    clock = st.get("clock") or {}
    if clock.get("confirmed") is not True:
        # Fail closed: as leader this node would lease and claim nothing.
        problems.append(f"this node's clock is not confirmed by a majority "
                        f"({clock.get('agreeing_peers')} peers agree, {clock.get('needed_peers')} "
                        f"needed; skew {clock.get('skew_ms')} ms): as leader it leases and "
                        f"claims nothing")
    elif st.get("clock_blocked"):
        problems.append("the leader's clock is behind the cluster: it does not tick")
    level, speaks = st.get("cluster_level"), st.get("protocol_level")
    if isinstance(level, int) and isinstance(speaks, int) and level < speaks:
        # Not a problem (the cluster runs as the older build does), but worth seeing.
        warnings.append(f"cluster not fully upgraded (level {level} of {speaks}): the "
                        f"features of level {speaks} wait until every node speaks it")
    tick_age_s = None
    if st["leader_id"] is not None:
        tick = await cluster_tick(request, st)
        if tick.get("error"):
            warnings.append(tick["error"])
        elif tick.get("last_tick_ms") is None:
            problems.append("the leader's ticker has not run")
        else:
            tick_age_s = round(time.time() - tick["last_tick_ms"] / 1000, 3)
            if tick_age_s > node.config.tick_stale_s:
                problems.append(f"no tick for {tick_age_s:.0f} s "
                                f"(threshold {node.config.tick_stale_s:g} s)")
    body = {"ready": not problems, "problems": problems, "warnings": warnings,
            "node_id": st["node_id"], "leader_id": st["leader_id"], "tick_age_s": tick_age_s}
    return JSONResponse(body, status_code=200 if not problems else 503)


# The fields of a peer's `/v1/cluster` that `cluster_nodes` computes with, and the types
# they must have (None stands for "not known").
_PEER_INTS = ("commit_index", "last_applied_index", "now_ms")


def _bad_peer_answer(view: Any, node_id: str) -> str | None:
    """Why a peer's `/v1/cluster` answer cannot be shown as that node's view (None: it
    can). Whatever a peer sends (`{}`, a list, another node's view, strings for numbers)
    becomes that peer's error in the listing, never a failure of the whole listing."""
    if not isinstance(view, dict):
        return f"the answer is not a JSON object but {type(view).__name__}"
    if view.get("node_id") != node_id:
        got = view.get("node_id")
        return ("the answer names no node_id" if got is None
                else f"the answer is the view of node {str(got)[:64]!r}, not {node_id!r}")
    for key in _PEER_INTS:
        value = view.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            return f"the answer's {key} is not an integer"
    if not isinstance(view.get("role"), str | None):
        return "the answer's role is not a string"
    return None


async def _peer_view(client: httpx.AsyncClient, node_id: str, url: str) -> dict[str, Any]:
    """One peer's own `/v1/cluster`, or an entry with `reachable` false and the `error`
    that kept it from being one: no answer, an error status, or an answer that is not a
    node's view."""
    unreachable = {"node_id": node_id, "http_url": url, "reachable": False}
    t0 = time.time() * 1000
    try:
        resp = await client.get(f"{url}/v1/cluster", timeout=PEER_TIMEOUT_S)
        if resp.status_code != 200:
            return {**unreachable, "error": f"HTTP {resp.status_code}"}
        view = resp.json()
    except (httpx.HTTPError, ValueError) as e:
        return {**unreachable, "error": type(e).__name__}
    problem = _bad_peer_answer(view, node_id)
    if problem is not None:
        return {**unreachable, "error": problem}
    t1 = time.time() * 1000
    offset = view["now_ms"] - (t0 + t1) / 2 if isinstance(view.get("now_ms"), int) else None
    return {**view, "http_url": url, "reachable": True, "rtt_ms": round(t1 - t0, 1),
            "clock_offset_ms": None if offset is None else round(offset, 1)}


async def cluster_nodes(request: Request) -> JSONResponse:
    """Every node's own `/v1/cluster`, asked over HTTP with a short timeout, plus the lag
    and clock skew of each against the leader (skew estimated from the request midpoint,
    so it is accurate to about half the round trip)."""
    node = ctx_of(request).node
    own = node.status()
    own.update(http_url=node.config.http_url, reachable=True, rtt_ms=0.0, clock_offset_ms=0.0)
    raft_links = {p["id"]: p["reachable"] for p in own.get("peers", [])}
    client: httpx.AsyncClient = request.app.state.http
    peers = await asyncio.gather(*(_peer_view(client, p.id, p.http_url)
                                   for p in node.config.peers))
    nodes = [own, *peers]
    leader = next((n for n in nodes if n.get("role") == "leader" and n.get("reachable")), None)
    for n in nodes:
        n["raft_link_from_here"] = (None if n is own else raft_links.get(n["node_id"]))
        if leader is not None and n.get("reachable"):
            n["replication_lag"] = max(0, (leader.get("commit_index") or 0)
                                       - (n.get("last_applied_index") or 0))
            lo, no = leader.get("clock_offset_ms"), n.get("clock_offset_ms")
            n["clock_skew_vs_leader_ms"] = (None if lo is None or no is None
                                            else round(no - lo, 1))
        else:
            n["replication_lag"] = None
            n["clock_skew_vs_leader_ms"] = None
        n.pop("peers", None)
    return JSONResponse({"asked_by": node.config.node_id,
                         "leader_id": leader["node_id"] if leader else own.get("leader_id"),
                         "tick_stale_s": node.config.tick_stale_s,
                         "nodes": sorted(nodes, key=lambda n: n["node_id"])})


def _digest_at_one_index(node: NodeView) -> tuple[int, str]:
    """Digest and applied index from one read transaction (a consistent snapshot).

    Not under the apply lock on the writer connection: hashing a large state takes
    seconds, and holding the lock that long stalled the Raft thread into elections."""
    conn = node.open_reader()
    try:
        conn.execute("BEGIN")
        index = last_applied(conn)
        return index, digest(conn)
    finally:
        conn.close()


async def state_digest(request: Request) -> JSONResponse:
    """The canonical digest of this node's state and the index it reflects.

    Hashing the whole state is CPU-heavy: the digest is kept for as long as the applied
    index has not moved, and computed through `HeavyReads` (one at a time, shared by
    concurrent callers, duty-cycled) rather than once per request."""
    ctx = ctx_of(request)
    node = ctx.node
    row = await ctx.fetchone("SELECT value FROM meta WHERE key = ?", (META_LAST_APPLIED,))
    applied = int(row[0]) if row else 0
    index, value = await heavy_reads(request.app).run(
        ("digest", applied), _digest_at_one_index, node, keep_s=DIGEST_KEEP_S)
    return JSONResponse({"node_id": node.config.node_id, "last_applied_index": index,
                         "digest": value})
