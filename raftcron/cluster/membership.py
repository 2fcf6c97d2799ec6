"""Cluster membership: who the peers are, with their HTTP URLs, replicated through Raft.

pysyncobj's dynamic membership (`addNodeToCluster` / `removeNodeFromCluster`) changes the
Raft topology but knows only Raft addresses, and it does not survive restarts well: log
entries that changed the topology are not re-applied when a node restarts, and a snapshot's
topology replaces the configured peers (pysyncobj #133). So raftcron keeps its own record:

- a `cluster_members` table in the state database (id, raft_addr, http_url, removed),
  written by *member operations* that travel through the same replicated method as the
  state machine's commands (prefixed with `MEMBER_PREFIX`; commands are JSON and start with
  `{`), applied in one transaction together with the applied log index;
- a node's peers are its configured `[[peers]]` merged with that table (the table wins; a
  removed member is dropped even if a stale config still lists it). They give the Raft
  topology at start-up, the snapshot topology on load (see `cluster.raft`), and the HTTP
  URLs used to forward to the leader and to show the cluster.

The table is written after pysyncobj committed the topology change (add: Raft first, then
the record; remove: Raft first, then the tombstone), so a record never names a voter that
Raft does not know. The table is part of the state digest (`state.digest`): every node
holds the same records. A restore drops it (`ops.backup.restore`: a restored backup starts
a new cluster, with members of its own), so a restored state digests like its source with
the member records left out. `GET /v1/cluster/members` shows the records per node.

What keeps a change from costing the quorum (issue 32) is decided here as pure rules and
enforced by `ops.node_ops`: the fields of a new member (`validate`), the proof a new node
gives of the cluster secret (`member_proof`), which voters count as live and whether a
change leaves a live majority (`read_voters`, `change_refusal`), and a change that did not
finish (`unfinished_change`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pysyncobj.monotonic import monotonic as raft_clock

from raftcron.config import Peer
from raftcron.state.db import META_LAST_APPLIED, get_meta, set_meta

MEMBER_PREFIX = b"M"
TABLE = "cluster_members"
SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    " id TEXT PRIMARY KEY, raft_addr TEXT NOT NULL, http_url TEXT NOT NULL,"
    " removed INTEGER NOT NULL DEFAULT 0, updated_index INTEGER NOT NULL) WITHOUT ROWID"
)

# --- what a member is -----------------------------------------------------------------------
#
# New requests are checked in full by `validate` before anything is proposed: the patterns
# below (also the OpenAPI schema's, api.openapi) and the checks a pattern cannot state,
# each with its reason. Log entries are checked by the rules they were first applied with
# (`as_logged`, the `_LOGGED_*` patterns): replay must give every node the same result.

MAX_ID_LEN = 64
MAX_HOST_LEN = 253
MAX_URL_LEN = 500
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# RFC 1123 labels; the last one starts with a letter (as every top-level domain and
# `localhost` do), so that "1234" or "10.0.0.300" is not taken for a name.
_HOSTNAME = rf"(?:{_LABEL}\.)*[A-Za-z](?:[A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?"
# 1-65535, no leading zero: pysyncobj names a node by its address text, so "n4:05035" and
# "n4:5035" would be two different voters for one process.
_PORT = (r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]"
         r"|6553[0-5])")
ADDR_RE = re.compile(rf"^(?:{_IPV4}|{_HOSTNAME}):{_PORT}$")
URL_RE = re.compile(rf"^[Hh][Tt][Tt][Pp][Ss]?://(?:{_IPV4}|{_HOSTNAME}|\[[0-9A-Fa-f:.]{{2,45}}\])"
                    rf"(?::{_PORT})?(?:/[A-Za-z0-9._~-]+)*/?$")
# The rules log entries were first applied with (see `validate`).
_LOGGED_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_LOGGED_ADDR_RE = re.compile(r"^[A-Za-z0-9.\-\[\]:]{1,253}:[0-9]{1,5}$")
_LOGGED_URL_RE = re.compile(r"^https?://[^\s/]+(/\S*)?$")


class MembershipError(ValueError):
    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Member:
    id: str
    raft_addr: str
    http_url: str
    removed: bool = False


def shown(text: str, limit: int = 60) -> str:
    """`text` quoted for an error message: ASCII, one line, at most `limit` characters."""
    quoted = ascii(text[:limit])
    return quoted + ("..." if len(text) > limit else "")


def _port_problem(port: str, *, raft: bool) -> str | None:
    if not port:
        return "has no port (HOST:PORT)" if raft else "has an empty port"
    if not port.isascii() or not port.isdigit():
        return f"port {shown(port)} is not a number"
    if len(port) > 1 and port[0] == "0":
        return f"port {port} has a leading zero: write {int(port)}" + (
            " (pysyncobj names a node by its address text, so both spellings would be two "
            "voters)" if raft else "")
    if not 1 <= int(port) <= 65535:
        return f"port {port} is outside 1-65535"
    return None


def _host_problem(host: str, *, ipv6_ok: bool) -> str | None:
    """Why `host` is not a hostname, an IPv4 address (or, when `ipv6_ok`, a bracketed
    IPv6 address) a node can be reached at (None: it is one)."""
    if not host:
        return "has no host"
    if host.startswith("[") and host.endswith("]"):
        if not ipv6_ok:
            return ("is an IPv6 address: pysyncobj cannot connect to a bracketed Raft "
                    "address; use a hostname that resolves to it")
        if "%" in host:
            return f"host {shown(host)} names a zone (%...): it means nothing to other nodes"
        try:
            ip6 = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return f"host {shown(host)} is not an IPv6 address"
        if ip6.is_unspecified or ip6.is_multicast:
            return f"host {host} is not an address a node can be reached at"
        return None
    if ":" in host:
        return (f"host {shown(host)} holds a ':' (an IPv6 address must be bracketed"
                + (")" if ipv6_ok else ", and pysyncobj cannot use one as a Raft address)"))
    if len(host) > MAX_HOST_LEN:
        return f"host is {len(host)} characters long (at most {MAX_HOST_LEN})"
    if re.fullmatch(r"[0-9.]+", host):
        if not re.fullmatch(_IPV4, host):
            return (f"host {shown(host)} is not an IPv4 address (four numbers 0-255, no "
                    "leading zeros)")
        ip4 = ipaddress.IPv4Address(host)
        if ip4.is_unspecified or ip4.is_multicast or host == "255.255.255.255":
            return f"host {host} is not an address a node can be reached at"
        return None
    if not re.fullmatch(_HOSTNAME, host):
        return (f"host {shown(host)} is not a hostname (ASCII letters, digits and '-' in "
                "dot-separated labels of 1-63, the last one starting with a letter)")
    return None


def _addr_problem(raft_addr: str) -> str | None:
    if not raft_addr:
        return "is empty (HOST:PORT)"
    if len(raft_addr) > MAX_HOST_LEN + 6:
        return f"is {len(raft_addr)} characters long (HOST:PORT, at most {MAX_HOST_LEN + 6})"
    if not raft_addr.isascii():
        return f"{shown(raft_addr)} is not ASCII (HOST:PORT; a name in its xn-- form)"
    if not raft_addr.isprintable() or " " in raft_addr:
        return f"{shown(raft_addr)} holds a space or a control character (HOST:PORT)"
    host, sep, port = raft_addr.rpartition(":")
    if not sep:
        return f"{shown(raft_addr)} has no port (HOST:PORT)"
    return _host_problem(host, ipv6_ok=False) or _port_problem(port, raft=True)


def _url_problem(http_url: str) -> str | None:
    if not http_url:
        return "is empty (an http:// or https:// URL)"
    if len(http_url) > MAX_URL_LEN:
        return f"is {len(http_url)} characters long (at most {MAX_URL_LEN})"
    if not http_url.isascii():
        return (f"{shown(http_url)} is not ASCII (write an internationalised host in its "
                "xn-- form)")
    if not http_url.isprintable() or " " in http_url:
        return f"{shown(http_url)} holds a space or a control character"
    scheme, sep, rest = http_url.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return f"{shown(http_url)} is not an http:// or https:// URL"
    authority, slash, path = rest.partition("/")
    if "?" in rest or "#" in rest:
        return "must not hold a query or a fragment (the node's base URL)"
    if "@" in authority:
        return "must not hold a user or password"
    if authority.startswith("["):
        host, bracket, tail = authority.partition("]")
        if not bracket:
            return f"host {shown(authority)} opens a '[' it does not close"
        host += bracket
        if tail and not tail.startswith(":"):
            return f"{shown(authority)} is not HOST[:PORT]"
        port = tail[1:] if tail else None
    elif authority.count(":") > 1:
        return f"host {shown(authority)} looks like an IPv6 address: it must be bracketed"
    else:
        host, colon, port_text = authority.partition(":")
        port = port_text if colon else None
    problem = _host_problem(host, ipv6_ok=True)
    if problem is None and port is not None:
        problem = _port_problem(port, raft=False)
    if problem is not None:
        return problem
    if slash and not re.fullmatch(r"(?:/[A-Za-z0-9._~-]+)*/?", slash + path):
        return (f"path {shown(slash + path)} is not made of ASCII letters, digits and "
                "'._~-' between slashes")
    return None


def _encodable(text: str) -> bool:
    """SQLite stores UTF-8: a lone surrogate (JSON allows "\\udaed") cannot be stored."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def validate(member_id: str, raft_addr: str, http_url: str, *, as_logged: bool = False
             ) -> Member:
    """A member's fields, checked in full for a new request; `MembershipError` names the
    field and the reason.

    `as_logged` is the check apply has always made on log entries (`re.match`, which let a
    trailing newline through): replaying an entry must give the result it gave when it was
    first applied, on every node and every version. One rule was added to it: a string
    SQLite cannot store (a lone surrogate) is a rejection; before, applying such an entry
    stopped every node (exit 70), so no node ever applied one with another result."""
    if as_logged:
        return _validate_logged(member_id, raft_addr, http_url)
    if not isinstance(member_id, str) or not ID_RE.fullmatch(member_id):
        given = f", not {shown(member_id)}" if isinstance(member_id, str) else ""
        raise MembershipError(f"must be 1-{MAX_ID_LEN} ASCII letters, digits, '.', '_' or '-', "
                              f"starting with a letter or digit{given}", "id")
    if not isinstance(raft_addr, str):
        raise MembershipError("must be a string HOST:PORT", "raft_addr")
    problem = _addr_problem(raft_addr)
    if problem is not None:
        raise MembershipError(problem, "raft_addr")
    if not isinstance(http_url, str):
        raise MembershipError("must be a string (an http:// or https:// URL)", "http_url")
    problem = _url_problem(http_url)
    if problem is not None:
        raise MembershipError(problem, "http_url")
    scheme, _, rest = http_url.partition("://")
    return Member(member_id, raft_addr, f"{scheme.lower()}://{rest}".rstrip("/"))


