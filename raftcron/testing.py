"""Public test helpers: a real local cluster of node processes on loopback ports. It
stands alone at the top of the package because it serves tests, not the running system:
tests and benchmarks import it by this path (`from raftcron.testing import LocalCluster`),
it builds on `ops.local` as the CLI does, and no module of the package imports it."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from raftcron.core.protocol import PROTOCOL_LEVEL
from raftcron.ops.local import local_tokens, write_cluster_configs


def commit_protocol_level(conn: sqlite3.Connection, level: int | None = None) -> None:
    """Give a test's state database the protocol level (default: this build's) as if its
    cluster's leader had committed `SetClusterLevel(level)`: a one-node cluster of this
    build, whose features are all unlocked. State machine and API tests start there."""
    from raftcron.state.db import META_CLUSTER_LEVEL, set_meta

    set_meta(conn, META_CLUSTER_LEVEL, PROTOCOL_LEVEL if level is None else level)


# Test clusters bind loopback ports from this range, below Linux's default ephemeral range
# (32768-60999), so an outgoing connection cannot take a port a node is about to bind.
# RAFTCRON_TEST_PORT_RANGE="lo-hi" narrows it: two test sessions run at once (.ci/run) each
# get their own half, so neither can pick a range the other checked but has not bound yet.
PORT_RANGE = (20000, 32700)
# Sets RLIMIT_NOFILE (soft and hard) to argv[1], then becomes the command after it.
NOFILE_LAUNCHER = ("import os, resource, sys; n = int(sys.argv[1]); "
                   "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
                   "os.execv(sys.argv[2], sys.argv[2:])")
PORT_RANGE_ENV = "RAFTCRON_TEST_PORT_RANGE"


def port_range() -> tuple[int, int]:
    """The (lo, hi) range test ports are drawn from (the environment may narrow it)."""
    raw = os.environ.get(PORT_RANGE_ENV)
    if not raw:
        return PORT_RANGE
    try:
        lo, hi = (int(part) for part in raw.split("-"))
    except ValueError:
        raise ValueError(f"{PORT_RANGE_ENV}={raw!r}: expected two ports, lo-hi") from None
    if not 1024 <= lo < hi <= 65535:
        raise ValueError(f"{PORT_RANGE_ENV}={raw!r}: expected 1024 <= lo < hi <= 65535")
    return lo, hi


def free_port_base(count: int) -> int:
    """A base port such that base..base+count and base+100..base+100+count are free, all
    within `port_range()`."""
    lo, hi = port_range()
    room = hi - lo - 100 - count
    if room <= 0:
        raise RuntimeError(f"the port range {lo}-{hi} is too small for {count} nodes")
    for _ in range(200):
        base = lo + (int.from_bytes(os.urandom(2), "big") % room)
        ports = [base + i for i in range(count)] + [base + 100 + i for i in range(count)]
        if all(_port_free(p) for p in ports):
            return base
    raise RuntimeError("no free port range found")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.1,
               message: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except (httpx.HTTPError, ValueError, KeyError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


class LocalCluster:
    """Three (or N) `raftcron node` processes with real SQLite files under `root`.

    The nodes share `root/tokens.json` with an admin and a worker token: `http` sends the
    admin token, workers started here get the worker token."""

    def __init__(self, root: Path, nodes: int = 3, port_base: int | None = None) -> None:
        self.root = root
        self.n = nodes
        self.port_base = port_base or free_port_base(nodes)
        self.configs = write_cluster_configs(root, nodes, self.port_base)
        self.tokens_file = root / "tokens.json"
        self.admin_token, self.worker_token = local_tokens(root)
        self.ids = [f"n{i + 1}" for i in range(nodes)]
        self.urls = {nid: f"http://127.0.0.1:{self.port_base + i}"
                     for i, nid in enumerate(self.ids)}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        # Environment and working directory of the node processes (default: inherited).
        self.env: dict[str, str] | None = None
        # Extra environment of one node's process, by node id (e.g. the test-only
        # RAFTCRON_TEST_PROTOCOL_LEVEL of a node emulating an older build).
        self.node_env: dict[str, dict[str, str]] = {}
        # A descriptor limit (soft and hard, as `ulimit -n`) for one node's process.
        self.node_nofile: dict[str, int] = {}
        # The committed protocol level `leader` waits for: a fresh cluster unlocks this
        # build's features a moment after its first leader began (leader.cluster_level).
        # A cluster with a node of an older level sets that level (None: do not wait).
        self.ready_level: int | None = PROTOCOL_LEVEL
        self.cwd: Path | None = None
        self.http = httpx.Client(timeout=10, headers=self.auth_headers())
        self.workers: list[subprocess.Popen[bytes]] = []
        # Extra environment of the workers started here (e.g. the CA file under TLS).
        self.worker_env: dict[str, str] = {}

    def auth_headers(self, token: str | None = None) -> dict[str, str]:
        """`Authorization` for `token` (default: the admin token)."""
        return {"Authorization": f"Bearer {token or self.admin_token}"}

    def create_token(self, *scopes: str, name: str = "") -> str:
        """Add a token to the shared tokens file (nodes pick it up without a restart)."""
        from raftcron.auth import create_token

        return create_token(str(self.tokens_file), list(scopes), name)

    # --- configuration (before the nodes start) ---
    def set_raft_options(self, nid: str, **options: float) -> None:
        """Add pysyncobj options to one node's `[raft]` table (the last table of the
        generated config), e.g. `raftMinTimeout=0.3` to make that node elect itself
        first."""
        path = self.configs[self.ids.index(nid)]
        path.write_text(path.read_text().rstrip("\n") + "\n"
                        + "".join(f"{k} = {v!r}\n" for k, v in options.items()))

    def enable_tls(self, cert: Path, key: Path) -> None:
        """Serve every node's API over HTTPS with one certificate shared by the cluster
        (as the README recommends for a self-signed one); this client and the workers
        started here trust it."""
        import ssl

        for path in self.configs:
            text = path.read_text().replace('http_url = "http://', 'http_url = "https://')
            path.write_text(f'tls_cert = "{cert}"\ntls_key = "{key}"\n{text}')
        self.urls = {n: u.replace("http://", "https://", 1) for n, u in self.urls.items()}
        self.http.close()
        self.http = httpx.Client(timeout=10, headers=self.auth_headers(),
                                 verify=ssl.create_default_context(cafile=str(cert)))
        self.worker_env["SSL_CERT_FILE"] = str(cert)

    # --- processes ---
    def start(self, nid: str | None = None) -> None:
        for i, node_id in enumerate(self.ids):
            if nid is not None and node_id != nid:
                continue
            log = open(self.root / f"{node_id}.log", "ab")
            env = self.env
            if self.node_env.get(node_id):
                env = {**(os.environ if env is None else env), **self.node_env[node_id]}
            command = [sys.executable, "-m", "raftcron", "node", "--config",
                       str(self.configs[i])]
            if node_id in self.node_nofile:
                command = [sys.executable, "-c", NOFILE_LAUNCHER,
                           str(self.node_nofile[node_id]), *command]
            self.procs[node_id] = subprocess.Popen(
                command,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env=env, cwd=self.cwd,
            )

    def start_worker(self, worker_id: str, concurrency: int = 4,
                     queues: str = "default", token: str | None = None,
                     extra_args: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
        """A worker with `token` (default: the worker token) in its environment, or, when
        `extra_args` holds `--token-file`, with none there."""
        log = open(self.root / f"worker-{worker_id}.log", "ab")
        env = {**os.environ, **self.worker_env}
        env.pop("RAFTCRON_TOKEN", None)
        if "--token-file" not in extra_args:
            env["RAFTCRON_TOKEN"] = token or self.worker_token
        proc = subprocess.Popen(
            [sys.executable, "-m", "raftcron", "worker", "--server",
             ",".join(self.urls.values()), "--id", worker_id, "--concurrency",
             str(concurrency), "--queues", queues, *extra_args],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )
        self.workers.append(proc)
        return proc

    def kill(self, nid: str) -> None:
        proc = self.procs.pop(nid)
        proc.kill()
        proc.wait()

    def signal(self, nid: str, sig: int) -> None:
        self.procs[nid].send_signal(sig)

    def stop_all(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.workers.clear()
        for nid in list(self.procs):
            proc = self.procs[nid]
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()
        self.procs.clear()

    def close(self) -> None:
        self.stop_all()
        self.http.close()

    # --- API ---
    def get(self, nid: str, path: str, **kw: Any) -> Any:
        return self.http.get(self.urls[nid] + path, **kw).json()

    def post(self, nid: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        return self.http.post(self.urls[nid] + path, json=body, **kw)

    def cluster_view(self, nid: str) -> dict[str, Any] | None:
        try:
            return self.http.get(self.urls[nid] + "/v1/cluster", timeout=1).json()
        except httpx.HTTPError:
            return None

    def leader(self, among: list[str] | None = None) -> str | None:
        """The node that leads with its duties running, as it reports itself, once its
        cluster committed `ready_level`."""
        for nid in among or list(self.procs):
            view = self.cluster_view(nid)
            if view and view["role"] == "leader" and view["leader_duties"] and (
                    self.ready_level is None
                    or view.get("cluster_level", 0) >= self.ready_level):
                return nid
        return None

    def wait_leader(self, timeout: float = 20, among: list[str] | None = None) -> str:
        return wait_until(lambda: self.leader(among), timeout, message="a leader with duties")

    def wait_serving(self, timeout: float = 30) -> None:
        """Until every running node answers HTTP (a follower may bind after the election).
        A timeout names the silent nodes, whether each process still runs, and the end of
        its log (a port taken meanwhile by another process shows there)."""
        try:
            wait_until(lambda: all(self.cluster_view(n) is not None for n in self.procs),
                       timeout, message="every node answering HTTP")
        except TimeoutError as e:
            raise TimeoutError(f"{e}: {self._silent_nodes()}") from None

    def _silent_nodes(self) -> str:
        out = []
        for nid, proc in self.procs.items():
            try:
                if self.cluster_view(nid) is not None:
                    continue
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            code = proc.poll()
            log_file = self.root / f"{nid}.log"
            tail = (log_file.read_text(errors="replace").splitlines()[-5:]
                    if log_file.exists() else [])
            out.append(f"{nid} at {self.urls[nid]} "
                       f"({'running' if code is None else f'exited {code}'}); log: {tail}")
        return "; ".join(out) or "all answer now"

    def followers(self) -> list[str]:
        leader = self.leader()
        return [n for n in self.procs if n != leader]

    def digests(self) -> dict[str, dict[str, Any]]:
        return {nid: self.get(nid, "/v1/digest") for nid in self.procs}

    def wait_converged(self, timeout: float = 30) -> dict[str, dict[str, Any]]:
        """Until every node has reported the same applied index, compared at that index.

        Nodes that keep applying (a ticking leader) are seldom at one index at the same
        poll, so every (index, digest) a node reports during this call is kept, and the
        newest index that all of them reported decides: equal digests there return them;
        different ones are a divergence and fail at once."""
        seen: dict[str, dict[int, str]] = {}

        def same() -> dict[str, dict[str, Any]] | None:
            for nid, v in self.digests().items():
                seen.setdefault(nid, {})[int(v["last_applied_index"])] = v["digest"]
            if set(seen) != set(self.procs):
                return None
            common = set.intersection(*(set(seen[n]) for n in self.procs))
            if not common:
                return None
            index = max(common)
            at = {n: seen[n][index] for n in self.procs}
            if len(set(at.values())) != 1:
                raise AssertionError(f"digests differ at applied index {index}: {at}")
            return {n: {"node_id": n, "last_applied_index": index, "digest": at[n]}
                    for n in self.procs}

        return wait_until(same, timeout, interval=0.3, message="equal digests on all nodes")

    def occurrences(self, nid: str, job_id: str | None = None,
                    **filters: str) -> list[dict[str, Any]]:
        """Every occurrence matching the API filters, following the cursor."""
        out: list[dict[str, Any]] = []
        query: dict[str, Any] = {**filters, "limit": 500}
        if job_id is not None:
            query["job_id"] = job_id
        while True:
            page = self.get(nid, "/v1/occurrences", params=query)
            out += page["occurrences"]
            if not page["next_cursor"]:
                return out
            query["cursor"] = page["next_cursor"]


def self_signed_cert(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A self-signed certificate for `host` (an IP address), valid for a day: the
    certificate and key files written into `directory`."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(host))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "node-cert.pem", directory / "node-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path
