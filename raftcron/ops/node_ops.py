"""Operations on a running node: membership changes and backups (used by api.ops).

A membership change must never cost the cluster its leader (issue 32: one `add-node` of
an address nobody answers at left 3 live voters of 6 and no leader, for good). So:

- the fields are checked in full before anything is proposed (`membership.validate`, 400);
- only the leader decides, since only it sees which voters answer (a follower answers
  503 `not_leader`, naming the leader; the CLI asks it next);
- one change at a time: a second request while one is under way here, or while an earlier
  one did not finish (a voter without a member record, a member that is no voter), is
  refused with 409 `change_in_progress`, naming how to finish or undo it;
- live majority (etcd's strict reconfiguration check): a change that would leave fewer
  live voters than a majority of the new configuration is refused with 409
  `no_live_majority`; unknown liveness counts as down (`membership.change_refusal`);
- a new member must already run: within PROBE_TIMEOUT_S it must prove, at its
  `http_url`, that it holds this cluster's secret and runs with the id and Raft address
  asked for, with an empty state, and its Raft port must accept connections from the
  leader; else 409 `unreachable` / `not_proven`. A voter that exists and answers cannot
  take a quorum away while it catches up: the check above never counts it;
- an add that does not commit in time is rolled back (its removal proposed).

pysyncobj 0.3.17 has no learners (its read-only nodes connect inward with no address the
leader could promote) and its own one-change-at-a-time guard never engages (the index it
checks is never set), hence these checks here.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from pysyncobj import FAIL_REASON

from raftcron.api.auth import node_token
from raftcron.cluster import membership
from raftcron.cluster.membership import Member, MembershipError, VotersView
from raftcron.cluster.peer_tls import peer_tls
from raftcron.cluster.proposer import post_to_loop
from raftcron.config import ConfigError
from raftcron.ops import backup

if TYPE_CHECKING:
    from raftcron.cluster.raft import RaftNode
    from raftcron.node_view import NodeView

log = logging.getLogger("raftcron.ops")

RAFT_CHANGE_TIMEOUT_S = 10.0
# How long a new member has to answer the leader's challenge (it is asked again every
# PROBE_RETRY_S while nothing answers), and how long one attempt may take.
PROBE_TIMEOUT_S = 5.0
PROBE_RETRY_S = 0.5
PROBE_ATTEMPT_S = 1.5
RAFT_THREAD_TIMEOUT_S = 2.0

T = TypeVar("T")

# Nodes (by id()) with a membership change under way. Only the event loop's thread reads
# or writes it, and never across an await between the test and the add.
_CHANGING: set[int] = set()


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


async def on_raft_thread(raft: RaftNode, fn: Callable[[RaftNode], T],
                         timeout_s: float = RAFT_THREAD_TIMEOUT_S) -> T:
    """`fn(raft)` run once on the Raft tick thread (pysyncobj's state is only consistent
    there), its result or exception handed back to the event loop."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()
    ran: list[bool] = []

    def settle(value: Any, error: BaseException | None) -> None:
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)

    def once() -> None:
        if ran:
            return
        ran.append(True)
        try:
            value = fn(raft)
        except Exception as e:  # noqa: BLE001 - handed to the caller
            post_to_loop(loop, settle, None, e)
        else:
            post_to_loop(loop, settle, value, None)

    raft.addOnTickCallback(once)
    try:
        return await asyncio.wait_for(fut, timeout_s)
    finally:
        # Takes pysyncobj's callback lock, held while one tick runs its callbacks (ms).
        raft.removeOnTickCallback(once)


def _voters_lack(node: NodeView, raft_addr: str) -> bool:
    """Whether the Raft voters are known and `raft_addr` is not one of them (unreadable
    voters are not "removed")."""
    voters = node.raft.other_addrs()
    return voters is not None and raft_addr not in voters


def _voters(node: NodeView) -> set[str]:
    voters = node.raft.other_addrs()
    if voters is None:
        raise OpsError(503, "unavailable", "cannot read the Raft voters now; try again")
    return voters


