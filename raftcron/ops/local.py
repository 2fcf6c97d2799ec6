"""`raftcron up`: a local three-node cluster with a worker, in the foreground.

Everything `up` writes under its data directory is private (mode 0600, directories 0700,
`raftcron.private_files`) whatever the umask it was started with: the secret, the tokens,
the node configs and the logs. The nodes set umask 077 for their own files.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from raftcron.private_files import make_private_dirs, open_private, tighten, write_private

TOKENS_FILE = "tokens.json"
ADMIN_TOKEN_FILE = "admin.token"
WORKER_TOKEN_FILE = "worker.token"


def _keep_token(path: Path, token: str) -> None:
    # A file kept from an earlier run may have had another mode: open_private tightens it.
    write_private(path, token + "\n")


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
    state). Every file and directory is private from its creation, and those an earlier
    build made readable by others are tightened (see `_tighten_earlier_files`)."""
    make_private_dirs(data_dir)
    secret = data_dir / "cluster.secret"
    if not secret.exists():
        write_private(secret, secrets.token_urlsafe(32) + "\n", exclusive=True)
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
            lines += _loopback_raft(raft[nid])
            write_private(path, "\n".join(lines))
        else:
            text = path.read_text()
            if not re.search(r"^\s*(tokens_file|auth)\s*=", text, re.MULTILINE):
                # A config written before API authentication: top-level keys go first.
                text = f'tokens_file = "{TOKENS_FILE}"\n' + text
            own = re.search(r'^raft_addr\s*=\s*"([^"]+)"', text, re.MULTILINE)
            if own and not re.search(r"^\s*\[raft\]", text, re.MULTILINE):
                # Written before the Raft port was bound to loopback: bind the address the
                # config names (its ports came from the --port-base of its first run).
                text = text.rstrip("\n") + "\n\n" + "\n".join(_loopback_raft(own[1]))
            write_private(path, text)
        paths.append(path)
    _tighten_earlier_files(data_dir, ids)
    return paths


def _tighten_earlier_files(data_dir: Path, ids: list[str]) -> None:
    """A cluster made by an earlier build kept 0755 directories and 0644 files (state,
    journal, logs): take the group's and others' access away. In the data directory
    itself only from the files `up` names (it may hold files of the user's own); the
    nodes' directories (`n1`, ...) are raftcron's alone, everything in them."""
    for nid in ids:
        for top, dirs, files in os.walk(data_dir / nid):
            for name in (*dirs, *files):
                tighten(os.path.join(top, name))
        tighten(data_dir / nid)
        for name in (f"{nid}.log", f"{nid}.toml"):
            tighten(data_dir / name)
    for name in (TOKENS_FILE, ADMIN_TOKEN_FILE, WORKER_TOKEN_FILE, "cluster.secret"):
        tighten(data_dir / name)
    for log in data_dir.glob("worker*.log"):
        tighten(log)


def _loopback_raft(raft_addr: str) -> list[str]:
    """Config lines binding a local node's Raft port to loopback: pysyncobj otherwise
    listens on every interface, whatever address the node is known by."""
    return ["[raft]", f'bindAddress = "{raft_addr}"', ""]


def _spawn(args: list[str], log_path: Path, token: str | None = None
           ) -> subprocess.Popen[bytes]:
    # A log shows job output and errors that may quote the state: 0600 like the rest.
    log = os.fdopen(open_private(log_path, os.O_WRONLY | os.O_APPEND), "ab")
    env = dict(os.environ)
    env.pop("RAFTCRON_TOKEN", None)
    if token:
        env["RAFTCRON_TOKEN"] = token  # not on the command line: ps shows arguments
    # Workers get theirs through --token-file: a job can read /proc/<worker>/environ.
    return subprocess.Popen([sys.executable, "-m", "raftcron", *args], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, env=env)


# A node or worker that exits is started again after RESTART_DELAY_S, so that killing one
# shows a failover and then the node catching up, as under a service manager. One that
# exits within QUICK_EXIT_S of its start CRASH_LOOP times in a row stops the cluster.
RESTART_DELAY_S = 3.0
QUICK_EXIT_S = 10.0
CRASH_LOOP = 3


