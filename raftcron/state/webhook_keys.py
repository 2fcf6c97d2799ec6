"""Webhook signing keys in the replicated state (`webhook_keys`)."""

from __future__ import annotations

from typing import Any

from raftcron.core import delivery, errors
from raftcron.core.commands import SetWebhookKey
from raftcron.core.model import NAME_RE
from raftcron.state.context import ApplyContext, ok, rejected

MIN_KEY_CHARS = 32


def valid_owner(owner: str) -> bool:
    if owner == delivery.CLUSTER_SIGNER:
        return True
    return (owner.startswith(delivery.TENANT_SIGNER_PREFIX)
            and bool(NAME_RE.fullmatch(owner[len(delivery.TENANT_SIGNER_PREFIX):])))


def set_webhook_key(ctx: ApplyContext, cmd: SetWebhookKey) -> dict[str, Any]:
    """The result never holds the key: results are stored for idempotent replays."""
    if not valid_owner(cmd.owner):
        return rejected(errors.INVALID_STATE, f"{cmd.owner!r} cannot own a webhook key", "owner")
    if len(cmd.key) < MIN_KEY_CHARS:
        return rejected(errors.INVALID_STATE, "a webhook key needs at least "
                        f"{MIN_KEY_CHARS} characters", "key")
    conflict = ("DO UPDATE SET key = excluded.key, updated_ms = excluded.updated_ms"
                if cmd.replace else "DO NOTHING")
    stored = ctx.conn.execute(
        f"INSERT INTO webhook_keys (owner, key, updated_ms) VALUES (?, ?, ?) "
        f"ON CONFLICT (owner) {conflict}", (cmd.owner, cmd.key, cmd.now_ms)).rowcount
    return ok(owner=cmd.owner, stored=bool(stored))