def _require_leader(node: NodeView) -> None:
    if node.raft.is_leader():
        return
    url = node.leader_http_url()
    where = f"ask the leader at {url}" if url else "the cluster has no leader now"
    raise OpsError(503, "not_leader", "membership changes are made by the leader, which "
                   f"sees which voters answer: {where}")


@contextlib.contextmanager
def _one_change(node: NodeView) -> Iterator[None]:
    key = id(node)
    if key in _CHANGING:
        raise OpsError(409, "change_in_progress", "another membership change is under way "
                       "on this leader: wait for its answer, then check `raftcron cluster "
                       "members` and try again")
    _CHANGING.add(key)
    try:
        yield
    finally:
        _CHANGING.discard(key)


def _refuse_unfinished(node: NodeView, voters: set[str], finishing: str) -> None:
    """409 when an earlier change did not finish, unless this request is the one that
    finishes or undoes it (it concerns the same Raft address)."""
    unfinished = membership.unfinished_change(voters, node.config.peers)
    if unfinished is not None and unfinished[0] != finishing:
        raise OpsError(409, "change_in_progress", f"one membership change at a time: "
                       f"{unfinished[1]}")


async def _voters_view(node: NodeView) -> VotersView:
    try:
        return await on_raft_thread(node.raft, membership.read_voters)
    except Exception as e:  # noqa: BLE001 - unknown liveness: refuse (fail closed)
        raise OpsError(503, "unavailable", "cannot read the voters' state from the Raft "
                       f"thread ({type(e).__name__}): no membership change without it; "
                       "try again") from None


async def _require_live_majority(node: NodeView, op: str, raft_addr: str) -> None:
    view = await _voters_view(node)
    if not view.leader:
        _require_leader(node)
    refusal = membership.change_refusal(view, op, raft_addr)
    if refusal is not None:
        raise OpsError(409, "no_live_majority", f"{op} {raft_addr} refused: {refusal}")


# --- the new member's proof -------------------------------------------------------------------

async def _prove_new_member(node: NodeView, m: Member) -> None:
    """409 unless `m` runs, holds the cluster's secret, has the id and Raft address asked
    for, has applied nothing, and its Raft port accepts a connection from here; nothing
    that answers is asked again every PROBE_RETRY_S until PROBE_TIMEOUT_S."""
    try:
        secret = node.config.read_secret()
    except ConfigError as e:
        raise OpsError(503, "unavailable", str(e)) from None
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    headers = {"Authorization": f"Bearer {node_token(secret)}"}
    async with httpx.AsyncClient(headers=headers, verify=peer_tls(node.config)) as client:
        while True:
            problem = await _probe_once(client, secret, m)
            if problem is None:
                return
            code, field, reason, again = problem
            if not again or time.monotonic() + PROBE_RETRY_S >= deadline:
                break
            await asyncio.sleep(PROBE_RETRY_S)
    raise OpsError(409, code, f"{m.id} was not added: {reason}", field)


_START_FIRST = ("start the new node first (an empty data_dir, this cluster's secret_file, "
                "the current members as its [[peers]]: `raftcron cluster members`), then add "
                "it")


