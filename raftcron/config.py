"""Node configuration (TOML file, flags may override). It stands alone at the top of the
package, in no layer, because the layers of a node (cluster, api, ops, the node itself)
and the CLI all read it while it imports only `core`: inside one layer it would make the
others depend on that layer. Deploy files import it by this path too (the Dockerfile's
health check calls `raftcron.config.load_config`)."""

from __future__ import annotations

import os
import socket
import tomllib
from dataclasses import dataclass, field
from typing import Any

from raftcron.core.ahead import (
    DEFAULT_LEASE_AHEAD_HERD_S,
    DEFAULT_LEASE_AHEAD_S,
    HERD_SIZE,
    MAX_HERD_LEAD_S,
    MAX_LEASE_AHEAD_S,
)
from raftcron.core.timefmt import parse_duration


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
    # Operability: cluster-wide webhook receivers, their HMAC secret (unset: the cluster
    # webhook key generated into the replicated state), the leader's watchdog URL and the
    # ticker staleness threshold.
    webhooks: tuple[str, ...] = field(default_factory=tuple)
    webhook_secret_file: str | None = None
    watchdog_url: str | None = None
    watchdog_method: str = "GET"
    watchdog_interval_s: float = 5.0
    tick_stale_s: float = 10.0
    # The `backlog` alert: a queue's oldest due run has waited longer than this.
    backlog_alert_s: float = 60.0
    # Dispatch ahead (issue 18 §4): a run due within this many seconds may be leased to a
    # worker whose clock agrees with the cluster's; it starts the run at its instant. 0: off.
    lease_ahead_s: float = DEFAULT_LEASE_AHEAD_S
    # The same for a herd (1,000 runs or more due at one instant); at least lease_ahead_s.
    lease_ahead_herd_s: float = DEFAULT_LEASE_AHEAD_HERD_S
    # A herd too large to lease in lease_ahead_herd_s goes as far ahead as leasing it takes,
    # up to this (seconds, at most core.ahead.MAX_HERD_LEAD_S); by default no further.
    lease_ahead_herd_max_s: float = DEFAULT_LEASE_AHEAD_HERD_S
    # How many runs due at one instant make a herd (leased lease_ahead_herd_s ahead).
    herd_size: int = HERD_SIZE
    # API authentication: bearer tokens from `tokens_file`; `auth_off` only when the config
    # says `auth = "off"` explicitly. Neither set (a hand-built config): every request is
    # refused.
    tokens_file: str | None = None
    auth_off: bool = False
    # HTTPS for the API (both or neither).
    tls_cert: str | None = None
    tls_key: str | None = None
    # Finished history older than this is pruned ("7d", "12h", "off"; None: the default,
    # $RAFTCRON_RETENTION or 7 days). Validated at load; read by node.retention_of.
    retention: str | None = None
    # A webhook delivery that keeps failing is given up (dead) this long after its first
    # try ("24h"), or at this many failed tries (None: no count bound).
    outbox_give_up_s: float = 24 * 3600.0
    outbox_give_up_attempts: int | None = None
    # The audit trail of writes (api.audit): a file to append JSON lines to; None: stderr.
    audit_log: str | None = None

    @property
    def http_url(self) -> str:
        scheme = "https" if self.tls_cert else "http"
        return f"{scheme}://{self.http_host}:{self.http_port}"

    def server_ssl_options(self) -> dict[str, str]:
        """Keyword arguments for `uvicorn.Config` (empty without TLS)."""
        if not self.tls_cert or not self.tls_key:
            return {}
        return {"ssl_certfile": self.tls_cert, "ssl_keyfile": self.tls_key}

    def check_tls_files(self) -> None:
        for key, path in (("tls_cert", self.tls_cert), ("tls_key", self.tls_key)):
            if path is None:
                continue
            try:
                with open(path, "rb") as f:
                    f.read(1)
            except OSError as e:
                raise ConfigError(f"cannot read {key} {path!r}: {e.strerror}") from None

    def check_ports_free(self) -> None:
        """Fail now when another process listens on this node's Raft or HTTP port:
        pysyncobj would retry its bind quietly forever, leaving a node that serves HTTP
        but never joins the cluster."""
        bind = str(self.raft_overrides.get("bindAddress") or "")
        raft_host, _, raft_port = (bind or self.raft_addr).rpartition(":")
        if not raft_port.isdigit():
            key = "raft.bindAddress" if bind else "raft_addr"
            raise ConfigError(f"config {key!r} must be host:port, not {bind or self.raft_addr!r}")
        if not bind:  # where pysyncobj binds without one
            raft_host = "::" if ":" in raft_host else "0.0.0.0"
        for what, host, port in (("Raft", raft_host, raft_port),
                                 ("HTTP", self.http_host, self.http_port)):
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do
                try:
                    sock.bind((host.strip("[]"), int(port)))
                except (OSError, ValueError, OverflowError) as e:
                    reason = getattr(e, "strerror", None) or str(e)
                    raise ConfigError(f"cannot listen for {what} on {host}:{port}: "
                                      f"{reason}") from None

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

    def read_webhook_secret(self) -> bytes | None:
        """The key that signs webhooks to the cluster-wide receivers: `webhook_secret_file`;
        None without one (then the cluster webhook key in the replicated state signs; the
        Raft secret never does)."""
        if self.webhook_secret_file is None:
            return None
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