def _validate_logged(member_id: Any, raft_addr: Any, http_url: Any) -> Member:
    """The rules of `validate(..., as_logged=True)`: frozen, see there."""
    if not isinstance(member_id, str) or not _LOGGED_ID_RE.match(member_id):
        raise MembershipError("must be 1-64 letters, digits, '.', '_' or '-'", "id")
    if not isinstance(raft_addr, str) or not _LOGGED_ADDR_RE.match(raft_addr) \
            or not 0 < int(raft_addr.rsplit(":", 1)[1]) < 65536:
        raise MembershipError("must be HOST:PORT", "raft_addr")
    if not isinstance(http_url, str) or not _LOGGED_URL_RE.match(http_url) \
            or len(http_url) > MAX_URL_LEN:
        raise MembershipError("must be an http(s) URL", "http_url")
    if not _encodable(http_url):
        raise MembershipError("holds a string SQLite cannot store", "http_url")
    return Member(member_id, raft_addr, http_url.rstrip("/"))


def encode_put(member: Member) -> bytes:
    body = {"op": "put", "id": member.id, "raft_addr": member.raft_addr,
            "http_url": member.http_url}
    return MEMBER_PREFIX + json.dumps(body, separators=(",", ":")).encode()


def encode_remove(member: Member) -> bytes:
    body = {"op": "remove", "id": member.id, "raft_addr": member.raft_addr,
            "http_url": member.http_url}
    return MEMBER_PREFIX + json.dumps(body, separators=(",", ":")).encode()


