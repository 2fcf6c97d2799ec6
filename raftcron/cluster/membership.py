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
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from raftcron.config import Peer
from raftcron.state.db import META_LAST_APPLIED, get_meta, set_meta

MEMBER_PREFIX = b"M"
TABLE = "cluster_members"
SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    " id TEXT PRIMARY KEY, raft_addr TEXT NOT NULL, http_url TEXT NOT NULL,"
    " removed INTEGER NOT NULL DEFAULT 0, updated_index INTEGER NOT NULL) WITHOUT ROWID"
)
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ADDR_RE = re.compile(r"^[A-Za-z0-9.\-\[\]:]{1,253}:[0-9]{1,5}$")


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


URL_RE = re.compile(r"^https?://[^\s/]+(/\S*)?$")


def validate(member_id: str, raft_addr: str, http_url: str, *, as_logged: bool = False
             ) -> Member:
    """A member's fields, checked in full for a new request.

    `as_logged` is the check apply has always made on log entries (`re.match`, which let a
    trailing newline through): replaying an entry must give the result it gave when it was
    first applied, on every node and every version."""
    def ok(rx: re.Pattern[str], text: str) -> bool:
        return bool(rx.match(text) if as_logged else rx.fullmatch(text))

    if not isinstance(member_id, str) or not ok(ID_RE, member_id):
        raise MembershipError("must be 1-64 letters, digits, '.', '_' or '-'", "id")
    if not isinstance(raft_addr, str) or not ok(ADDR_RE, raft_addr) \
            or not 0 < int(raft_addr.rsplit(":", 1)[1]) < 65536:
        raise MembershipError("must be HOST:PORT", "raft_addr")
    if not isinstance(http_url, str) or not ok(URL_RE, http_url) or len(http_url) > 500:
        raise MembershipError("must be an http(s) URL", "http_url")
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
