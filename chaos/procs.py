"""The processes of a chaos run: three nodes (each in its own namespace), workers, the
fenced sink and the ack-loss proxy (in the client namespace, where the harness runs)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from chaos.history import History
from chaos.netns import CLIENT_IP, Netns, node_ip
from raftcron.auth import create_token

HTTP_PORT = 8700
RAFT_PORT = 7000
SINK_PORT = 9100
PROXY_PORT_BASE = 9200
CLOCK_DIR = Path(__file__).resolve().parent / "clock"
# Retention in every chaos cluster: finished history older than this is pruned during the
# run, and the checker must tell pruned history from lost instants (chaos/checks_retention).
RETENTION_S = 120
# The workload's herd (chaos/workload.py: 100 jobs sharing every tenth second) is a herd
# to the nodes too (`herd_size` 80: a member paused or late still leaves a herd), so the
# herd path (claimed and leased up to 10 s ahead) runs under faults; the product's default
# of 1,000 would need ten times the load.
HERD_SIZE = 100
NODE_HERD_SIZE = 80


def write_tokens(root: Path) -> tuple[str, str]:
    """A fresh tokens file shared by the nodes: (admin token, worker token)."""
    path = root / "tokens.json"
    path.unlink(missing_ok=True)
    return (create_token(str(path), ["admin"], "chaos-admin"),
            create_token(str(path), ["worker"], "chaos-worker"))


def raft_addr(index: int) -> str:
    return f"{node_ip(index)}:{RAFT_PORT}"


def lease_ahead_lines() -> list[str]:
    """The nodes' dispatch ahead: the product's default (`lease_ahead_s` left out) unless
    CHAOS_LEASE_AHEAD_S sets it in every node of the run (`0` turns it off)."""
    ahead = os.environ.get("CHAOS_LEASE_AHEAD_S", "").strip()
    return [f"lease_ahead_s = {float(ahead)}"] if ahead else []


def write_node_config(root: Path, index: int, peers: list[int]) -> Path:
    """Node `n<index>`'s config, listing the nodes `peers` (by index) as its peers."""
    nid = f"n{index}"
    lines = [f'node_id = "{nid}"', f'data_dir = "{nid}"',
             f'raft_addr = "{raft_addr(index)}"', f'http_host = "{node_ip(index)}"',
             f"http_port = {HTTP_PORT}", 'secret_file = "cluster.secret"',
             'tokens_file = "tokens.json"', f'retention = "{RETENTION_S}s"',
             f"herd_size = {NODE_HERD_SIZE}"]
    lines += lease_ahead_lines()
    lines.append("")
    for j in peers:
        if j != index:
            lines += ["[[peers]]", f'id = "n{j}"', f'raft_addr = "{raft_addr(j)}"',
                      f'http_url = "http://{node_ip(j)}:{HTTP_PORT}"', ""]
    path = root / f"{nid}.toml"
    path.write_text("\n".join(lines))
    return path


def write_configs(root: Path, n: int) -> dict[str, Path]:
    root.mkdir(parents=True, exist_ok=True)
    secret = root / "cluster.secret"
    secret.write_text(secrets.token_urlsafe(32) + "\n")
    secret.chmod(0o600)
    return {f"n{i}": write_node_config(root, i, list(range(1, n + 1)))
            for i in range(1, n + 1)}


