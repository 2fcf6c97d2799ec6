"""Tenant policy: which queues, target kinds and HTTP hosts a tenant's jobs may use, and
how much of the replicated state it may hold (quotas).

Pure (no I/O, no clock): the state machine applies it at create, edit and lease time, the
API uses it to refuse a batch before anything is proposed, and the worker uses
`address_is_private` / `host_allowed` again on the addresses DNS gives it at run time.

A tenant *has a policy* once any of `queues`, `targets`, `http_hosts` is set (not null).
For such a tenant, private, loopback, link-local and other non-global addresses (and the
host names that mean them: `localhost`, `*.localhost`, `metadata.google.internal`) are
refused unless a host pattern names them; with `http_hosts` null every other host is
allowed. A tenant without a policy (every tenant that predates policies) is unrestricted,
as before.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from raftcron.core.errors import ValidationError
from raftcron.core.model import NAME_RE

TARGET_KINDS = ("shell", "http")
MAX_PATTERNS = 100
PRIVATE_NAMES = frozenset({"localhost", "metadata.google.internal", "metadata",
                           "instance-data", "instance-data.ec2.internal"})
_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
HOST_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
# A URL whose authority holds one of these is parsed differently by different clients
# (WHATWG treats "\" as "/"): refuse it rather than guess which host it reaches.
_AMBIGUOUS = re.compile(r"[\\\s%]")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# --- quotas ------------------------------------------------------------------------------
#
# Every tenant's jobs, schedules and pending runs are replicated to every node, so each is
# bounded for every tenant, with or without a `tenants` row: a quota left null is its
# default here. The other two quotas bound work, not state, and stay unlimited while null.
# The defaults apply once the cluster committed core.protocol.TENANT_QUOTAS_LEVEL (before
# it, a null quota is unlimited, as every older build decides).
QUOTA_FIELDS = ("max_jobs", "max_concurrent_runs", "max_fires_per_minute", "max_schedules",
                "max_pending_runs")
# 100,000 jobs of one schedule each is the scale bench/scale.py measures; a pending-runs
# quota of 100,000 is ten backfills of the largest size (core.backfill), about 90 MB a node.
QUOTA_DEFAULTS: dict[str, int] = {"max_jobs": 100_000, "max_schedules": 100_000,
                                  "max_pending_runs": 100_000}
QUOTA_MAX = 1_000_000


@dataclass(frozen=True, slots=True)
class TenantQuotas:
    """A tenant's quotas as stored (None: not set)."""

    max_jobs: int | None = None
    max_concurrent_runs: int | None = None
    max_fires_per_minute: int | None = None
    max_schedules: int | None = None
    max_pending_runs: int | None = None

    def in_effect(self, defaults: bool) -> TenantQuotas:
        """The quotas that apply: with `defaults`, an unset state quota is its default."""
        if not defaults:
            return self
        return TenantQuotas(**{name: QUOTA_DEFAULTS.get(name) if getattr(self, name) is None
                               else getattr(self, name) for name in QUOTA_FIELDS})

    def to_api(self) -> dict[str, int | None]:
        return {name: getattr(self, name) for name in QUOTA_FIELDS}


def schedule_count(spec: dict[str, Any]) -> int:
    """How many schedules a stored job spec holds (`schedules`, else its one `schedule`).
    The state counts the same in SQL: state.tenants.SCHEDULES_SQL."""
    listed = spec.get("schedules")
    return len(listed) if isinstance(listed, list) and listed else 1


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    queues: tuple[str, ...] | None = None
    targets: tuple[str, ...] | None = None
    http_hosts: tuple[str, ...] | None = None

    @property
    def is_set(self) -> bool:
        return not (self.queues is None and self.targets is None and self.http_hosts is None)

    def to_api(self) -> dict[str, list[str] | None]:
        return {k: None if v is None else list(v) for k, v in
                (("queues", self.queues), ("targets", self.targets),
                 ("http_hosts", self.http_hosts))}

    def http_rule(self) -> dict[str, Any] | None:
        """What a worker needs to check the addresses a host resolves to (None: no rule)."""
        if not self.is_set:
            return None
        return {"http_hosts": None if self.http_hosts is None else list(self.http_hosts)}


