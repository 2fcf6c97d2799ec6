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
from dataclasses import dataclass, field
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


# One digest mark, read from several nodes: their states compared at one exact index.
# The mark is proposed through one node (`POST /v1/digest/marks`); each node is then asked
# for its digest at it (`GET /v1/digest/marks/{mark}`) until it answers, within one bound
# for all of them. A node that has not applied the mark yet, or is still digesting it,
# answers 404 and is asked again; one that never answers in time, or could not compute
# its digest, is recorded with the error.
READ_TIMEOUT_S = 20.0
# Making a mark can take a proposal's 8 s and the node's own digest wait (10 s,
# api.digest_marks.LOCAL_WAIT_S).
MAKE_TIMEOUT_S = 30.0
POLL_S = 0.2


@dataclass
class MarkReading:
    """What the nodes answered for one mark so far: their final answers ({"index",
    "digest"} or {"error"}), and for the others why not yet, and whether they hold the
    mark (applied it and are still digesting it)."""

    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)
    applied: set[str] = field(default_factory=set)


def make_mark(http: httpx.Client, url: str, timeout_s: float = MAKE_TIMEOUT_S
              ) -> tuple[dict[str, Any] | None, str]:
    """({"mark", "index"}, "") once the node at `url` committed a new mark, or (None, why
    not). Never raises."""
    try:
        resp = http.post(f"{url}/v1/digest/marks", timeout=timeout_s)
        made = resp.json() if resp.status_code == 201 else None
    except (httpx.HTTPError, ValueError) as e:
        return None, f"making the mark: {type(e).__name__}: {e}"
    if not isinstance(made, dict) or not made.get("mark"):
        return None, f"making the mark: HTTP {resp.status_code} {resp.text[:200]}"
    return made, ""


def read_mark(http: httpx.Client, urls: dict[str, str], mark: str, until: float,
              reading: MarkReading | None = None) -> MarkReading:
    """Ask every node of `urls` (node id -> base URL) not answered in `reading` yet for
    its digest at `mark`, until all answered or the monotonic clock reaches `until`."""
    reading = reading or MarkReading()
    reading.waiting = {nid: reading.waiting.get(nid, "not asked")
                       for nid in urls if nid not in reading.answers}
    while reading.waiting:
        for nid in list(reading.waiting):
            answer, problem, applied = _read(http, urls[nid], mark)
            if answer is not None:
                reading.answers[nid] = answer
                del reading.waiting[nid]
            else:
                reading.waiting[nid] = problem
                if applied:
                    reading.applied.add(nid)
        if not reading.waiting or time.monotonic() >= until:
            break
        time.sleep(POLL_S)
    return reading


def compare_at_mark(http: httpx.Client, leader_url: str, urls: dict[str, str],
                    timeout_s: float = READ_TIMEOUT_S,
                    make_timeout_s: float = MAKE_TIMEOUT_S) -> dict[str, Any]:
    """Make a mark through `leader_url` and read it from every node of `urls` (node id ->
    base URL). Never raises: `{"mark", "index", "digests": {node: {"index", "digest"} or
    {"error"}}}`, or `{"error"}` when no mark was made."""
    made, why = make_mark(http, leader_url, make_timeout_s)
    if made is None:
        return {"error": why}
    reading = read_mark(http, urls, made["mark"], time.monotonic() + timeout_s)
    for nid, problem in reading.waiting.items():
        reading.answers[nid] = {"error": f"no digest within {timeout_s:g} s: {problem}"}
    return {"mark": made["mark"], "index": made.get("index"), "digests": reading.answers}