def _lease_ahead(data: dict[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not 0 <= value <= MAX_LEASE_AHEAD_S):
        raise ConfigError(f"config {key!r} must be a number from 0 to "
                          f"{MAX_LEASE_AHEAD_S:g} (seconds; 0 turns dispatch ahead off)")
    return float(value)


def _herd_max(data: dict[str, Any]) -> float:
    herd = _lease_ahead(data, "lease_ahead_herd_s", DEFAULT_LEASE_AHEAD_HERD_S)
    value = data.get("lease_ahead_herd_max_s", herd)
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not herd <= value <= MAX_HERD_LEAD_S):
        raise ConfigError(f"config 'lease_ahead_herd_max_s' must be a number from "
                          f"lease_ahead_herd_s ({herd:g}) to {MAX_HERD_LEAD_S:g} (seconds)")
    return float(value)


def _herd_size(data: dict[str, Any]) -> int:
    value = data.get("herd_size", HERD_SIZE)
    if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= 10**7:
        raise ConfigError("config 'herd_size' must be a whole number from 2 to 10000000 "
                          "(runs due at one instant)")
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


def _port(value: int, key: str) -> int:
    if not 1 <= value <= 65535:
        raise ConfigError(f"config {key!r} must be a port number (1-65535), not {value}")
    return value


def _auth(data: dict[str, Any]) -> tuple[str | None, bool]:
    """`tokens_file`, or an explicit `auth = "off"`: a node never runs open by omission."""
    mode = data.get("auth", "tokens")
    if mode not in ("tokens", "off"):
        raise ConfigError("config 'auth' must be \"tokens\" or \"off\"")
    tokens_file = data.get("tokens_file")
    if tokens_file is not None and (not isinstance(tokens_file, str) or not tokens_file):
        raise ConfigError("config 'tokens_file' must be a file path")
    if mode == "off":
        if tokens_file:
            raise ConfigError("config sets both 'tokens_file' and auth = \"off\": remove one")
        return None, True
    if not tokens_file:
        raise ConfigError("config is missing 'tokens_file': the API needs bearer tokens "
                          "(raftcron token create --scope admin --tokens-file tokens.json), "
                          "or set auth = \"off\" to run without authentication")
    return tokens_file, False


def _retention(value: Any) -> str | None:
    if value is None:
        return None
    try:
        parse_duration(str(value))
    except ValueError as e:
        raise ConfigError(f"config 'retention': {e}") from None
    return str(value)


def _give_up(data: dict[str, Any]) -> tuple[float, int | None]:
    text = data.get("outbox_give_up", "24h")
    try:
        seconds = parse_duration(text if isinstance(text, str | int | float) else str(text))
    except ValueError as e:
        raise ConfigError(f"config 'outbox_give_up': {str(e).replace('retention', 'duration')}"
                          ) from None
    if seconds is None:
        raise ConfigError("config 'outbox_give_up' must be a positive duration such as 24h "
                          "(deliveries are always given up eventually)")
    attempts = data.get("outbox_give_up_attempts")
    if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, int)
                                 or attempts < 1):
        raise ConfigError("config 'outbox_give_up_attempts' must be a positive integer")
    return seconds, attempts


def _audit_log(value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError("config 'audit_log' must be a file path")
    return value


def _peers_over_tls(peers: list[Peer]) -> None:
    """A node serving HTTPS calls its peers with the node token (and forwards clients'
    requests, bearer tokens included): an `http://` peer URL would send them in clear,
    so a TLS node refuses to start with one rather than quietly downgrade."""
    for peer in peers:
        if not peer.http_url.lower().startswith("https://"):
            raise ConfigError(f"config peer {peer.id!r} has http_url {peer.http_url!r}, but "
                              "this node serves TLS: every peer URL must be https:// (the "
                              "node token and forwarded requests would cross in clear)")


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
    tokens_file, auth_off = _auth(data)
    give_up_s, give_up_attempts = _give_up(data)
    tls_cert, tls_key = data.get("tls_cert"), data.get("tls_key")
    for key, value in (("tls_cert", tls_cert), ("tls_key", tls_key)):
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(f"config {key!r} must be a file path")
    if bool(tls_cert) != bool(tls_key):
        raise ConfigError("config needs both 'tls_cert' and 'tls_key' (or neither)")
    if not isinstance(data.get("raft", {}).get("preVote", True), bool):
        raise ConfigError("config 'raft.preVote' must be true or false")
    peers = []
    for p in data.get("peers", []):
        if not isinstance(p, dict):
            raise ConfigError("each [[peers]] entry must be a table")
        peers.append(Peer(_need(p, "id", str), _need(p, "raft_addr", str),
                          _need(p, "http_url", str)))
    if tls_cert:
        _peers_over_tls(peers)
    return NodeConfig(
        node_id=_need(data, "node_id", str),
        data_dir=rel(_need(data, "data_dir", str)),
        raft_addr=_need(data, "raft_addr", str),
        http_host=data.get("http_host", "127.0.0.1"),
        http_port=_port(_need(data, "http_port", int), "http_port"),
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
        backlog_alert_s=_number(data, "backlog_alert_s", 60.0),
        lease_ahead_s=_lease_ahead(data, "lease_ahead_s", DEFAULT_LEASE_AHEAD_S),
        lease_ahead_herd_s=_lease_ahead(data, "lease_ahead_herd_s", DEFAULT_LEASE_AHEAD_HERD_S),
        lease_ahead_herd_max_s=_herd_max(data),
        herd_size=_herd_size(data),
        tokens_file=rel(tokens_file) if tokens_file else None,
        auth_off=auth_off,
        tls_cert=rel(tls_cert) if tls_cert else None,
        tls_key=rel(tls_key) if tls_key else None,
        retention=_retention(data.get("retention")),
        outbox_give_up_s=give_up_s,
        outbox_give_up_attempts=give_up_attempts,
        audit_log=rel(_audit_log(data.get("audit_log"))) if data.get("audit_log") else None,
    )