async def _probe_once(client: httpx.AsyncClient, secret: str, m: Member
                      ) -> tuple[str, str, str, bool] | None:
    """None when `m` proved itself; else (code, field, reason, worth asking again)."""
    challenge = secrets.token_hex(16)
    url = f"{m.http_url}/v1/cluster"
    try:
        resp = await client.get(url, params={"member_challenge": challenge},
                                timeout=PROBE_ATTEMPT_S)
    except (httpx.HTTPError, httpx.InvalidURL) as e:
        return ("unreachable", "http_url",
                f"nothing answers at {m.http_url} ({type(e).__name__}) within "
                f"{PROBE_TIMEOUT_S:g} s: {_START_FIRST}", True)
    if resp.status_code in (401, 403):
        return ("not_proven", "http_url", f"the node at {m.http_url} refused this cluster's "
                "node token: it runs with another cluster secret", False)
    if resp.status_code != 200:
        return ("unreachable", "http_url",
                f"{url} answered HTTP {resp.status_code}, not this cluster's view", True)
    try:
        view = resp.json()
    except ValueError:
        view = None
    proof = view.get("member_proof") if isinstance(view, dict) else None
    if not isinstance(view, dict) or not isinstance(proof, dict):
        return ("not_proven", "http_url", f"{url} did not answer the membership challenge "
                "(not a raftcron node, or a build older than this one)", False)
    if proof.get("node_id") != m.id:
        return ("not_proven", "id", f"the node at {m.http_url} is "
                f"{membership.shown(str(proof.get('node_id')))}, not {m.id!r}", False)
    if proof.get("raft_addr") != m.raft_addr:
        return ("not_proven", "raft_addr", f"the node at {m.http_url} runs with raft_addr "
                f"{membership.shown(str(proof.get('raft_addr')))}, not {m.raft_addr}", False)
    expected = membership.member_proof(secret, challenge, m.id, m.raft_addr)
    if not hmac.compare_digest(str(proof.get("proof")), expected):
        return ("not_proven", "http_url", f"the node at {m.http_url} does not hold this "
                "cluster's secret (its proof does not match)", False)
    applied = view.get("last_applied_index")
    if isinstance(applied, int) and not isinstance(applied, bool) and applied > 0:
        return ("not_proven", "http_url", f"the node at {m.http_url} has applied {applied} "
                "entries of a log of its own: a new member starts with an empty data_dir",
                False)
    host, _, port = m.raft_addr.rpartition(":")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)),
                                           PROBE_ATTEMPT_S)
    except (OSError, TimeoutError) as e:
        return ("unreachable", "raft_addr", f"{m.id} answers at {m.http_url}, but its Raft "
                f"address {m.raft_addr} accepts no connection from this node "
                f"({type(e).__name__}: {e})", True)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return None


# --- proposals --------------------------------------------------------------------------------

class _NotCommitted(Exception):
    pass