@dataclass
class Child:
    """A process `raftcron up` keeps running."""

    name: str
    args: list[str]
    log: Path
    token: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    quick_exits: int = 0
    restart_at: float | None = None
    crash_looping: bool = False

    def start(self) -> None:
        self.proc = _spawn(self.args, self.log, self.token)
        self.started = time.monotonic()
        self.restart_at = None

    def check(self, now: float) -> str | None:
        """Restart or schedule a restart; a message when something happened. Sets
        `crash_looping` instead when the child keeps exiting."""
        if self.restart_at is not None:
            if now < self.restart_at:
                return None
            self.start()
            return f"raftcron: {self.name} started again"
        assert self.proc is not None
        if self.proc.poll() is None:
            return None
        self.quick_exits = self.quick_exits + 1 if now - self.started < QUICK_EXIT_S else 0
        if self.quick_exits >= CRASH_LOOP:
            self.crash_looping = True
            return None
        self.restart_at = now + RESTART_DELAY_S
        return (f"raftcron: {self.name} exited with {self.proc.returncode}; the others go "
                f"on, it starts again in {RESTART_DELAY_S:.0f} s (log: {self.log})")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


def wait_for_leader(urls: list[str], token: str, give_up: Callable[[], bool],
                 timeout: float = 30.0) -> str | None:
    """The leader's id once any node names one (None after `timeout` or on `give_up`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not give_up():
        for url in urls:
            try:
                leader = httpx.get(f"{url}/v1/cluster", timeout=0.5, headers={
                    "Authorization": f"Bearer {token}"}).json().get("leader_id")
            except (httpx.HTTPError, ValueError):
                continue
            if leader:
                return str(leader)
        time.sleep(0.3)
    return None


def _print_banner(root: Path, urls: list[str], leader: str | None, admin_token: str) -> None:
    print(f"raftcron: {len(urls)} nodes, data in {root}")
    for url in urls:
        print(f"  node   {url}   (status page {url}/ , API {url}/v1/jobs)")
    print(f"  leader {leader or 'not elected yet'}; logs in {root}/*.log")
    print(f"  admin token (also in {root / ADMIN_TOKEN_FILE}); for the CLI:")
    print(f"         export RAFTCRON_TOKEN={admin_token}")
    print("         the status page asks for it once per browser tab")
    print(f"  try:   raftcron job add hello --cron '*/10 * * * * *' --shell 'echo hi' "
          f"--server {urls[0]}")
    print("Ctrl-C stops the cluster; state is kept for the next run. A node that dies is "
          "started again.", flush=True)


# The local worker's concurrency. A pipelined slot runs hundreds of trivial jobs a second
# (bench/results/worker.txt), so for a demo the slots that matter are those a slow job
# holds: eight let a few `sleep`-style demo jobs run side by side while the quick ones
# keep their instants.
LOCAL_WORKER_CONCURRENCY = 8


def run_up(data_dir: str, nodes: int, port_base: int, workers: int = 1) -> int:
    root = Path(data_dir).resolve()
    configs = write_cluster_configs(root, nodes, port_base)
    admin_token, _ = local_tokens(root)  # the worker reads its token file
    urls = [f"http://127.0.0.1:{port_base + i}" for i in range(nodes)]
    stopping = False
    code = 0

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    # Before any child starts: they run in their own sessions, so Ctrl-C reaches only
    # this process, which must then stop them whatever it was doing.
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    children = [Child(f"node {cfg.stem}", ["node", "--config", str(cfg)],
                      root / f"{cfg.stem}.log") for cfg in configs]
    try:
        for child in children:
            child.start()
        leader = wait_for_leader(urls, admin_token, lambda: stopping)
        if stopping:  # Ctrl-C while the nodes started
            return code
        # Workers start once the nodes answer: earlier, their first polls only log errors.
        # The token file, not the environment: /proc/<pid>/environ of the worker shows the
        # environment it was started with, and its jobs run as the same user.
        worker_children = [
            Child(f"worker local-w{i + 1}",
                  ["worker", "--server", ",".join(urls), "--id", f"local-w{i + 1}",
                   "--concurrency", str(LOCAL_WORKER_CONCURRENCY),
                   "--token-file", str(root / WORKER_TOKEN_FILE)],
                  root / f"worker{i + 1}.log") for i in range(workers)]
        children += worker_children
        for child in worker_children:
            child.start()
        _print_banner(root, urls, leader, admin_token)
        while not stopping:
            for child in children:
                message = child.check(time.monotonic())
                if child.crash_looping:
                    print(f"raftcron: {child.name} keeps exiting (log: {child.log}); "
                          "stopping the cluster", file=sys.stderr, flush=True)
                    stopping, code = True, 1
                    break
                if message:
                    print(message, file=sys.stderr, flush=True)
            time.sleep(0.2)
    finally:
        for child in reversed(children):
            child.stop()
        for child in children:
            child.wait()
        print("raftcron: stopped", flush=True)
    return code