NO_POLICY = TenantPolicy()


@dataclass(frozen=True, slots=True)
class Violation:
    field: str
    message: str


# --- parsing -----------------------------------------------------------------------------

def _string_list(value: Any, field: str, item_ok: Any, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_PATTERNS:
        raise ValidationError(field, f"must be a list of at most {MAX_PATTERNS} {what} or null")
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item_ok(item):
            raise ValidationError(f"{field}[{i}]", f"is not a valid {what[:-1]}")
        if item not in out:
            out.append(item)
    return tuple(out)


def normalize_pattern(pattern: str) -> str | None:
    """A host pattern in canonical form: a host name (lower case, no trailing dot), `*.`
    and a domain, or an IP address (canonical text). None: not a valid pattern."""
    p = pattern.strip().lower().rstrip(".")
    if p.startswith("[") and p.endswith("]"):
        p = p[1:-1]
    ip = parse_ip(p)
    if ip is not None:
        return str(ip)
    if p.startswith("*."):
        return p if HOST_RE.fullmatch(p[2:]) and "." in p[2:] else None
    return p if HOST_RE.fullmatch(p) else None


def parse_policy(body: dict[str, Any]) -> TenantPolicy:
    """The policy fields of a `PUT /v1/tenants/{name}` body (missing: null = any)."""
    queues = _string_list(body.get("queues"), "queues", NAME_RE.fullmatch, "queue names")
    targets = _string_list(body.get("targets"), "targets", TARGET_KINDS.__contains__,
                           "target kinds (shell, http)s")
    hosts_raw = _string_list(body.get("http_hosts"), "http_hosts",
                             lambda s: normalize_pattern(s) is not None, "host patterns")
    hosts = None if hosts_raw is None else tuple(
        dict.fromkeys(normalize_pattern(h) or h for h in hosts_raw))
    return TenantPolicy(queues, targets, hosts)


def policy_from_row(queues: str | None, targets: str | None, http_hosts: str | None
                    ) -> TenantPolicy:
    """The policy stored in a `tenants` row (JSON lists; NULL = any)."""
    def load(raw: str | None) -> tuple[str, ...] | None:
        return None if raw is None else tuple(json.loads(raw))

    return TenantPolicy(load(queues), load(targets), load(http_hosts))


# --- addresses ---------------------------------------------------------------------------

def _inet_aton(text: str) -> ipaddress.IPv4Address | None:
    """IPv4 in every form `inet_aton` accepts: 1 to 4 parts, each decimal, octal (0...)
    or hex (0x...): `2130706433`, `0x7f.1`, `017700000001`, `127.1`."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or any(p == "" for p in parts):
        return None
    values: list[int] = []
    for p in parts:
        try:
            if p[:2] in ("0x", "0X"):
                v = int(p[2:], 16) if p[2:] else 0
            elif len(p) > 1 and p[0] == "0":
                v = int(p[1:], 8)
            else:
                if not p.isdigit():
                    return None
                v = int(p)
        except ValueError:
            return None
        values.append(v)
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = 0
    for v in head:
        number = number * 256 + v
    number = number * 256 ** (4 - len(head)) + last
    return ipaddress.IPv4Address(number)


def parse_ip(host: str) -> IPAddress | None:
    """The IP address a URL host denotes (None: it is a name)."""
    h = host.strip().lower().rstrip(".")
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if ":" in h:
        try:
            return ipaddress.IPv6Address(h.split("%", 1)[0])
        except ValueError:
            return None
    return _inet_aton(h)


def address_is_private(ip: IPAddress) -> bool:
    """Not a public unicast address: private, loopback, link-local, unspecified, reserved,
    multicast, shared (100.64/10), and IPv6 forms that embed such an IPv4 address."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip in ipaddress.IPv6Network("64:ff9b::/96"):
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None and address_is_private(embedded):
            return True
    return not ip.is_global or ip.is_multicast


def name_is_private(host: str) -> bool:
    h = host.lower().rstrip(".")
    return h in PRIVATE_NAMES or h.endswith(".localhost") or h.endswith(".internal")


def _looks_numeric(label: str) -> bool:
    return label.isdigit() or label.startswith("0x")


def _matches(pattern: str, host: str, ip: IPAddress | None) -> bool:
    if ip is not None:
        return parse_ip(pattern) == ip
    if pattern.startswith("*."):
        return host.endswith(pattern[1:])
    return host == pattern


def host_allowed(policy: TenantPolicy, host: str, resolved: Iterable[IPAddress] = ()
                 ) -> str | None:
    """Why `host` (with the addresses it resolved to, when known) is outside the policy,
    or None when it may be reached. A private host or address passes only when a pattern
    names it."""
    if not policy.is_set:
        return None
    h = host.strip().lower().rstrip(".")
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    ip = parse_ip(h)
    if ip is None and (not HOST_RE.fullmatch(h) or _looks_numeric(h.rsplit(".", 1)[-1])):
        # A name whose last label is a number is an IPv4 form to some clients.
        return f"host {host!r} is not a plain host name or IP address"
    patterns = policy.http_hosts
    listed = patterns is not None and any(_matches(p, h, ip) for p in patterns)
    private = address_is_private(ip) if ip is not None else name_is_private(h)
    if private and not listed:
        return (f"host {host!r} is a private, loopback or link-local address; "
                "list it in the tenant's http_hosts to allow it")
    if patterns is not None and not listed:
        return f"host {host!r} is not in the tenant's http_hosts"
    # An address DNS gave: a private one passes when the address itself is listed, or the
    # host is listed by its exact name (a wildcard does not vouch for what its names
    # resolve to: that is how DNS rebinding reaches 127.0.0.1).
    exact = patterns is not None and h in patterns
    for addr in resolved:
        if address_is_private(addr) and not exact and not (
                patterns is not None and any(parse_ip(p) == addr for p in patterns)):
            return (f"host {host!r} resolves to the private address {addr}; "
                    "list the address or the exact host in the tenant's http_hosts")
    return None


def url_violation(policy: TenantPolicy, url: str) -> str | None:
    """Why this http(s) URL is outside the policy (None: it is inside)."""
    if not policy.is_set:
        return None
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port
    except ValueError:
        return "is not a URL whose host can be checked"
    if host is None or _AMBIGUOUS.search(parts.netloc.rsplit("@", 1)[-1]) or (
            "\\" in parts.netloc):
        return "must name its host plainly (no spaces, escapes or backslashes)"
    return host_allowed(policy, host)


# --- jobs --------------------------------------------------------------------------------

def job_violation(policy: TenantPolicy, queue: str, target: dict[str, Any],
                  notify: Sequence[Any]) -> Violation | None:
    """The first field of a job that its tenant's policy refuses (None: it may run)."""
    if not policy.is_set:
        return None
    if policy.queues is not None and queue not in policy.queues:
        return Violation("queue", f"queue {queue!r} is not one of the tenant's queues "
                         f"({', '.join(policy.queues) or 'none'})")
    kind = next(iter(target), "")
    if policy.targets is not None and kind not in policy.targets:
        return Violation("target", f"{kind!r} targets are not allowed for this tenant "
                         f"({', '.join(policy.targets) or 'none'})")
    if kind == "http":
        why = url_violation(policy, str(target["http"].get("url", "")))
        if why:
            return Violation("target.http.url", why)
    for i, url in enumerate(notify):
        if not isinstance(url, str):
            continue  # a channel reference: its channel is checked (state.channels)
        why = url_violation(policy, url)
        if why:
            return Violation(f"notify[{i}]", why)
    return None


def spec_violation(policy: TenantPolicy, spec: dict[str, Any]) -> Violation | None:
    """`job_violation` for a stored job spec."""
    return job_violation(policy, spec.get("queue", "default"), spec.get("target") or {},
                         spec.get("notify") or ())
