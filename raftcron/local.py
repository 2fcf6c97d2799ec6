"""`raftcron up`: a local three-node cluster with a worker, in the foreground."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx


def write_cluster_configs(data_dir: Path, nodes: int, port_base: int) -> list[Path]:
    """Generate node configs and a secret once; later runs reuse them (and the state)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    secret = data_dir / "cluster.secret"
    if not secret.exists():
        secret.write_text(secrets.token_urlsafe(32) + "\n")
        secret.chmod(0o600)
    ids = [f"n{i + 1}" for i in range(nodes)]
    raft = {nid: f"127.0.0.1:{port_base + 100 + i}" for i, nid in enumerate(ids)}
    http = {nid: port_base + i for i, nid in enumerate(ids)}
    paths = []
    for nid in ids:
        path = data_dir / f"{nid}.toml"
        if not path.exists():
            lines = [
                f'node_id = "{nid}"', f'data_dir = "{nid}"', f'raft_addr = "{raft[nid]}"',
                'http_host = "127.0.0.1"', f"http_port = {http[nid]}",
                'secret_file = "cluster.secret"', "",
            ]
            for other in ids:
                if other != nid:
                    lines += ["[[peers]]", f'id = "{other}"', f'raft_addr = "{raft[other]}"',
                              f'http_url = "http://127.0.0.1:{http[other]}"', ""]
            path.write_text("\n".join(lines))
        paths.append(path)
    return paths


def _spawn(args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    log = open(log_path, "ab")
    return subprocess.Popen([sys.executable, "-m", "raftcron", *args], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def run_up(data_dir: str, nodes: int, port_base: int, workers: int = 1) -> int:
    root = Path(data_dir).resolve()
    configs = write_cluster_configs(root, nodes, port_base)
    urls = [f"http://127.0.0.1:{port_base + i}" for i in range(nodes)]
    procs: list[subprocess.Popen[bytes]] = []
    for cfg in configs:
        procs.append(_spawn(["node", "--config", str(cfg)], root / f"{cfg.stem}.log"))
    for i in range(workers):
        procs.append(_spawn(["worker", "--server", ",".join(urls), "--id", f"local-w{i + 1}"],
                            root / f"worker{i + 1}.log"))
    leader = None
    deadline = time.monotonic() + 30
    while leader is None and time.monotonic() < deadline:
        for url in urls:
            try:
                leader = httpx.get(f"{url}/v1/cluster", timeout=0.5).json().get("leader_id")
            except (httpx.HTTPError, ValueError):
                continue
            if leader:
                break
        time.sleep(0.3)
    print(f"raftcron: {nodes} nodes, data in {root}")
    for url in urls:
        print(f"  node   {url}   (status page {url}/ , API {url}/v1/jobs)")
    print(f"  leader {leader or 'not elected yet'}; logs in {root}/*.log")
    print(f"  try:   raftcron job add hello --cron '*/10 * * * * *' --shell 'echo hi' "
          f"--server {urls[0]}")
    print("Ctrl-C stops the cluster; state is kept for the next run.")
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        while not stopping:
            for p in procs:
                if p.poll() is not None and not stopping:
                    print(f"raftcron: process {p.args[3:]} exited with {p.returncode}",
                          file=sys.stderr)
                    stopping = True
            time.sleep(0.2)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        print("raftcron: stopped")
    return 0
