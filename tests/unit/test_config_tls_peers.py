"""A node serving TLS refuses `http://` peer URLs at start (issue 40 §6): it calls its peers
with the node token and forwards workers' bearer tokens, which would cross in clear."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftcron.config import ConfigError, load_config

BASE = ('node_id = "n1"\ndata_dir = "d"\nraft_addr = "127.0.0.1:1"\nhttp_port = 2\n'
        'secret_file = "s"\ntokens_file = "t.json"\n')
TLS = 'tls_cert = "c.pem"\ntls_key = "k.pem"\n'


def peer(nid: str, url: str) -> str:
    return f'[[peers]]\nid = "{nid}"\nraft_addr = "127.0.0.1:9"\nhttp_url = "{url}"\n'


def write(tmp_path: Path, top: str, peers: str) -> str:
    path = tmp_path / "n1.toml"
    path.write_text(top + BASE + peers)
    return str(path)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8702", "HTTP://n3.example:8700",
                                 "n3.example:8700"])
def test_a_tls_node_refuses_a_peer_url_that_is_not_https(tmp_path: Path, url: str) -> None:
    path = write(tmp_path, TLS, peer("n2", "https://127.0.0.1:8701") + peer("n3", url))
    with pytest.raises(ConfigError) as ei:
        load_config(path)
    message = str(ei.value)
    assert "'n3'" in message and url in message and "https://" in message
    assert "\n" not in message


def test_https_peers_of_a_tls_node_and_http_peers_without_tls_are_accepted(tmp_path: Path
                                                                          ) -> None:
    tls = load_config(write(tmp_path, TLS, peer("n2", "https://127.0.0.1:8701")
                            + peer("n3", "HTTPS://n3.example:8700")))
    assert [p.id for p in tls.peers] == ["n2", "n3"]
    plain = load_config(write(tmp_path, "", peer("n2", "http://127.0.0.1:8701")))
    assert plain.peers[0].http_url == "http://127.0.0.1:8701"


def test_tls_from_the_flags_is_checked_too(tmp_path: Path) -> None:
    path = write(tmp_path, "", peer("n2", "http://127.0.0.1:8701"))
    with pytest.raises(ConfigError, match="'n2'"):
        load_config(path, {"tls_cert": str(tmp_path / "c.pem"),
                           "tls_key": str(tmp_path / "k.pem")})