def is_member_op(data: bytes) -> bool:
    return data[:1] == MEMBER_PREFIX


def ensure_table(conn: sqlite3.Connection) -> None:
    conn.execute(SCHEMA)


def apply_op(conn: sqlite3.Connection, index: int, data: bytes) -> dict[str, Any]:
    """Apply one member operation at log `index` (idempotent on replay, like commands)."""
    try:
        body = json.loads(data[len(MEMBER_PREFIX):])
        member = validate(body["id"], body["raft_addr"], body["http_url"], as_logged=True)
        op = body["op"]
        if op not in ("put", "remove"):
            raise MembershipError(f"unknown member operation {op!r}")
    except (ValueError, KeyError, TypeError) as e:
        # Deterministic on every node: a bad record is a rejection, not a crash.
        op, member, error = None, None, str(e)
    conn.execute("BEGIN IMMEDIATE")
    try:
        if index <= get_meta(conn, META_LAST_APPLIED):
            conn.execute("ROLLBACK")
            return {"ok": True, "replayed": True}
        ensure_table(conn)
        if member is None:
            result: dict[str, Any] = {"ok": False, "rejected": "invalid", "message": error}
        else:
            conn.execute(
                f"INSERT INTO {TABLE} (id, raft_addr, http_url, removed, updated_index) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                "raft_addr = excluded.raft_addr, http_url = excluded.http_url, "
                "removed = excluded.removed, updated_index = excluded.updated_index",
                (member.id, member.raft_addr, member.http_url, int(op == "remove"), index),
            )
            result = {"ok": True, "op": op, "id": member.id}
        set_meta(conn, META_LAST_APPLIED, index)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return result


