"""Bearer tokens with scopes, kept hashed in a JSON file on each node.

Scopes:
- `admin`: everything;
- `tenant:<name>`: that tenant's jobs and runs (reads and writes);
- `worker` or `worker:<q1>,<q2>`: lease, heartbeat, complete and release only (optionally
  only for those queues);
- `read`: GET requests and the status page.

Tokens are random (`rc_` + 43 url-safe characters), so a plain SHA-256 of the token is
enough to store them: the file never holds a usable credential.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import time
from dataclasses import dataclass, field

SCOPE_RE = re.compile(
    r"^(admin|read|worker(:[A-Za-z0-9._-]{1,64}(,[A-Za-z0-9._-]{1,64})*)?"
    r"|tenant:[A-Za-z0-9._-]{1,64})$"
)


class AuthError(ValueError):
    pass


def hash_token(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def validate_scopes(scopes: list[str]) -> list[str]:
    if not scopes:
        raise AuthError("at least one --scope is required")
    for scope in scopes:
        if not SCOPE_RE.fullmatch(scope):
            raise AuthError(f"invalid scope {scope!r}: use admin, read, worker[:q1,q2] or "
                            "tenant:<name>")
    return scopes


def _read(path: str) -> list[dict]:
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        raise AuthError(f"cannot read tokens file {path!r}: {e}") from None
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list):
        raise AuthError(f"tokens file {path!r} has no 'tokens' list")
    return tokens


def create_token(path: str, scopes: list[str], name: str = "") -> str:
    """Add a token to the file (atomically) and return it; only its hash is stored."""
    validate_scopes(scopes)
    tokens = _read(path)
    token = "rc_" + secrets.token_urlsafe(32)
    tokens.append({"name": name or f"token-{len(tokens) + 1}", "hash": hash_token(token),
                   "scopes": scopes, "created_at": int(time.time())})
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):  # a mistyped path: a file no node would read
        raise AuthError(f"directory {directory!r} of the tokens file does not exist")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tokens-")
    with os.fdopen(fd, "w") as f:
        json.dump({"tokens": tokens}, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return token


@dataclass(frozen=True)
class Principal:
    name: str
    scopes: tuple[str, ...]
    tenants: frozenset[str] = field(default_factory=frozenset)
    worker_queues: frozenset[str] | None = None  # None: any queue (or not a worker)
    # A short prefix of the token's stored hash: tells apart two tokens of the same name
    # without being a usable credential ("" for principals without a token entry).
    key_id: str = ""

    @property
    def identity(self) -> str:
        """Who made a request, as idempotency records and logs name it (never the token)."""
        return f"{self.name}#{self.key_id}" if self.key_id else self.name

    @property
    def admin(self) -> bool:
        return "admin" in self.scopes

    def can_read(self) -> bool:
        return self.admin or "read" in self.scopes or bool(self.tenants)

    def can_write_tenant(self, tenant: str) -> bool:
        return self.admin or tenant in self.tenants

    def can_work(self) -> bool:
        return self.admin or any(s == "worker" or s.startswith("worker:") for s in self.scopes)

    def allowed_queues(self, queues: list[str]) -> bool:
        return self.admin or self.worker_queues is None or set(queues) <= self.worker_queues


def principal_from(entry: dict) -> Principal:
    scopes = tuple(entry.get("scopes", []))
    tenants = frozenset(s.split(":", 1)[1] for s in scopes if s.startswith("tenant:"))
    queues: set[str] | None = None
    for s in scopes:
        if s == "worker":
            queues = None
            break
        if s.startswith("worker:"):
            queues = (queues or set()) | set(s.split(":", 1)[1].split(","))
    digest = entry.get("hash")
    key_id = digest.removeprefix("sha256:")[:16] if isinstance(digest, str) else ""
    return Principal(entry.get("name", ""), scopes, tenants,
                     frozenset(queues) if queues is not None else None, key_id)


class TokenStore:
    """Looks tokens up by hash; re-reads the file when it changes (new tokens need no
    restart)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._mtime: float | None = None
        self._by_hash: dict[str, Principal] = {}
        self._load()

    def _load(self) -> None:
        try:
            mtime = os.stat(self.path).st_mtime
        except FileNotFoundError:
            mtime = None
        if mtime == self._mtime and self._by_hash:
            return
        self._by_hash = {e["hash"]: principal_from(e) for e in _read(self.path)
                         if isinstance(e, dict) and isinstance(e.get("hash"), str)}
        self._mtime = mtime

    def authenticate(self, authorization: str | None) -> Principal | None:
        if not authorization or not authorization.startswith("Bearer "):
            return None
        token = authorization[7:].strip()
        if not token or len(token) > 200:
            return None
        try:
            self._load()
        except AuthError:
            return None
        digest = hash_token(token)
        for known, principal in self._by_hash.items():
            if hmac.compare_digest(known, digest):
                return principal
        return None