def _read(http: httpx.Client, url: str, mark: str
          ) -> tuple[dict[str, Any] | None, str, bool]:
    """(the node's final answer, or None and why it is not there yet: 404 while the node
    has not applied or digested the mark, 5xx or no answer while it is busy or down;
    whether it applied the mark and is digesting it)."""
    try:
        resp = http.get(f"{url}/v1/digest/marks/{mark}", timeout=2)
        body = resp.json()
    except (httpx.HTTPError, ValueError) as e:
        return None, f"{type(e).__name__}: {e}", False
    if resp.status_code == 404 or resp.status_code >= 500:  # not applied or digested yet
        error = body.get("error") if isinstance(body, dict) else None
        applied = isinstance(error, dict) and "index" in error  # api.digest_marks
        return None, f"HTTP {resp.status_code} {resp.text[:200]}", applied
    if resp.status_code != 200 or not isinstance(body, dict):  # asking again cannot help
        return {"error": f"HTTP {resp.status_code} {resp.text[:200]}"}, "", False
    if body.get("digest") is None:
        return {"index": body.get("index"),
                "error": body.get("error") or "answered without a digest"}, "", False
    return {"index": body.get("index"), "digest": body["digest"]}, "", False


# wait_converged makes a new mark when a node has not even applied the last one this long
# after it was made (a snapshot may have carried the mark past it); a node that applied it
# and is still digesting it (a large state) is waited for, since a new mark would only
# queue behind it.
MARK_RETRY_S = 15.0


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

    def wait_converged(self, timeout: float = 30) -> dict[str, dict[str, Any]]:
        """Until every node in `procs` reports the same digest at one digest mark (a
        paused one too: it never answers, and the wait times out naming it).

        A mark (`POST /v1/digest/marks`, state.digest_marks) is a committed entry, so it
        names one log index, and each node digests its state right as it applies it:
        nodes that keep applying are compared at the same state, whatever moment each is
        asked. (Digests read from `/v1/digest` at the same moment describe different
        indexes on a ticking cluster, and such reads could miss each other's indexes for
        longer than a test waits.) A mark that could not be made (no leader yet) is made
        again; one that a node has not applied MARK_RETRY_S after it was made is followed
        by a new one. Different digests at one mark are a divergence and fail at once.
        Everything ends by `timeout` (give or take one HTTP call). Answers {node:
        {node_id, last_applied_index, digest}}, the index being the mark's."""
        deadline = time.monotonic() + timeout
        last = "no mark made yet"
        while time.monotonic() < deadline:
            via = self._raft_leader() or next(iter(self.procs))
            made, last = make_mark(self.http, self.urls[via],
                                   max(1.0, min(deadline - time.monotonic(), MAKE_TIMEOUT_S)))
            if made is None:
                time.sleep(0.3)
                continue
            urls = {nid: self.urls[nid] for nid in self.procs}
            reading = MarkReading()
            while True:  # this mark, while it can still be read everywhere
                retry_at = time.monotonic() + MARK_RETRY_S
                read_mark(self.http, urls, made["mark"], min(deadline, retry_at), reading)
                digests = {nid: a["digest"] for nid, a in reading.answers.items()
                           if "digest" in a}
                if len(set(digests.values())) > 1:
                    raise AssertionError(f"digests differ at digest mark {made['mark']} "
                                         f"(index {made['index']}): {digests}")
                if len(digests) == len(urls):
                    return {nid: {"node_id": nid, "digest": digest,
                                  "last_applied_index": reading.answers[nid]["index"]}
                            for nid, digest in digests.items()}
                last = "; ".join([f"{nid}: {a['error']}" for nid, a in reading.answers.items()
                                  if "error" in a]
                                 + [f"{nid}: {why}" for nid, why in reading.waiting.items()])
                if (time.monotonic() >= deadline or len(reading.answers) > len(digests)
                        or not set(reading.waiting) <= reading.applied):
                    break  # out of time, a digest failed, or a node never applied it
        raise TimeoutError(f"timed out after {timeout}s waiting for equal digests on all "
                           f"nodes (last try: {last})")

    def _raft_leader(self) -> str | None:
        """The node that reports itself the Raft leader, duties or not."""
        for nid in self.procs:
            view = self.cluster_view(nid)
            if view and view.get("role") == "leader":
                return nid
        return None

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