def read_members(conn: sqlite3.Connection) -> list[Member]:
    try:
        rows = conn.execute(
            f"SELECT id, raft_addr, http_url, removed FROM {TABLE} ORDER BY id").fetchall()
    except sqlite3.OperationalError:  # no table yet (a read-only view of an old database)
        return []
    return [Member(r[0], r[1], r[2], bool(r[3])) for r in rows]


def merge_peers(configured: Iterable[Peer], members: Iterable[Member], self_id: str,
                self_raft_addr: str) -> tuple[Peer, ...]:
    """The configured peers updated by the replicated records: a record replaces the
    configured peer with its id, a removed record drops it, self is never a peer."""
    members = list(members)
    active = [m for m in members if not m.removed]
    gone_ids = {m.id for m in members if m.removed}
    # A stale config may list a removed node under another id: drop its address too.
    gone_addrs = {m.raft_addr for m in members if m.removed} - {m.raft_addr for m in active}
    peers = {p.id: p for p in configured
             if p.id not in gone_ids and p.raft_addr not in gone_addrs}
    for m in active:
        peers[m.id] = Peer(m.id, m.raft_addr, m.http_url)
    return tuple(sorted((p for p in peers.values()
                         if p.id != self_id and p.raft_addr != self_raft_addr),
                        key=lambda p: p.id))


def removed_addrs(members: Iterable[Member]) -> set[str]:
    return {m.raft_addr for m in members if m.removed}


# --- proving a new member ---------------------------------------------------------------------
#
# Before a node becomes a voter, the leader asks it `GET /v1/cluster?member_challenge=<nonce>`
# (with the node token). Its answer carries `member_proof(secret, nonce, its id, its
# raft_addr)`: only a process holding this cluster's secret can compute it, for the id and
# Raft address the request names.

CHALLENGE_RE = re.compile(r"^[0-9a-f]{32,128}$")
_PROOF_KEY_LABEL = b"raftcron member proof v1"


def member_proof(secret: str, challenge: str, node_id: str, raft_addr: str) -> str:
    """HMAC of the challenge, id and Raft address under a key derived from the secret (a
    key of its own: the proof reveals nothing usable as the node token or the Raft key)."""
    key = hmac.new(secret.encode(), _PROOF_KEY_LABEL, hashlib.sha256).digest()
    return hmac.new(key, f"{challenge}\n{node_id}\n{raft_addr}".encode(),
                    hashlib.sha256).hexdigest()


# --- live majority ----------------------------------------------------------------------------
#
# A change is checked on the leader, against what its Raft thread knows of each voter (read
# on that thread: `read_voters`). A voter counts as live only with positive evidence: a
# connected link, an answer within LIVE_ANSWER_S (heartbeats go every 0.05 s) and a match
# index within LIVE_SLACK_ENTRIES of the commit index. Anything else (no link, silence, a
# node still catching up, a value that could not be read) counts as not live.

