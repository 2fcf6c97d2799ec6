"""Webhook delivery rules shared by the leader and the state machine (pure: no I/O, no clock).

Each outbox row is delivered to each of its receivers independently: a receiver that keeps
failing backs off and, after a bounded time or number of attempts, is given up on for that
row (the delivery becomes `dead`) without delaying any other receiver.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit, urlunsplit

BACKOFF_BASE_MS = 1_000
BACKOFF_MAX_MS = 300_000
DEFAULT_GIVE_UP_S = 24 * 3600.0

# Who signs a delivery: the cluster webhook key, or the key of the job's tenant.
CLUSTER_SIGNER = "cluster"
TENANT_SIGNER_PREFIX = "tenant:"

DEAD_ALERT_PREFIX = "webhook_dead:"
DEAD_ALERT_KIND = "webhook"


def backoff_ms(attempts: int) -> int:
    """Delay before the next try after `attempts` failed tries: 1, 2, 4, … ≤ 300 s."""
    if attempts <= 0:
        return 0
    return min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** min(attempts - 1, 20))


def gives_up(attempts: int, first_ms: int, now_ms: int, give_up_ms: int,
             max_attempts: int | None) -> bool:
    """Whether a delivery that has now failed `attempts` times is given up (dead)."""
    if max_attempts is not None and attempts >= max_attempts:
        return True
    return now_ms - first_ms >= give_up_ms


def receiver_hash(receiver: str) -> str:
    return hashlib.sha256(receiver.encode()).hexdigest()[:16]


def dead_alert_id(receiver: str) -> str:
    """One alert per receiver: raised when a delivery to it is given up, resolved when a
    later delivery to it succeeds."""
    return DEAD_ALERT_PREFIX + receiver_hash(receiver)


def redact_url(url: str) -> str:
    """The URL without credentials, query or fragment (they may hold tokens): safe to put
    in an alert that other receivers get."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = host + (f":{parts.port}" if parts.port else "")
    except ValueError:
        return "<unparsable url>"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def tenant_signer(tenant: str) -> str:
    return TENANT_SIGNER_PREFIX + tenant


def derive_tenant_key(cluster_key: str, tenant: str) -> str:
    """The key of a tenant that never rotated one: derived from the replicated cluster key,
    so every tenant has its own key from the start. Knowing it tells nothing about the
    cluster key or another tenant's key (HMAC is a PRF)."""
    return hmac.new(cluster_key.encode(), b"raftcron tenant webhook key v1\x00" + tenant.encode(),
                    hashlib.sha256).hexdigest()


def url_origin(url: str) -> str:
    """scheme://host:port of a receiver URL: the unit of the outbox's per-host cap. A URL
    whose port does not parse (`:abc`, `:99999`; the API takes them as URLs) is its own
    origin, as written: its delivery fails in the HTTP client and is backed off like any
    other failure, never raising in the delivery loop."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return "/".join(url.split("/", 3)[:3])
    return f"{parts.scheme}://{parts.hostname}:{port}"
