"""No other local user can read a cluster's files (issue 40 §5): after `raftcron up`, a
backup and a restore, every file under the data directories and the backup is mode 0600
and every directory 0700. Every process here starts under umask 022, the usual default,
with which the state, the journal, the snapshot, the backup and the restored directories
used to be readable by everyone."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from raftcron.ops.local import wait_for_leader, write_cluster_configs
from raftcron.testing import free_port_base, wait_until
from tests.system.helpers import as_from_a_terminal

pytestmark = pytest.mark.system

NODES = ("n1", "n2", "n3")


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    """This process and every process it starts (they inherit it) under umask 022."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def modes_under(root: Path) -> dict[str, int]:
    """The mode of `root` and of every directory and file under it, by relative path
    (a file that disappears while the walk runs, such as a backup being streamed, is
    skipped)."""
    out = {".": stat.S_IMODE(root.lstat().st_mode)}
    for top, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = os.path.join(top, name)
            try:
                out[os.path.relpath(path, root)] = stat.S_IMODE(os.lstat(path).st_mode)
            except FileNotFoundError:
                continue
    return out


def assert_private(root: Path, expected: set[str]) -> None:
    """Every directory under `root` is 0700 and every file 0600; `expected` are there."""
    found = modes_under(root)
    loose = {p: oct(m) for p, m in found.items()
             if m != (0o700 if (root / p).is_dir() else 0o600)}
    assert not loose, f"readable by others under {root}: {loose}"
    assert expected <= set(found), f"missing under {root}: {expected - set(found)}"


def node_files(*names: str) -> set[str]:
    return {f"{nid}/{name}" for nid in NODES for name in names}


def start_up(root: Path, base: int, out: Path) -> subprocess.Popen[bytes]:
    with open(out, "ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "raftcron", "up", "--data-dir", str(root), "--port-base",
             str(base)], stdout=sink, stderr=subprocess.STDOUT, preexec_fn=as_from_a_terminal)


def wait_started(up: subprocess.Popen[bytes], root: Path, base: int, out: Path) -> str:
    """The admin token, once the cluster of `up` has a leader."""
    wait_until(lambda: b"Ctrl-C stops" in out.read_bytes() or up.poll() is not None, 60,
               message="the cluster to start")
    assert up.poll() is None, out.read_text()
    token = (root / "admin.token").read_text().strip()
    urls = [f"http://127.0.0.1:{base + i}" for i in range(len(NODES))]
    assert wait_for_leader(urls, token, lambda: False, 45), "a leader"
    return token


def stop_up(up: subprocess.Popen[bytes]) -> None:
    if up.poll() is None:
        up.send_signal(signal.SIGINT)
    assert up.wait(30) == 0


def cli(token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAFTCRON_TOKEN": token}
    return subprocess.run([sys.executable, "-m", "raftcron", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def occurrences(base: int, token: str, job_id: str) -> list[dict]:
    resp = httpx.get(f"http://127.0.0.1:{base}/v1/occurrences",
                     params={"job_id": job_id, "limit": 500},
                     headers={"Authorization": f"Bearer {token}"}, timeout=5)
    resp.raise_for_status()
    return list(resp.json()["occurrences"])


def test_up_a_backup_and_a_restore_leave_no_file_others_can_read(tmp_path: Path) -> None:
    a, base_a = tmp_path / "a", free_port_base(len(NODES))
    # The configs `up` writes on its first run (it keeps them), with compaction after 20
    # entries so that every node writes its snapshot file during the test too.
    for config in write_cluster_configs(a, len(NODES), base_a):
        config.write_text(config.read_text().replace(
            "[raft]\n", "[raft]\nlogCompactionMinEntries = 20\n"))
    up = start_up(a, base_a, tmp_path / "a.out")
    try:
        token = wait_started(up, a, base_a, tmp_path / "a.out")
        job = {"id": "tick", "schedule": {"cron": "* * * * * *"},
               "target": {"http": {"url": "http://127.0.0.1:9/", "headers": {
                   "Authorization": "Bearer what-the-state-holds"}}}}

        def add_job() -> httpx.Response | None:
            """The answer, or None for a 503 (a node that just started may not know the
            cluster's confirmed time yet: it says retry)."""
            resp = httpx.post(f"http://127.0.0.1:{base_a}/v1/jobs", json=job, timeout=10,
                              headers={"Authorization": f"Bearer {token}"})
            return None if resp.status_code == 503 else resp

        resp = wait_until(add_job, 30, interval=0.5, message="the job to be added")
        assert resp.status_code == 201, resp.text
        wait_until(lambda: all((a / nid / "raft.snapshot").exists() for nid in NODES), 90,
                   interval=0.5, message="a snapshot on every node")
        backups = tmp_path / "backups"
        backups.mkdir()
        backup = backups / "state.db"
        urls = ",".join(f"http://127.0.0.1:{base_a + i}" for i in range(len(NODES)))
        res = cli(token, "backup", "--server", urls, "--out", str(backup))
        assert res.returncode == 0, res.stderr
        assert stat.S_IMODE(backup.stat().st_mode) == 0o600
        # --force replaces the file with a private one as well.
        os.chmod(backup, 0o644)
        res = cli(token, "backup", "--server", urls, "--out", str(backup), "--force")
        assert res.returncode == 0, res.stderr
        assert stat.S_IMODE(backup.stat().st_mode) == 0o600
        written_by_up = {"cluster.secret", "tokens.json", "admin.token", "worker.token",
                         "n1.toml", "n2.toml", "n3.toml", "n1.log", "n2.log", "n3.log",
                         "worker1.log", *NODES}
        written_by_nodes = node_files("state.db", "state.db-wal", "state.db-shm",
                                      "raft.journal", "raft.journal.meta", "raft.snapshot")
        assert_private(a, written_by_up | written_by_nodes | {"n1/token-usage.json"})
    finally:
        stop_up(up)
    assert_private(a, written_by_up | node_files("state.db", "raft.journal",
                                                 "raft.snapshot"))

    # Restore into the data directories of a new cluster, as the README says: the configs
    # first (what `up` keeps), then every node's directory from the backup.
    b, base_b = tmp_path / "b", free_port_base(len(NODES))
    write_cluster_configs(b, len(NODES), base_b)
    for nid in NODES:
        res = cli("", "restore", "--from", str(backup), "--data-dir", str(b / nid))
        assert res.returncode == 0, res.stderr
    assert_private(b, node_files("state.db", "raft.journal.meta"))
    # Directories restore creates on the way are private too, not only the last one.
    nested = tmp_path / "nested"
    res = cli("", "restore", "--from", str(backup), "--data-dir",
              str(nested / "srv" / "raftcron" / "n1"))
    assert res.returncode == 0, res.stderr
    assert_private(nested, {"srv", "srv/raftcron", "srv/raftcron/n1",
                            "srv/raftcron/n1/state.db"})

    up = start_up(b, base_b, tmp_path / "b.out")
    try:
        token_b = wait_started(up, b, base_b, tmp_path / "b.out")
        restored = wait_until(lambda: len(occurrences(base_b, token_b, "tick")), 30,
                              message="the restored history")
        wait_until(lambda: len(occurrences(base_b, token_b, "tick")) > restored + 2, 30,
                   message="the restored cluster to fire")
        assert_private(b, written_by_up | node_files("state.db", "state.db-wal",
                                                     "raft.journal", "raft.journal.meta"))
    finally:
        stop_up(up)
    assert_private(b, written_by_up)
