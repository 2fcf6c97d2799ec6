"""Node configuration (TOML file, flags may override)."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Peer:
    id: str
    raft_addr: str
    http_url: str


@dataclass(frozen=True)
class NodeConfig:
    node_id: str
    data_dir: str
    raft_addr: str
    http_host: str
    http_port: int
    secret_file: str
    peers: tuple[Peer, ...] = field(default_factory=tuple)
    raft_overrides: dict[str, Any] = field(default_factory=dict)
    # Operability: cluster-wide webhook receivers, their HMAC secret (the cluster secret
    # when unset), the leader's watchdog URL and the ticker staleness threshold.
    webhooks: tuple[str, ...] = field(default_factory=tuple)
    webhook_secret_file: str | None = None
    watchdog_url: str | None = None
    watchdog_method: str = "GET"
    watchdog_interval_s: float = 5.0
    tick_stale_s: float = 10.0

    @property
    def http_url(self) -> str:
        return f"http://{self.http_host}:{self.http_port}"

    @property
    def db_path(self) -> str:
        return os.path.join(self.data_dir, "state.db")

    def read_secret(self) -> str:
        try:
            with open(self.secret_file) as f:
                secret = f.read().strip()
        except OSError as e:
            raise ConfigError(f"cannot read the cluster secret file {self.secret_file!r}: "
                              f"{e.strerror}") from None
        if len(secret) < 16:
            raise ConfigError(f"the cluster secret in {self.secret_file!r} is shorter than "
                              "16 characters")
        return secret

    def read_webhook_secret(self) -> bytes:
        """The key that signs webhook bodies: `webhook_secret_file`, else the cluster
        secret (so a receiver that already holds the cluster secret needs nothing new)."""
        if self.webhook_secret_file is None:
            return self.read_secret().encode()
        try:
            with open(self.webhook_secret_file) as f:
                secret = f.read().strip()
        except OSError as e:
            raise ConfigError(f"cannot read the webhook secret file "
                              f"{self.webhook_secret_file!r}: {e.strerror}") from None
        if not secret:
            raise ConfigError(f"the webhook secret in {self.webhook_secret_file!r} is empty")
        return secret.encode()


def _http_url(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ConfigError(f"config {key!r} must hold http(s) URLs")
    return value


def _number(data: dict[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"config {key!r} must be a positive number")
    return float(value)


def _need(data: dict[str, Any], key: str, kind: type) -> Any:
    if key not in data:
        raise ConfigError(f"config is missing {key!r}")
    value = data[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise ConfigError(f"config {key!r} must be a {kind.__name__}")
    return value


def load_config(path: str, overrides: dict[str, Any] | None = None) -> NodeConfig:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"cannot read config {path!r}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config {path!r} is not valid TOML: {e}") from None
    overrides = dict(overrides or {})
    extra_hooks = overrides.pop("webhooks", None) or []
    data.update({k: v for k, v in overrides.items() if v is not None})
    hooks = data.get("webhooks", [])
    if not isinstance(hooks, list):
        raise ConfigError("config 'webhooks' must be a list of URLs")
    webhooks = tuple(dict.fromkeys(_http_url(u, "webhooks") for u in [*hooks, *extra_hooks]))
    watchdog = data.get("watchdog_url")
    if watchdog is not None:
        watchdog = _http_url(watchdog, "watchdog_url")
    method = str(data.get("watchdog_method", "GET")).upper()
    if method not in ("GET", "POST"):
        raise ConfigError("config 'watchdog_method' must be GET or POST")
    base = os.path.dirname(os.path.abspath(path))

    def rel(p: str) -> str:
        return p if os.path.isabs(p) else os.path.join(base, p)

    if "secret_file" not in data:
        raise ConfigError("config is missing 'secret_file': a cluster secret is mandatory "
                          "(Raft messages are pickles; without it anyone reaching the port "
                          "could run code on the node)")
    peers = []
    for p in data.get("peers", []):
        if not isinstance(p, dict):
            raise ConfigError("each [[peers]] entry must be a table")
        peers.append(Peer(_need(p, "id", str), _need(p, "raft_addr", str),
                          _need(p, "http_url", str)))
    return NodeConfig(
        node_id=_need(data, "node_id", str),
        data_dir=rel(_need(data, "data_dir", str)),
        raft_addr=_need(data, "raft_addr", str),
        http_host=data.get("http_host", "127.0.0.1"),
        http_port=_need(data, "http_port", int),
        secret_file=rel(data["secret_file"]),
        peers=tuple(peers),
        raft_overrides=dict(data.get("raft", {})),
        webhooks=webhooks,
        webhook_secret_file=(rel(data["webhook_secret_file"])
                             if data.get("webhook_secret_file") else None),
        watchdog_url=watchdog,
        watchdog_method=method,
        watchdog_interval_s=_number(data, "watchdog_interval_s", 5.0),
        tick_stale_s=_number(data, "tick_stale_s", 10.0),
    )
