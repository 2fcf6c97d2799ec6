"""Operations on a running node: membership changes and backups (used by api.ops)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pysyncobj import FAIL_REASON

from raftcron.cluster import membership
from raftcron.cluster.membership import Member, MembershipError
from raftcron.cluster.proposer import post_to_loop
from raftcron.ops import backup

if TYPE_CHECKING:
    from raftcron.node_view import NodeView

log = logging.getLogger("raftcron.ops")

RAFT_CHANGE_TIMEOUT_S = 10.0


class OpsError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


def _callback_future(loop: asyncio.AbstractEventLoop
                     ) -> tuple[asyncio.Future[tuple[Any, int]], Callable[[Any, int], None]]:
    fut: asyncio.Future[tuple[Any, int]] = loop.create_future()

    def done(result: Any, err: int) -> None:
        def settle() -> None:
            if not fut.done():
                fut.set_result((result, err))

        post_to_loop(loop, settle)

    return fut, done


async def _raft_change(node: NodeView, start: Callable[[Callable[[Any, int], None]], None],
                       what: str, settled: Callable[[], bool]) -> None:
    """Run one pysyncobj membership change until it is committed (or already in place).

    pysyncobj refuses a change while the previous one is not committed (REQUEST_DENIED),
    and answers DISCARDED/LEADER_CHANGED around elections: ask again until the deadline."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + RAFT_CHANGE_TIMEOUT_S
    last = None
    while time.monotonic() < deadline:
        if settled():
            return
        fut, done = _callback_future(loop)
        start(done)
        try:
            _, err = await asyncio.wait_for(fut, max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            break
        if err == FAIL_REASON.SUCCESS:
            return
        last = err
        await asyncio.sleep(0.2)
    if settled():
        return
    raise OpsError(503, "unavailable", f"could not commit the Raft change ({what}); last "
                   f"reason {last}: is there a leader with a majority?")


def _voters_lack(node: NodeView, raft_addr: str) -> bool:
    """Whether the Raft voters are known and `raft_addr` is not one of them (unreadable
    voters are not "removed")."""
    voters = node.raft.other_addrs()
    return voters is not None and raft_addr not in voters


async def _propose_record(node: NodeView, data: bytes) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + RAFT_CHANGE_TIMEOUT_S
    while True:
        fut, done = _callback_future(loop)
        node.raft.submit_raw(data, done)
        try:
            result, err = await asyncio.wait_for(fut, max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            raise OpsError(503, "unknown_outcome", "the member record did not commit in "
                           "time; repeat the request (it is idempotent)") from None
        if err == FAIL_REASON.SUCCESS:
            return dict(result or {})
        if time.monotonic() > deadline:
            raise OpsError(503, "unknown_outcome", f"the member record was refused (reason "
                           f"{err}); repeat the request (it is idempotent)")
        await asyncio.sleep(0.2)


def members_view(node: NodeView) -> dict[str, Any]:
    """This node's view: the Raft voters it counts, with ids and HTTP URLs."""
    voters = (node.raft.other_addrs() or set()) | {node.config.raft_addr}
    known = {p.raft_addr: p for p in node.config.peers}
    rows = [{"id": node.config.node_id, "raft_addr": node.config.raft_addr,
             "http_url": node.config.http_url, "self": True}]
    for addr in sorted(voters - {node.config.raft_addr}):
        peer = known.get(addr)
        rows.append({"id": peer.id if peer else None, "raft_addr": addr,
                     "http_url": peer.http_url if peer else None, "self": False})
    conn = node.open_reader()
    try:
        records = membership.read_members(conn)
    finally:
        conn.close()
    return {
        "node_id": node.config.node_id,
        "leader_id": node.leader_id(),
        "members": sorted(rows, key=lambda r: (r["id"] or "", r["raft_addr"])),
        "records": [{"id": m.id, "raft_addr": m.raft_addr, "http_url": m.http_url,
                     "removed": m.removed} for m in records],
    }


async def add_member(node: NodeView, member_id: str, raft_addr: str, http_url: str
                     ) -> dict[str, Any]:
    """Add a voter (Raft first, then its replicated record). Idempotent."""
    try:
        m = membership.validate(member_id, raft_addr, http_url)
    except MembershipError as e:
        raise OpsError(400, "invalid", e.message, e.field) from None
    if m.id == node.config.node_id or m.raft_addr == node.config.raft_addr:
        if (m.id, m.raft_addr) != (node.config.node_id, node.config.raft_addr):
            raise OpsError(409, "conflict", "the id or Raft address belongs to this node")
        raise OpsError(409, "conflict", "this node is already a member")
    for p in node.config.peers:
        if p.id == m.id and p.raft_addr != m.raft_addr:
            raise OpsError(409, "conflict", f"member {p.id!r} exists with Raft address "
                           f"{p.raft_addr}: remove it first", "id")
        if p.raft_addr == m.raft_addr and p.id != m.id:
            raise OpsError(409, "conflict", f"Raft address {m.raft_addr} belongs to "
                           f"member {p.id!r}", "raft_addr")
    existed = any(p.id == m.id and p.raft_addr == m.raft_addr for p in node.config.peers)
    await _raft_change(
        node, lambda cb: node.raft.addNodeToCluster(m.raft_addr, callback=cb),
        f"add {m.raft_addr}", lambda: m.raft_addr in (node.raft.other_addrs() or set()))
    result = await _propose_record(node, membership.encode_put(m))
    if not result.get("ok"):
        raise OpsError(400, "invalid", str(result.get("message")))
    node.refresh_peers()
    log.info("member %s (%s, %s) %s", m.id, m.raft_addr, m.http_url,
             "was already one" if existed else "added")
    # `added` false: it was a member already (a repeated call), perhaps running.
    return {**members_view(node), "added": not existed}


async def remove_member(node: NodeView, member_id: str) -> dict[str, Any]:
    """Remove a voter (Raft first, then the tombstone). Idempotent."""
    if member_id == node.config.node_id:
        if node.raft.is_leader():
            raise OpsError(409, "is_leader", "cannot remove the leader: stop it with SIGTERM "
                           "(it hands leadership over) or ask another node")
        raise OpsError(409, "conflict", "ask another node to remove this one")
    peer = next((p for p in node.config.peers if p.id == member_id), None)
    if peer is None:
        raise OpsError(404, "not_found", f"no member {member_id!r}", "id")
    if node.leader_id() == member_id:
        raise OpsError(409, "is_leader", f"{member_id!r} is the leader: stop it with SIGTERM "
                       "(it hands leadership over) and remove it afterwards")
    await _raft_change(
        node, lambda cb: node.raft.removeNodeFromCluster(peer.raft_addr, callback=cb),
        f"remove {peer.raft_addr}", lambda: _voters_lack(node, peer.raft_addr))
    result = await _propose_record(
        node, membership.encode_remove(Member(peer.id, peer.raft_addr, peer.http_url)))
    if not result.get("ok"):
        raise OpsError(400, "invalid", str(result.get("message")))
    node.refresh_peers()
    log.info("member %s (%s) removed", peer.id, peer.raft_addr)
    return members_view(node)


def take_backup(node: NodeView) -> tuple[str, backup.BackupInfo]:
    """Write a consistent copy of this node's state into its data directory (blocking)."""
    path = os.path.join(node.config.data_dir, f".backup-{uuid.uuid4().hex}.db")
    try:
        return path, backup.write_backup(node.config.db_path, path)
    except BaseException:
        if os.path.exists(path):
            os.unlink(path)
        raise