LIVE_ANSWER_S = 1.0
LIVE_SLACK_ENTRIES = 64


@dataclass(frozen=True)
class VoterState:
    """One other voter as the leader's Raft thread sees it (None: not known)."""

    addr: str
    connected: bool
    answered_s_ago: float | None
    match_index: int | None


@dataclass(frozen=True)
class VotersView:
    leader: bool
    commit_index: int
    voters: tuple[VoterState, ...]  # the voters besides this node


def read_voters(raft: Any) -> VotersView:
    """On the Raft tick thread only (pysyncobj's private state, name-mangled; it changes
    under any other thread)."""
    now = raft_clock()
    connected = raft._SyncObj__connectedNodes
    answered = raft._SyncObj__lastResponseTime
    match = raft._SyncObj__raftMatchIndex
    voters = []
    for node in raft._SyncObj__otherNodes:
        at = answered.get(node)
        voters.append(VoterState(
            addr=str(node.address), connected=node in connected,
            answered_s_ago=None if at is None else max(0.0, now - at),
            match_index=match.get(node)))
    return VotersView(leader=bool(raft._isLeader()),
                      commit_index=int(raft._SyncObj__raftCommitIndex),
                      voters=tuple(sorted(voters, key=lambda v: v.addr)))


def not_live_because(voter: VoterState, commit_index: int) -> str | None:
    """Why `voter` does not count as live (None: it does)."""
    if not voter.connected:
        return "not connected"
    if voter.answered_s_ago is None:
        return "has never answered"
    if voter.answered_s_ago > LIVE_ANSWER_S:
        return f"no answer for {voter.answered_s_ago:.1f} s"
    if voter.match_index is None or voter.match_index <= 0:
        return "has acknowledged no entry yet"
    behind = commit_index - voter.match_index
    if behind > LIVE_SLACK_ENTRIES:
        return f"{behind} entries behind (still catching up)"
    return None


def majority(size: int) -> int:
    return size // 2 + 1


def change_refusal(view: VotersView, op: str, target_addr: str) -> str | None:
    """Why adding (`op` "add") or removing ("remove") the voter `target_addr` would leave
    fewer live voters than a majority of the new configuration (None: it would not).

    The leader counts itself. A new member is not counted: it has no entry yet, and until
    it has caught up it cannot help commit anything. This is etcd's strict
    reconfiguration check."""
    if not view.leader:
        return "this node no longer leads"
    others = [v for v in view.voters if v.addr != target_addr]
    size = len(others) + 1 + (1 if op == "add" else 0)
    down = {v.addr: why for v in others
            if (why := not_live_because(v, view.commit_index)) is not None}
    live = 1 + len(others) - len(down)
    needed = majority(size)
    if live >= needed:
        return None
    detail = "; ".join(f"{addr} {why}" for addr, why in sorted(down.items()))
    after = "adding it" if op == "add" else "removing it"
    return (f"after {after} the cluster would have {size} voters, {live} of them live, and "
            f"needs {needed} to elect a leader and commit: {detail or 'no other voter'}. "
            "Bring the missing voters back (or remove the dead ones) first")


def unfinished_change(voters: set[str], peers: Iterable[Peer]) -> tuple[str, str] | None:
    """A membership change that did not finish, as (Raft address, how to finish or undo
    it), or None. pysyncobj changes a node's voters when the entry is appended and
    raftcron writes the member record after the commit, so a change cut short (a leader
    lost, a timeout) shows as a voter without a member, or a member that is no voter."""
    members = {p.raft_addr: p for p in peers}
    unknown = sorted(voters - set(members))
    if unknown:
        addr = unknown[0]
        return addr, (f"Raft voter {addr} has no member record: an add that did not finish. "
                      f"Repeat that add-node, or remove it with remove-node --id {addr}")
    gone = sorted(set(members) - voters)
    if gone:
        p = members[gone[0]]
        return p.raft_addr, (f"member {p.id!r} ({p.raft_addr}) is not a Raft voter: a removal "
                             f"that did not finish. Repeat remove-node --id {p.id}")
    return None
