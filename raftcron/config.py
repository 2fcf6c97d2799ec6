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
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
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
    )
