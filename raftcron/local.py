"""`raftcron up`: a local three-node cluster with a worker, in the foreground."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

TOKENS_FILE = "tokens.json"
ADMIN_TOKEN_FILE = "admin.token"
WORKER_TOKEN_FILE = "worker.token"


def _keep_token(path: Path, token: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")


def local_tokens(data_dir: Path) -> tuple[str, str]:
    """The admin and worker tokens of a local cluster, created on first use.

    The nodes only know hashes (`tokens.json`); a local cluster also keeps the two tokens
    themselves next to the cluster secret (mode 0600), so `raftcron up` can print the admin
    token again on every run and start its worker."""
    from raftcron.auth import create_token

    tokens = data_dir / TOKENS_FILE
    fresh = not tokens.exists()  # kept tokens without their hashes would not work
    out = []
    for name, scope in ((ADMIN_TOKEN_FILE, "admin"), (WORKER_TOKEN_FILE, "worker")):
        kept = data_dir / name
        token = kept.read_text().strip() if kept.exists() and not fresh else ""
        if not token:
            token = create_token(str(tokens), [scope], f"local-{scope}")
            _keep_token(kept, token)
        out.append(token)
    return out[0], out[1]


def write_cluster_configs(data_dir: Path, nodes: int, port_base: int) -> list[Path]:
    """Generate node configs, a secret and tokens once; later runs reuse them (and the
    state)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    secret = data_dir / "cluster.secret"
    if not secret.exists():
        secret.write_text(secrets.token_urlsafe(32) + "\n")
        secret.chmod(0o600)
    local_tokens(data_dir)
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
                'secret_file = "cluster.secret"', f'tokens_file = "{TOKENS_FILE}"', "",
            ]
            for other in ids:
                if other != nid:
                    lines += ["[[peers]]", f'id = "{other}"', f'raft_addr = "{raft[other]}"',
                              f'http_url = "http://127.0.0.1:{http[other]}"', ""]
            path.write_text("\n".join(lines))
        else:
            text = path.read_text()
            if not re.search(r"^\s*(tokens_file|auth)\s*=", text, re.MULTILINE):
                # A config written before API authentication: top-level keys go first.
                path.write_text(f'tokens_file = "{TOKENS_FILE}"\n' + text)
        paths.append(path)
    return paths


def _spawn(args: list[str], log_path: Path, token: str | None = None
           ) -> subprocess.Popen[bytes]:
    log = open(log_path, "ab")
    env = dict(os.environ)
    env.pop("RAFTCRON_TOKEN", None)
    if token:
        env["RAFTCRON_TOKEN"] = token  # not on the command line: ps shows arguments
    return subprocess.Popen([sys.executable, "-m", "raftcron", *args], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, env=env)


def run_up(data_dir: str, nodes: int, port_base: int, workers: int = 1) -> int:
    root = Path(data_dir).resolve()
    configs = write_cluster_configs(root, nodes, port_base)
    admin_token, worker_token = local_tokens(root)
    urls = [f"http://127.0.0.1:{port_base + i}" for i in range(nodes)]
    procs: list[subprocess.Popen[bytes]] = []
    for cfg in configs:
        procs.append(_spawn(["node", "--config", str(cfg)], root / f"{cfg.stem}.log"))
    for i in range(workers):
        procs.append(_spawn(["worker", "--server", ",".join(urls), "--id", f"local-w{i + 1}"],
                            root / f"worker{i + 1}.log", worker_token))
    leader = None
    deadline = time.monotonic() + 30
    while leader is None and time.monotonic() < deadline:
        for url in urls:
            try:
                leader = httpx.get(f"{url}/v1/cluster", timeout=0.5, headers={
                    "Authorization": f"Bearer {admin_token}"}).json().get("leader_id")
            except (httpx.HTTPError, ValueError):
                continue
            if leader:
                break
        time.sleep(0.3)
    print(f"raftcron: {nodes} nodes, data in {root}")
    for url in urls:
        print(f"  node   {url}   (status page {url}/ , API {url}/v1/jobs)")
    print(f"  leader {leader or 'not elected yet'}; logs in {root}/*.log")
    print(f"  admin token (also in {root / ADMIN_TOKEN_FILE}); for the CLI:")
    print(f"         export RAFTCRON_TOKEN={admin_token}")
    print("         the status page asks for it once per browser tab")
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
