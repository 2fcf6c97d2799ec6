"""Config keys for API authentication and HTTPS; the scope rules of the middleware."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftcron.api.auth import Authenticator, coarse_denial, is_open, node_token
from raftcron.auth import create_token, principal_from
from raftcron.cli.main import build_parser
from raftcron.config import ConfigError, load_config

BASE = ('node_id = "n1"\ndata_dir = "d"\nraft_addr = "127.0.0.1:1"\nhttp_port = 2\n'
        'secret_file = "s"\n')


def write(tmp_path: Path, extra: str) -> str:
    path = tmp_path / "n.toml"
    path.write_text(extra + BASE)
    return str(path)


def test_tokens_file_is_relative_to_the_config(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, 'tokens_file = "t.json"\n'))
    assert cfg.tokens_file == str(tmp_path / "t.json") and not cfg.auth_off
    assert cfg.http_url == "http://127.0.0.1:2" and cfg.server_ssl_options() == {}


def test_auth_off_must_be_explicit(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tokens_file"):
        load_config(write(tmp_path, ""))
    cfg = load_config(write(tmp_path, 'auth = "off"\n'))
    assert cfg.auth_off and cfg.tokens_file is None


@pytest.mark.parametrize("extra", ['auth = "off"\ntokens_file = "t"\n', 'auth = "no"\n',
                                   'tokens_file = ""\n', "tokens_file = 3\n",
                                   'tokens_file = "t"\ntls_cert = "c.pem"\n',
                                   'tokens_file = "t"\ntls_key = "k.pem"\n'])
def test_bad_auth_or_tls_config_is_a_config_error(tmp_path: Path, extra: str) -> None:
    with pytest.raises(ConfigError):
        load_config(write(tmp_path, extra))


def test_tls_keys_and_flags(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, 'tokens_file = "t"\ntls_cert = "c.pem"\n'
                                      'tls_key = "k.pem"\n'))
    assert cfg.http_url == "https://127.0.0.1:2"
    assert cfg.server_ssl_options() == {"ssl_certfile": str(tmp_path / "c.pem"),
                                        "ssl_keyfile": str(tmp_path / "k.pem")}
    with pytest.raises(ConfigError, match="tls_cert"):
        cfg.check_tls_files()
    args = build_parser().parse_args(["node", "--config", "c", "--tls-cert", "a",
                                      "--tls-key", "b", "--tokens-file", "t"])
    assert (args.tls_cert, args.tls_key, args.tokens_file) == ("a", "b", "t")


def test_scope_rules_before_routing(tmp_path: Path) -> None:
    def p(*scopes: str):  # noqa: ANN202
        return principal_from({"name": "x", "scopes": list(scopes)})

    assert is_open("GET", "/healthz") and is_open("GET", "/web/app.js")
    assert not is_open("POST", "/healthz") and not is_open("GET", "/v1/cluster")
    assert coarse_denial(p("read"), "GET", "/v1/jobs") is None
    assert coarse_denial(p("read"), "POST", "/v1/jobs") is not None
    assert coarse_denial(p("worker"), "GET", "/metrics") is not None
    assert coarse_denial(p("worker"), "GET", "/v1/status/queues") is not None
    assert coarse_denial(p("read"), "GET", "/v1/status/queues") is None
    assert coarse_denial(p("worker:q"), "POST", "/v1/attempts/a/complete") is None
    assert coarse_denial(p("tenant:t"), "POST", "/v1/leases") is not None
    assert coarse_denial(p("tenant:t"), "PUT", "/v1/tenants/t") is not None
    assert coarse_denial(p("admin"), "PUT", "/v1/tenants/t") is None

    tokens = tmp_path / "t.json"
    token = create_token(str(tokens), ["read"], "r")
    auth = Authenticator(str(tokens), False, "s" * 32)
    assert auth.authenticate(f"Bearer {token}").name == "r"
    node = auth.authenticate(f"Bearer {node_token('s' * 32)}")
    assert node.scopes == ("node",)
    # The node token reads the cluster view and nothing else (it travels between nodes).
    assert coarse_denial(node, "GET", "/v1/cluster") is None
    for method, path in [("GET", "/v1/jobs"), ("GET", "/v1/jobs/j"), ("GET", "/v1/occurrences"),
                         ("GET", "/v1/status/jobs"), ("GET", "/v1/status/queues"),
                         ("GET", "/v1/backup"), ("GET", "/metrics"),
                         ("POST", "/v1/jobs"), ("POST", "/v1/leases")]:
        assert coarse_denial(node, method, path) is not None, (method, path)
    assert auth.authenticate(f"Bearer {node_token('t' * 32)}") is None
    assert auth.authenticate(None) is None and auth.authenticate(token) is None
    assert Authenticator(None, True, None).authenticate(None).admin
    assert Authenticator(None, False, None).authenticate(f"Bearer {token}") is None