async def _commit_raft_change(node: NodeView, start: Callable[[Callable[[Any, int], None]],
                                                              None], what: str) -> None:
    """Propose one pysyncobj membership entry and wait until it is committed (its
    callback's SUCCESS fires on commit). REQUEST_DENIED from a leader that has not yet
    committed an entry of its term is asked again; any other failure means the outcome is
    not known here (503)."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + RAFT_CHANGE_TIMEOUT_S
    while True:
        fut, done = _callback_future(loop)
        start(done)
        try:
            _, err = await asyncio.wait_for(fut, max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            raise _NotCommitted from None
        if err == FAIL_REASON.SUCCESS:
            return
        if (err == FAIL_REASON.REQUEST_DENIED and node.raft.is_leader()
                and time.monotonic() + 0.2 < deadline):
            await asyncio.sleep(0.2)
            continue
        raise OpsError(503, "unknown_outcome", f"the Raft change ({what}) was not committed "
                       f"here (pysyncobj reason {err}): check `raftcron cluster members` "
                       "and repeat the request (it is idempotent)")


def _roll_back_add(node: NodeView, raft_addr: str) -> bool:
    """Propose the removal of a voter whose add did not commit in time (best effort: only
    a leader that still counts it proposes)."""
    if not node.raft.is_leader() or raft_addr not in (node.raft.other_addrs() or set()):
        return False

    def logged(_: Any, err: int) -> None:
        log.warning("roll-back of the add of %s: %s", raft_addr,
                    "committed" if err == FAIL_REASON.SUCCESS else f"reason {err}")

    node.raft.removeNodeFromCluster(raft_addr, callback=logged)
    return True


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


# --- add and remove ---------------------------------------------------------------------------

def _checked_member(node: NodeView, member_id: str, raft_addr: str, http_url: str) -> Member:
    try:
        m = membership.validate(member_id, raft_addr, http_url)
    except MembershipError as e:
        raise OpsError(400, "invalid", e.message, e.field) from None
    if node.config.tls_cert and not m.http_url.startswith("https://"):
        raise OpsError(400, "invalid", "must be an https:// URL: this cluster serves TLS, "
                       "and the node token would cross to an http:// member in clear",
                       "http_url")
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
    return m


async def add_member(node: NodeView, member_id: str, raft_addr: str, http_url: str
                     ) -> dict[str, Any]:
    """Add a voter that already runs (Raft first, then its replicated record); see the
    module docstring for what is refused. Idempotent: a member already in place answers
    `added` false, an add that did not finish is finished."""
    m = _checked_member(node, member_id, raft_addr, http_url)
    known = any(p.id == m.id and p.raft_addr == m.raft_addr for p in node.config.peers)
    if known and m.raft_addr in _voters(node):
        return {**members_view(node), "added": False}
    _require_leader(node)
    with _one_change(node):
        voters = _voters(node)
        _refuse_unfinished(node, voters, m.raft_addr)
        if m.raft_addr not in voters:
            await _require_live_majority(node, "add", m.raft_addr)
            await _prove_new_member(node, m)
            # Again: the proof took time, in which a voter may have gone.
            await _require_live_majority(node, "add", m.raft_addr)
            try:
                await _commit_raft_change(
                    node, lambda cb: node.raft.addNodeToCluster(m.raft_addr, callback=cb),
                    f"add {m.raft_addr}")
            except _NotCommitted:
                undone = _roll_back_add(node, m.raft_addr)
                raise OpsError(503, "unknown_outcome", f"adding {m.raft_addr} did not commit "
                               f"within {RAFT_CHANGE_TIMEOUT_S:g} s; "
                               + ("its removal was proposed (rolled back)" if undone else
                                  "this node no longer leads: check `raftcron cluster "
                                  "members`")) from None
        # else: an add of this very member that did not finish: its record completes it.
        result = await _propose_record(node, membership.encode_put(m))
        if not result.get("ok"):
            raise OpsError(400, "invalid", str(result.get("message")))
        node.refresh_peers()
    log.info("member %s (%s, %s) added", m.id, m.raft_addr, m.http_url)
    return {**members_view(node), "added": True}


async def remove_member(node: NodeView, member_id: str) -> dict[str, Any]:
    """Remove a voter (Raft first, then the tombstone); see the module docstring for what
    is refused. `member_id` may also be the Raft address of a voter without a member
    record (an add that did not finish). Idempotent."""
    if member_id == node.config.node_id:
        if node.raft.is_leader():
            raise OpsError(409, "is_leader", "cannot remove the leader: stop it with SIGTERM "
                           "(it hands leadership over) and remove it afterwards")
        _require_leader(node)  # the leader removes this node (503 not_leader naming it)
    peer = next((p for p in node.config.peers if p.id == member_id), None)
    voters = _voters(node)
    if peer is not None:
        target = peer.raft_addr
    elif member_id in voters and all(p.raft_addr != member_id for p in node.config.peers):
        target = member_id  # a voter without a record
    else:
        raise OpsError(404, "not_found", f"no member {membership.shown(member_id)}", "id")
    if node.leader_id() == member_id or node.raft.leader_addr() == target:
        raise OpsError(409, "is_leader", f"{member_id!r} is the leader: stop it with SIGTERM "
                       "(it hands leadership over) and remove it afterwards")
    _require_leader(node)
    with _one_change(node):
        voters = _voters(node)
        _refuse_unfinished(node, voters, target)
        if target in voters:
            await _require_live_majority(node, "remove", target)
            try:
                await _commit_raft_change(
                    node, lambda cb: node.raft.removeNodeFromCluster(target, callback=cb),
                    f"remove {target}")
            except _NotCommitted:
                raise OpsError(503, "unknown_outcome", f"removing {target} did not commit "
                               f"within {RAFT_CHANGE_TIMEOUT_S:g} s: check `raftcron cluster "
                               "members` and repeat the request") from None
        if peer is not None:
            result = await _propose_record(
                node, membership.encode_remove(Member(peer.id, peer.raft_addr, peer.http_url)))
            if not result.get("ok"):
                raise OpsError(400, "invalid", str(result.get("message")))
        node.refresh_peers()
    log.info("member %s (%s) removed", member_id, target)
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
