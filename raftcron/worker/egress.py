"""Where an HTTP target may connect, checked on the worker at run time.

The API checked the target's host against its tenant's policy when the job was saved;
DNS can still answer with a private address when the run starts (DNS rebinding: a public
name that resolves to 127.0.0.1 or 169.254.169.254). For a lease that carries its
tenant's `http_rule`, the worker resolves the host itself, refuses a private address the
policy does not list, and connects to the address it checked (the URL's host stays in
the `Host` header and in TLS SNI and certificate checks), so a second lookup cannot
answer differently.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from raftcron.core.tenant_policy import TARGET_KINDS, TenantPolicy, host_allowed, parse_ip


class EgressRefused(Exception):
    """The target's host is outside its tenant's policy at run time."""


@dataclass(frozen=True, slots=True)
class Pinned:
    url: str
    host_header: str
    sni_hostname: str | None


def rule_policy(rule: Mapping[str, Any]) -> TenantPolicy:
    """The policy a lease's `http_rule` stands for (a tenant that has a policy; only its
    hosts matter here)."""
    hosts = rule.get("http_hosts")
    return TenantPolicy(targets=TARGET_KINDS,
                        http_hosts=None if hosts is None else tuple(str(h) for h in hosts))


async def resolve(host: str, port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0].split("%", 1)[0])
                              for info in infos))


async def pin(url: str, rule: Mapping[str, Any]) -> Pinned:
    """Check `url`'s host and the addresses it resolves to against `rule`; the URL to
    connect to (the first allowed address), or EgressRefused."""
    parsed = httpx.URL(url)
    host = parsed.host
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    policy = rule_policy(rule)
    why = host_allowed(policy, host)
    if why:
        raise EgressRefused(why)
    literal = parse_ip(host)
    try:
        addrs = [literal] if literal is not None else await resolve(host, port)
    except (OSError, ValueError) as e:
        raise EgressRefused(f"cannot resolve {host!r}: {e}") from None
    if not addrs:
        raise EgressRefused(f"{host!r} resolves to no address")
    why = host_allowed(policy, host, addrs)  # one private answer refuses them all
    if why:
        raise EgressRefused(why)
    address = str(addrs[0])
    host_header = host if parsed.port is None else f"{host}:{parsed.port}"
    if ":" in host and not host.startswith("["):
        host_header = f"[{host}]" if parsed.port is None else f"[{host}]:{parsed.port}"
    return Pinned(str(parsed.copy_with(host=address)), host_header,
                  host if parsed.scheme == "https" and literal is None else None)
