"""Webhook signing keys (admin only): the cluster key, and per-tenant keys with rotation.

A tenant's `notify` webhooks are signed with its key; only an admin reads or rotates it
and hands it to the tenant. The rotate answer shows the new key.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from raftcron.api.auth import require_admin
from raftcron.api.context import request_id
from raftcron.api.errors import HTTPError
from raftcron.api.jobs import ctx_of
from raftcron.core import commands as c
from raftcron.core import delivery
from raftcron.core.errors import ValidationError
from raftcron.core.model import NAME_RE
from raftcron.core.timefmt import ms_to_iso
from raftcron.leader.webhook_keys import new_key

KEY_SQL = "SELECT owner, key, updated_ms FROM webhook_keys WHERE owner IN (?, ?)"


def _tenant(request: Request) -> str:
    name = request.path_params["name"]
    if not NAME_RE.fullmatch(name):
        raise ValidationError("name", "must be 1-64 characters of A-Z a-z 0-9 . _ -")
    return name


def _no_cluster_key() -> HTTPError:
    return HTTPError(503, "not_ready", "the cluster webhook key is not committed yet",
                     headers={"Retry-After": "1"})


async def _tenant_key(request: Request, tenant: str) -> JSONResponse:
    ctx = ctx_of(request)
    owner = delivery.tenant_signer(tenant)
    rows = {r[0]: r for r in await ctx.fetchall(KEY_SQL, (owner, delivery.CLUSTER_SIGNER))}
    if owner in rows:
        _, key, updated = rows[owner]
        return JSONResponse({"tenant": tenant, "key": key, "source": "rotated",
                             "rotated_at": ms_to_iso(updated)},
                            headers={"Cache-Control": "no-store"})
    if delivery.CLUSTER_SIGNER not in rows:
        raise _no_cluster_key()
    key = delivery.derive_tenant_key(rows[delivery.CLUSTER_SIGNER][1], tenant)
    return JSONResponse({"tenant": tenant, "key": key, "source": "derived", "rotated_at": None},
                        headers={"Cache-Control": "no-store"})


async def get_tenant_key(request: Request) -> JSONResponse:
    require_admin(request)
    tenant = _tenant(request)
    await ctx_of(request).maybe_barrier(request)
    return await _tenant_key(request, tenant)


async def rotate_tenant_key(request: Request) -> JSONResponse:
    """A new random key (generated here, never in apply). Retrying with the same
    Idempotency-Key rotates once and answers the key then stored."""
    require_admin(request)
    tenant = _tenant(request)
    ctx = ctx_of(request)
    await ctx.propose(c.SetWebhookKey(request_id(request), ctx.stamp_ms(),
                                      delivery.tenant_signer(tenant), new_key(), replace=True))
    return await _tenant_key(request, tenant)


async def get_cluster_key(request: Request) -> JSONResponse:
    """The key cluster-wide receivers verify with: `webhook_secret_file`, or generated."""
    require_admin(request)
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    file_key = ctx.node.duty_settings.webhook_secret
    if file_key is not None:
        return JSONResponse({"key": file_key.decode(), "source": "webhook_secret_file"},
                            headers={"Cache-Control": "no-store"})
    row = await ctx.fetchone("SELECT key FROM webhook_keys WHERE owner = ?",
                             (delivery.CLUSTER_SIGNER,))
    if row is None:
        raise _no_cluster_key()
    return JSONResponse({"key": row[0], "source": "generated"},
                        headers={"Cache-Control": "no-store"})
