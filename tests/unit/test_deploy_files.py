"""The shipped deploy/ files: every node config loads with the real loader, the three
agree with each other, and `raftcron deploy init` writes exactly the files they name."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from raftcron.auth import TokenStore
from raftcron.cli.deploy_init import SECRET_FILE, TOKENS_FILE, WORKER_TOKEN_FILE
from raftcron.cli.main import main
from raftcron.config import NodeConfig, load_config
from raftcron.worker.isolation import read_token_file

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ETC = "/etc/raftcron"


def shipped_configs() -> dict[str, NodeConfig]:
    configs = {}
    for path in sorted(DEPLOY.glob("n*.toml")):
        config = load_config(str(path))
        configs[config.node_id] = config
    return configs


def test_every_shipped_node_config_loads_and_names_the_init_files() -> None:
    configs = shipped_configs()
    assert sorted(configs) == ["n1", "n2", "n3"]
    for config in configs.values():
        assert config.secret_file == f"{ETC}/{SECRET_FILE}"
        assert config.tokens_file == f"{ETC}/{TOKENS_FILE}" and not config.auth_off
        assert config.data_dir == "/data"
        # Listening on the node's own name only, never on every address.
        assert config.raft_overrides.get("bindAddress") == config.raft_addr
        assert config.http_host == config.raft_addr.rsplit(":", 1)[0] == config.node_id


def test_the_shipped_configs_agree_on_the_cluster() -> None:
    configs = shipped_configs()
    for config in configs.values():
        peers = {p.id: p for p in config.peers}
        assert sorted(peers) == sorted(set(configs) - {config.node_id})
        for pid, peer in peers.items():
            assert peer.raft_addr == configs[pid].raft_addr
            assert peer.http_url == configs[pid].http_url
    ports = [port for c in configs.values()
             for port in (c.http_port, int(c.raft_addr.rsplit(":", 1)[1]))]
    assert len(set(ports)) == len(ports), "two nodes share a port (host networking)"


def test_compose_mounts_what_the_configs_and_the_worker_read() -> None:
    import yaml

    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    configs = shipped_configs()
    for node, config in configs.items():
        mounts = services[node]["volumes"]
        assert f"./{node}.toml:{ETC}/node.toml:ro" in mounts
        for name in (SECRET_FILE, TOKENS_FILE):
            assert f"./{name}:{ETC}/{name}:ro" in mounts
        assert f"{node}:/data" in mounts
        assert services[node]["ports"] == [f"127.0.0.1:{config.http_port}:{config.http_port}"]
    worker = services["worker"]
    assert f"./{WORKER_TOKEN_FILE}:{ETC}/{WORKER_TOKEN_FILE}:ro" in worker["volumes"]
    command = worker["command"]
    assert command[command.index("--token-file") + 1] == f"{ETC}/{WORKER_TOKEN_FILE}"
    assert command[command.index("--server") + 1].split(",") == [
        c.http_url for c in configs.values()]
    init = services["init"]  # `docker compose run --rm init`: not started by `up`
    assert init["profiles"] == ["init"] and init["volumes"] == ["./:/deploy"]
    assert init["command"] == ["deploy", "init", "--dir", "/deploy", "--uid", "10001"]


def test_deploy_init_writes_a_secret_and_tokens_the_nodes_and_worker_accept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "init", "--dir", str(tmp_path)]) == 0
    printed = dict(line.split(" ", 1) for line in capsys.readouterr().out.splitlines())
    assert sorted(printed) == ["admin", "worker"]
    for name in (SECRET_FILE, TOKENS_FILE, WORKER_TOKEN_FILE):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600, name
    assert len((tmp_path / SECRET_FILE).read_text().strip()) >= 32
    store = TokenStore(str(tmp_path / TOKENS_FILE))
    admin = store.authenticate(f"Bearer {printed['admin']}")
    worker = store.authenticate(f"Bearer {printed['worker']}")
    assert admin is not None and admin.admin
    assert worker is not None and worker.can_work() and not worker.admin
    assert not worker.can_read() and worker.worker_queues is None
    assert read_token_file(str(tmp_path / WORKER_TOKEN_FILE)) == printed["worker"]
    assert "rc_" not in (tmp_path / TOKENS_FILE).read_text(), "a usable token was stored"


def test_deploy_init_never_replaces_the_files_of_a_running_cluster(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "init", "--dir", str(tmp_path)]) == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    capsys.readouterr()
    assert main(["deploy", "init", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists already" in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_deploy_init_refuses_a_missing_directory(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "init", "--dir", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "nope").exists()


def test_deploy_init_hands_the_files_to_the_image_uid(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    out = subprocess.run([sys.executable, "-m", "raftcron", "deploy", "init", "--dir",
                          str(tmp_path), "--uid", "10001"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    for name in (SECRET_FILE, TOKENS_FILE, WORKER_TOKEN_FILE):
        st = os.stat(tmp_path / name)
        assert (st.st_uid, st.st_gid) == (10001, 10001), name


def test_deploy_init_rejects_a_non_numeric_uid(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["deploy", "init", "--uid", "raftcron"])
    assert exit_.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_the_image_user_is_the_uid_deploy_init_hands_the_files_to() -> None:
    from raftcron.cli.deploy_init import IMAGE_UID

    dockerfile = (DEPLOY.parent / "Dockerfile").read_text()
    assert f"raftcron:x:{IMAGE_UID}:{IMAGE_UID}:" in dockerfile
    assert "\nUSER raftcron\n" in dockerfile
