"""Bearer-token authentication and scope checks for the HTTP API.

`AuthMiddleware` runs before routing: it lets `GET /healthz`, `GET /readyz` and the status
page files through, answers 401 for a missing or unknown token, and 403 when the token's
scopes cannot possibly allow the request (a worker creating jobs, a `read` token writing,
anything but a worker or admin on the worker protocol). Checks that need the request body
or the stored job (the tenant of a job, the queues of a lease) are made by the route
handlers through the helpers below.

Nodes call each other's `GET /v1/cluster` (readiness, the cluster view). They present a
token derived from the cluster secret, which every node holds. It has its own `node` scope,
which reaches `GET /v1/cluster` and nothing else: it travels between nodes, over plain HTTP
unless TLS is set up, so it must not be able to read jobs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from raftcron.api.errors import HTTPError
from raftcron.auth import Principal, TokenStore

OPEN_PATHS = frozenset({"/", "/healthz", "/readyz", "/favicon.ico"})
WORKER_PATHS = frozenset({"/v1/leases", "/v1/heartbeats", "/v1/completions", "/v1/releases"})
READ_METHODS = frozenset({"GET", "HEAD"})
ANONYMOUS_ADMIN = Principal("auth-off", ("admin",))
NODE_SCOPE = "node"  # not a scope a tokens file can hold (raftcron.auth.SCOPE_RE)
NODE_PRINCIPAL = Principal("cluster-node", (NODE_SCOPE,))
NODE_PATHS = frozenset({"/v1/cluster"})
STATE_KEY = "principal"


def node_token(secret: str) -> str:
    """The token nodes present to each other (derived from the cluster secret)."""
    return "rcn_" + hmac.new(secret.encode(), b"raftcron node read v1",
                             hashlib.sha256).hexdigest()


def is_worker_path(path: str) -> bool:
    if path in WORKER_PATHS:
        return True
    return path.startswith("/v1/attempts/") and path.endswith(("/heartbeat", "/complete"))


def is_open(method: str, path: str) -> bool:
    if method not in READ_METHODS:
        return False
    # `/jobs/...` only redirects to the page, which asks for a token itself.
    return (path in OPEN_PATHS or path == "/web" or path.startswith("/web/")
            or path.startswith("/jobs/"))


class Authenticator:
    """Maps an Authorization header to a principal (None: not authenticated)."""

    def __init__(self, tokens_file: str | None, auth_off: bool, node_secret: str | None,
                 usage_file: str | None = None) -> None:
        self.auth_off = auth_off
        self.store = TokenStore(tokens_file, usage_file) if tokens_file else None
        self._node_digest = (hashlib.sha256(node_token(node_secret).encode()).digest()
                             if node_secret else None)

    @property
    def enabled(self) -> bool:
        return not self.auth_off

    def authenticate(self, authorization: str | None) -> Principal | None:
        if self.auth_off:
            return ANONYMOUS_ADMIN
        if not authorization:
            return None
        if self._node_digest is not None and authorization.startswith("Bearer rcn_"):
            given = hashlib.sha256(authorization[7:].strip().encode()).digest()
            return NODE_PRINCIPAL if hmac.compare_digest(given, self._node_digest) else None
        if self.store is None:
            return None
        return self.store.authenticate(authorization)


def coarse_denial(principal: Principal, method: str, path: str) -> str | None:
    """Why this principal can never make this request (None: the handler decides)."""
    if principal.scopes == (NODE_SCOPE,):
        if method in READ_METHODS and path in NODE_PATHS:
            return None
        return "is the node token, which only reads GET /v1/cluster"
    if is_worker_path(path):
        if method not in READ_METHODS:
            return None if principal.can_work() else "needs the worker or admin scope"
    if method in READ_METHODS:
        return None if principal.can_read() else "needs the read, tenant or admin scope"
    if path == "/v1/tenants" or path.startswith("/v1/tenants/"):
        return None if principal.admin else "needs the admin scope"
    if principal.admin or principal.tenants:
        return None
    return "needs the admin or a tenant scope"


def _error_body(status: int, code: str, message: str, field: str | None) -> bytes:
    err: dict[str, Any] = {"code": code, "message": message}
    if field:
        err["field"] = field
    return json.dumps({"error": err}).encode()


class AuthMiddleware:
    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self.app = app
        self.auth = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        header = None
        for key, value in scope.get("headers", []):
            if key == b"authorization":
                header = value.decode("latin-1")
                break
        principal = self.auth.authenticate(header)
        if principal is None and not is_open(method, path):
            message = ("an Authorization: Bearer <token> header is required" if not header
                       else "the bearer token is not valid (unknown, revoked or expired)")
            await _send(send, 401, "unauthorized", message, "Authorization",
                        {"www-authenticate": 'Bearer realm="raftcron"'
                         + ("" if not header else ', error="invalid_token"')})
            return
        if principal is not None:
            scope.setdefault("state", {})[STATE_KEY] = principal  # the audit log names it
            denial = None if is_open(method, path) else coarse_denial(principal, method, path)
            if denial is not None:
                await _send(send, 403, "forbidden", f"token {principal.name!r} {denial}",
                            "Authorization", {})
                return
        await self.app(scope, receive, send)


async def _send(send: Send, status: int, code: str, message: str, field: str | None,
                headers: dict[str, str]) -> None:
    body = _error_body(status, code, message, field)
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


# --- helpers for route handlers ----------------------------------------------------------------

def principal_of(request: Request) -> Principal:
    """The authenticated principal (the middleware guarantees one on every guarded route)."""
    principal = request.scope.get("state", {}).get(STATE_KEY)
    if not isinstance(principal, Principal):
        raise HTTPError(401, "unauthorized", "an Authorization: Bearer <token> header is "
                        "required", "Authorization", {"WWW-Authenticate": "Bearer"})
    return principal


def visible_tenants(request: Request) -> frozenset[str] | None:
    """The tenants whose jobs this principal may see; None: all of them."""
    p = principal_of(request)
    if p.admin or "read" in p.scopes:
        return None
    return p.tenants


def reveals_secrets(request: Request) -> bool:
    """Whether job targets are shown with their secrets: to admin only. Every other
    principal, the job's own tenant and `read` tokens included, sees `***`."""
    return principal_of(request).admin


def can_see(request: Request, tenant: str) -> bool:
    tenants = visible_tenants(request)
    return tenants is None or tenant in tenants


def require_tenant_write(request: Request, tenant: str, field: str = "tenant") -> None:
    p = principal_of(request)
    if not p.can_write_tenant(tenant):
        raise HTTPError(403, "forbidden",
                        f"token {p.name!r} may not manage jobs of tenant {tenant!r}", field)


def tenant_clause(request: Request, column: str = "tenant") -> tuple[str, list[Any]]:
    """A SQL condition restricting rows to the visible tenants ("" when unrestricted)."""
    tenants = visible_tenants(request)
    if tenants is None:
        return "", []
    if not tenants:
        return "0", []
    ordered = sorted(tenants)
    return f"{column} IN ({','.join('?' * len(ordered))})", list(ordered)



def require_admin(request: Request) -> None:
    principal = principal_of(request)
    if not principal.admin:
        raise HTTPError(403, "forbidden", f"token {principal.name!r} needs the admin scope",
                        "Authorization")
