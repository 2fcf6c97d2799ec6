"""Webhook signing keys: which key signs a delivery, and the generated cluster key.

Cluster-wide receivers are signed with `webhook_secret_file` when the node has one, else
with the cluster key in the replicated state. That key is generated OUTSIDE apply, by any
node that starts and finds none, and proposed with `SetWebhookKey(replace=False)`: when
several nodes start at once, the first key committed wins on every node and the others
are no-ops. The key never defaults to the Raft secret.

A job's `notify` URLs are signed with the key of the job's tenant: the one set by a
rotation (`PUT /v1/tenants/{name}/webhook-key`), else one derived from the replicated
cluster key (core.delivery.derive_tenant_key).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import sqlite3
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from raftcron.core import delivery
from raftcron.core.commands import SetWebhookKey

log = logging.getLogger("raftcron.webhook_keys")

KEY_BYTES = 32


def new_key() -> str:
    return secrets.token_urlsafe(KEY_BYTES)


@dataclass(frozen=True)
class KeyRing:
    """The keys one delivery round signs with."""

    cluster_file_key: bytes | None
    stored: dict[str, str] = field(default_factory=dict)

    def secret_for(self, signer: str) -> bytes | None:
        """The key bytes for a signer; None when it cannot be known yet (no cluster key
        committed): the caller must not send."""
        if signer == delivery.CLUSTER_SIGNER:
            if self.cluster_file_key is not None:
                return self.cluster_file_key
            stored = self.stored.get(delivery.CLUSTER_SIGNER)
            return stored.encode() if stored else None
        tenant_key = self.tenant_key(signer)
        return tenant_key.encode() if tenant_key else None

    def tenant_key(self, signer: str) -> str | None:
        if signer in self.stored:
            return self.stored[signer]
        root = self.stored.get(delivery.CLUSTER_SIGNER)
        if root is None or not signer.startswith(delivery.TENANT_SIGNER_PREFIX):
            return None
        return delivery.derive_tenant_key(root, signer[len(delivery.TENANT_SIGNER_PREFIX):])


def load_keys(conn: sqlite3.Connection, cluster_file_key: bytes | None) -> KeyRing:
    return KeyRing(cluster_file_key, dict(conn.execute("SELECT owner, key FROM webhook_keys")))


def stored_key(conn: sqlite3.Connection, owner: str) -> tuple[str, int] | None:
    row = conn.execute("SELECT key, updated_ms FROM webhook_keys WHERE owner = ?",
                       (owner,)).fetchone()
    return (row[0], row[1]) if row else None


def has_cluster_key(open_reader: Callable[[], sqlite3.Connection]) -> bool:
    conn = open_reader()
    try:
        return stored_key(conn, delivery.CLUSTER_SIGNER) is not None
    finally:
        conn.close()


async def ensure_cluster_key(open_reader: Callable[[], sqlite3.Connection],
                             propose: Callable[[SetWebhookKey], Awaitable[dict[str, Any]]],
                             clock: Callable[[], int], retry_s: float = 1.0) -> None:
    """Until the replicated state holds a cluster webhook key, propose a fresh random one
    (the first committed wins). Runs in the background from the node's start; the read
    opens and closes its connection on its own thread (safe to cancel)."""
    while not await asyncio.to_thread(has_cluster_key, open_reader):
        cmd = SetWebhookKey(f"webhook-key-init-{uuid.uuid4().hex}", clock(),
                            delivery.CLUSTER_SIGNER, new_key(), replace=False)
        try:
            result = await propose(cmd)
        except Exception as e:  # noqa: BLE001 - no leader yet, timeouts: try again
            log.info("cluster webhook key not proposed yet: %s", e)
            await asyncio.sleep(retry_s)
            continue
        if result.get("ok"):
            log.info("cluster webhook key %s", "generated" if result.get("stored")
                     else "already set by another node")
            return
        log.warning("cluster webhook key refused: %s", result.get("message"))
        await asyncio.sleep(retry_s)
