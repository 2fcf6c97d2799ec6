"""Bearer tokens with scopes, kept hashed in a JSON file on each node. It stands alone at
the top of the package, in no layer, because two sides share the tokens file: the node's
API checks tokens (`api.auth`), and the operator's CLI and the local cluster create and
revoke them (`cli`, `ops.local`), in other processes. It imports nothing else of the
package.

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


TOKEN_USAGE_FILE = "token-usage.json"  # in a node's data_dir: last-used times it saw


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


_EXPIRES_IN = re.compile(r"^([1-9][0-9]{0,6})([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
MAX_EXPIRES_IN_S = 10 * 366 * 86_400


def parse_expires_in(text: str) -> int:
    """`90s`, `30m`, `12h`, `30d`, `2w` as seconds (at most ten years)."""
    match = _EXPIRES_IN.fullmatch(text.strip().lower())
    if not match:
        raise AuthError(f"--expires-in {text!r} is not a duration such as 12h, 30d or 2w")
    seconds = int(match.group(1)) * _UNIT_S[match.group(2)]
    if seconds > MAX_EXPIRES_IN_S:
        raise AuthError("--expires-in must be at most ten years")
    return seconds


def _write(path: str, tokens: list[dict]) -> None:
    """Replace the tokens file atomically (mode 0600: `mkstemp` creates the file with
    that mode, whatever the umask, before a byte of it is written)."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):  # a mistyped path: a file no node would read
        raise AuthError(f"directory {directory!r} of the tokens file does not exist")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tokens-")
    with os.fdopen(fd, "w") as f:
        json.dump({"tokens": tokens}, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _free_name(tokens: list[dict]) -> str:
    taken = {e.get("name") for e in tokens if isinstance(e, dict)}
    n = len(tokens) + 1
    while f"token-{n}" in taken:
        n += 1
    return f"token-{n}"


def create_token(path: str, scopes: list[str], name: str = "",
                 expires_in_s: int | None = None, now: float | None = None) -> str:
    """Add a token to the file (atomically) and return it; only its hash is stored.
    With `expires_in_s` the token is refused (401) from then on."""
    validate_scopes(scopes)
    tokens = _read(path)
    token = "rc_" + secrets.token_urlsafe(32)
    created = int(time.time() if now is None else now)
    entry: dict = {"name": name or _free_name(tokens), "hash": hash_token(token),
                   "scopes": scopes, "created_at": created}
    if expires_in_s is not None:
        entry["expires_at"] = created + expires_in_s
    tokens.append(entry)
    _write(path, tokens)
    return token


def list_tokens(path: str, last_used: dict[str, int] | None = None) -> list[dict]:
    """The tokens' names, scopes, creation, last-use (from `last_used`, hash -> unix
    seconds) and expiry times: never the tokens or their hashes."""
    used = last_used or {}
    return [{"name": e.get("name", ""), "scopes": list(e.get("scopes", [])),
             "created_at": e.get("created_at"), "last_used_at": used.get(e.get("hash", "")),
             "expires_at": e.get("expires_at")}
            for e in _read(path) if isinstance(e, dict)]


def revoke_token(path: str, name: str) -> int:
    """Remove every token called `name`; how many there were. Nodes stop accepting them
    as soon as they see the file change (no restart)."""
    tokens = _read(path)
    kept = [e for e in tokens if not (isinstance(e, dict) and e.get("name") == name)]
    removed = len(tokens) - len(kept)
    if removed == 0:
        raise AuthError(f"no token named {name!r} in {path}")
    _write(path, kept)
    return removed


@dataclass(frozen=True)
class Principal:
    name: str
    scopes: tuple[str, ...]
    tenants: frozenset[str] = field(default_factory=frozenset)
    worker_queues: frozenset[str] | None = None  # None: any queue (or not a worker)
    # A short prefix of the token's stored hash: tells apart two tokens of the same name
    # without being a usable credential ("" for principals without a token entry).
    key_id: str = ""
    expires_at: float | None = None  # unix seconds; None: never

    @property
    def identity(self) -> str:
        """Who made a request, as idempotency records and logs name it (never the token)."""
        return f"{self.name}#{self.key_id}" if self.key_id else self.name

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

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
    expires = entry.get("expires_at")
    return Principal(entry.get("name", ""), scopes, tenants,
                     frozenset(queues) if queues is not None else None, key_id,
                     float(expires) if isinstance(expires, int | float) else None)


class TokenStore:
    """Looks tokens up by hash; re-reads the file when it changes (new and revoked tokens
    need no restart). An expired token is unknown (401).

    When a token is used, the time is kept in memory and, with `usage_file`, written to
    that small JSON file (hash -> unix seconds) on its first use and then at most every
    USAGE_FLUSH_S: the last use *this node* saw (`raftcron token list --config` reads
    it)."""

    USAGE_FLUSH_S = 10.0

    def __init__(self, path: str, usage_file: str | None = None) -> None:
        self.path = path
        self._mtime: float | None = None
        self._by_hash: dict[str, Principal] = {}
        self.usage_file = usage_file
        self.last_used: dict[str, int] = read_usage(usage_file) if usage_file else {}
        self._flushed_at = 0.0
        self._dirty = False
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

    def authenticate(self, authorization: str | None, now: float | None = None
                     ) -> Principal | None:
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
        now = time.time() if now is None else now
        for known, principal in self._by_hash.items():
            if hmac.compare_digest(known, digest):
                if principal.expired(now):
                    return None
                self._used(known, now)
                return principal
        return None

    def _used(self, digest: str, now: float) -> None:
        first = digest not in self.last_used  # a token's first use is written at once
        self.last_used[digest] = int(now)
        self._dirty = True
        if self.usage_file and (first or now - self._flushed_at >= self.USAGE_FLUSH_S):
            self.flush_usage(now)

    def flush_usage(self, now: float | None = None) -> None:
        """Write the last-used times (best effort: a bookkeeping file, not a guard)."""
        if not self.usage_file or not self._dirty:
            return
        self._flushed_at = time.time() if now is None else now
        try:
            directory = os.path.dirname(os.path.abspath(self.usage_file))
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".token-usage-")
            with os.fdopen(fd, "w") as f:
                json.dump(self.last_used, f)
            os.replace(tmp, self.usage_file)
            self._dirty = False
        except OSError:
            pass


def read_usage(path: str) -> dict[str, int]:
    """A node's last-used times (hash -> unix seconds); empty when it has none yet."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: int(v) for k, v in data.items() if isinstance(v, int | float)}