class Processes:
    def __init__(self, out: Path, netns: Netns, history: History, base_offset_s: float,
                 n: int = 3, spares: int = 0) -> None:
        self.out = out
        self.netns = netns
        self.history = history
        self.base_offset_s = base_offset_s
        # The current voters. A membership change (chaos/membership_step.py) replaces the
        # list (never edits it in place: other threads iterate it); faults, heals and the
        # monitor only ever see current members. `spares` are node slots (a namespace and an
        # address each) that can join later.
        self.ids = [f"n{i}" for i in range(1, n + 1)]
        self.spares = [f"n{i}" for i in range(n + 1, n + spares + 1)]
        self.index = {f"n{i}": i for i in range(1, n + spares + 1)}
        self.urls = {nid: f"http://{node_ip(i)}:{HTTP_PORT}" for nid, i in self.index.items()}
        self.configs = write_configs(out / "nodes", n)
        self.admin_token, self.worker_token = write_tokens(out / "nodes")
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.worker_servers: dict[str, list[str]] = {}
        self.aux: dict[str, subprocess.Popen[bytes]] = {}
        self.lock = threading.RLock()
        self.http = httpx.Client(timeout=2.0, headers=self.auth_headers())
        (out / "clock").mkdir(exist_ok=True)
        self.proxy_control = out / "proxy.control"
        self.sink_url = f"http://{CLIENT_IP}:{SINK_PORT}"

    def auth_headers(self) -> dict[str, str]:
        """The admin token, for the harness's own API clients."""
        return {"Authorization": f"Bearer {self.admin_token}"}

    def clock_file(self, nid: str) -> Path:
        return self.out / "clock" / f"{nid}.offset"

    def _log(self, name: str) -> Any:
        (self.out / "logs").mkdir(exist_ok=True)
        return open(self.out / "logs" / f"{name}.log", "ab")

    # --- nodes ---------------------------------------------------------------------------

    def start_node(self, nid: str) -> int:
        with self.lock:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(
                [str(CLOCK_DIR), str(Path(__file__).resolve().parent.parent),
                 env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
            env["CHAOS_CLOCK_BASE"] = repr(self.base_offset_s)
            env["CHAOS_CLOCK_FILE"] = str(self.clock_file(nid))
            if not self.clock_file(nid).exists():
                self.clock_file(nid).write_text("0\n")
            proc = subprocess.Popen(
                ["ip", "netns", "exec", self.netns.node(self.index[nid]), sys.executable, "-m",
                 "raftcron", "node", "--config", str(self.configs[nid])],
                stdout=self._log(nid), stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )
            self.nodes[nid] = proc
            return proc.pid

    def write_joiner_config(self, nid: str) -> Path:
        """A config for spare `nid` that lists the current members as its peers (what an
        operator writes for a node that joins)."""
        with self.lock:
            self.configs[nid] = write_node_config(
                self.out / "nodes", self.index[nid], [self.index[n] for n in self.ids])
            return self.configs[nid]

    def set_members(self, ids: list[str]) -> None:
        with self.lock:
            self.spares = [n for n in self.spares if n not in ids]
            self.ids = list(ids)

    def node_pid(self, nid: str) -> int | None:
        proc = self.nodes.get(nid)
        return proc.pid if proc and proc.poll() is None else None

    def kill_node(self, nid: str, sig: int = signal.SIGKILL, wait_s: float = 10) -> int | None:
        with self.lock:
            proc = self.nodes.get(nid)
            if proc is None or proc.poll() is not None:
                return None
            pid = proc.pid
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, sig)
                proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)
                proc.wait()
            except ProcessLookupError:
                pass
            return pid

    def signal_node(self, nid: str, sig: int) -> int | None:
        pid = self.node_pid(nid)
        if pid is not None:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return None
        return pid

    def alive_nodes(self) -> list[str]:
        return [nid for nid in self.ids if self.node_pid(nid) is not None]

    # --- workers -------------------------------------------------------------------------

    def start_worker(self, wid: str, servers: list[str] | None = None) -> int:
        with self.lock:
            if servers is not None:
                self.worker_servers[wid] = servers
            servers = self.worker_servers.get(wid) or [self.urls[n] for n in self.ids]
            env = dict(os.environ)
            env["CHAOS_WORKER"] = wid
            env["CHAOS_SINK"] = self.sink_url
            # The nodes' clock (base offset), and a file the clock-bump-worker nemesis moves
            # it with. The job processes are curl, which the time-machine hook leaves alone.
            env["PYTHONPATH"] = os.pathsep.join(
                [str(CLOCK_DIR), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
            env["CHAOS_CLOCK_BASE"] = repr(self.base_offset_s)
            clock = self.clock_file(f"worker-{wid}")
            env["CHAOS_CLOCK_FILE"] = str(clock)
            if not clock.exists():
                clock.write_text("0\n")
            env["RAFTCRON_TOKEN"] = self.worker_token
            proc = subprocess.Popen(
                [sys.executable, "-m", "raftcron", "worker", "--server", ",".join(servers),
                 "--id", wid, "--concurrency", "6", "--queues", "default"],
                stdout=self._log(f"worker-{wid}"), stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )
            self.workers[wid] = proc
            return proc.pid

    def worker_tree(self, wid: str) -> list[int]:
        """The worker's pid and its job processes (they run in their own groups)."""
        proc = self.workers.get(wid)
        if proc is None or proc.poll() is not None:
            return []
        return [proc.pid, *descendants(proc.pid)]

    def pause_workers(self) -> list[int]:
        """SIGSTOP every worker with its job processes (stop_all resumes and kills them)."""
        with self.lock:
            pids = [pid for wid in sorted(self.workers) for pid in self.worker_tree(wid)]
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    pass
            return pids

    def kill_worker(self, wid: str) -> int | None:
        with self.lock:
            proc = self.workers.get(wid)
            if proc is None or proc.poll() is not None:
                return None
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()
            return proc.pid

    # --- sink and proxy ------------------------------------------------------------------

    def start_aux(self, seed: int, drop_p: float) -> None:
        self.proxy_control.write_text(f"{drop_p}\n")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(__file__).resolve().parent.parent), env.get("PYTHONPATH", "")])
        self.aux["sink"] = subprocess.Popen(
            [sys.executable, "-m", "chaos.sink", "--host", CLIENT_IP, "--port", str(SINK_PORT),
             "--log", str(self.out / "sink.jsonl"), "--base-offset", repr(self.base_offset_s)],
            stdout=self._log("sink"), stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
        maps = []
        for nid in self.ids:
            i = self.index[nid]
            maps += ["--map", f"{PROXY_PORT_BASE + i}={self.urls[nid]}"]
        self.aux["proxy"] = subprocess.Popen(
            [sys.executable, "-m", "chaos.proxy", "--host", CLIENT_IP, *maps,
             "--control", str(self.proxy_control), "--log", str(self.out / "proxy.jsonl"),
             "--seed", str(seed)],
            stdout=self._log("proxy"), stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                self.http.get(self.sink_url + "/", timeout=0.5)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the sink did not start")

    def proxy_urls(self) -> list[str]:
        return [f"http://{CLIENT_IP}:{PROXY_PORT_BASE + self.index[n]}" for n in self.ids]

    # --- views ---------------------------------------------------------------------------

    def view(self, nid: str, timeout: float = 1.0) -> dict[str, Any] | None:
        if self.node_pid(nid) is None:
            return None
        try:
            return self.http.get(self.urls[nid] + "/v1/cluster", timeout=timeout).json()
        except (httpx.HTTPError, ValueError):
            return None

    def leader(self, among: list[str] | None = None) -> str | None:
        for nid in among or self.alive_nodes():
            v = self.view(nid, timeout=0.5)
            if v and v.get("role") == "leader" and v.get("leader_duties"):
                return nid
        return None

    def wait_leader(self, timeout: float = 30) -> str | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = self.leader()
            if leader:
                return leader
            time.sleep(0.2)
        return None

    def wait_cluster_level(self, nid: str, level: int, timeout: float = 30) -> bool:
        """Until `nid` reports the cluster's committed protocol level at `level` (a fresh
        cluster unlocks calendars, groups and cancel a moment after its first leader)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            v = self.view(nid, timeout=0.5)
            if v and v.get("cluster_level", 0) >= level:
                return True
            time.sleep(0.2)
        return False

    def wait_up(self, nid: str, timeout: float = 20) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.view(nid, timeout=0.5) is not None:
                return True
            time.sleep(0.1)
        return False

    def stop_all(self) -> None:
        with self.lock:
            procs = list(self.workers.values()) + list(self.nodes.values()) + list(
                self.aux.values())
            for proc in procs:
                if proc.poll() is None:
                    for pid in [proc.pid, *descendants(proc.pid)]:
                        try:
                            os.kill(pid, signal.SIGCONT)
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
            for proc in procs:
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            self.http.close()


def descendants(pid: int) -> list[int]:
    """All descendant pids of `pid` (read from /proc; job shells start new sessions)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out
