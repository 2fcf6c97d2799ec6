"""Operations: leadership handover on SIGTERM, rolling restarts, membership changes,
backup and restore, retention."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job, assert_every_second_once, ts

pytestmark = pytest.mark.system


def _raft_term(c: LocalCluster, nid: str) -> int:
    view = c.cluster_view(nid)
    assert view is not None
    return int(view["term"])


def test_sigterm_on_the_leader_hands_leadership_over(cluster: LocalCluster) -> None:
    leader = cluster.wait_leader()
    add_job(cluster, leader, "tick")
    time.sleep(2.5)
    term = _raft_term(cluster, leader)
    proc = cluster.procs[leader]
    signalled_at = time.time()
    cluster.signal(leader, signal.SIGTERM)
    others = [n for n in cluster.ids if n != leader]
    new_leader = cluster.wait_leader(timeout=10, among=others)
    took = time.time() - signalled_at
    assert proc.wait(timeout=15) == 0
    cluster.procs.pop(leader)
    log = (cluster.root / f"{leader}.log").read_text()
    assert "leadership handed over" in log, log[-2000:]
    assert took < 5, f"new leader after {took:.2f}s"
    # A transfer is one election round: the new term is the next one.
    assert _raft_term(cluster, new_leader) == term + 1
    time.sleep(3)
    occs = cluster.occurrences(new_leader, "tick")
    instants = assert_every_second_once(occs)
    assert instants[0] < signalled_at - 1 and instants[-1] > signalled_at + 2
    cluster.wait_converged()


def _ops_cli(c: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAFTCRON_TOKEN": getattr(c, "admin_token", "") or ""}
    return subprocess.run([sys.executable, "-m", "raftcron.cli.ops", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def _scheduled(occs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["scheduled_for"]: o for o in occs if o["kind"] == "scheduled"}


def test_backup_restores_into_a_fresh_cluster_without_refiring(tmp_path: Path) -> None:
    a = LocalCluster(tmp_path / "a")
    a.start()
    try:
        leader = a.wait_leader(timeout=30)
        add_job(a, leader, "tick")
        add_job(a, leader, "paused-one", cron="0 0 1 1 *")
        a.start_worker("w1")
        time.sleep(4)
        before = a.occurrences(leader, "tick")
        backup = tmp_path / "state-backup.db"
        out = _ops_cli(a, "backup", "--server", ",".join(a.urls.values()), "--out",
                       str(backup))
        assert out.returncode == 0, out.stderr
        old_epoch = a.cluster_view(leader)["epoch"]  # type: ignore[index]
    finally:
        a.close()
    backed_up = _scheduled(before)
    # The backup was taken after `before` was read (with a barrier): it has those instants.
    assert backed_up and any(o["status"] == "succeeded" for o in backed_up.values())

    b = LocalCluster(tmp_path / "b")
    for nid in b.ids:
        res = _ops_cli(b, "restore", "--from", str(backup), "--data-dir",
                       str(tmp_path / "b" / nid))
        assert res.returncode == 0, res.stderr
    # A data dir that already holds state is refused.
    again = _ops_cli(b, "restore", "--from", str(backup), "--data-dir",
                     str(tmp_path / "b" / "n1"))
    assert again.returncode == 2 and "already holds node state" in again.stderr
    b.start()
    try:
        leader = b.wait_leader(timeout=30)
        jobs = {j["id"] for j in b.get(leader, "/v1/jobs")["jobs"]}
        assert jobs == {"tick", "paused-one"}
        time.sleep(3)
        after = b.occurrences(leader, "tick")
        restored = _scheduled(after)
        # Old history is visible unchanged, old instants were not fired again, new ones fire.
        for when, occ in backed_up.items():
            assert restored[when]["id"] == occ["id"]
            assert restored[when]["created_at"] == occ["created_at"]
            if occ["status"] == "succeeded":
                assert restored[when] == occ
        assert_every_second_once(after)
        new = [o for o in restored.values() if o["epoch"] > old_epoch]
        assert len(new) >= 2
        assert min(o["scheduled_for"] for o in new) > max(backed_up)
        assert b.cluster_view(leader)["epoch"] > old_epoch  # type: ignore[index]
        b.wait_converged()
    finally:
        b.close()


def test_retention_prunes_finished_history_on_every_node(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("RAFTCRON_RETENTION", "3s")
    c = LocalCluster(tmp_path)
    c.start()
    try:
        leader = c.wait_leader(timeout=30)
        add_job(c, leader, "tick")
        c.start_worker("w1")
        time.sleep(8)
        occs = c.occurrences(leader, "tick")
        finished = [o for o in occs if o["status"] in ("succeeded", "skipped", "failed")]
        assert finished, occs
        oldest = min(ts(o["scheduled_for"]) for o in finished)
        # Only the last few seconds of finished history remain.
        assert time.time() - oldest < 3 + 1 + 3, f"oldest finished {time.time() - oldest:.1f}s"
        c.wait_converged()
        for nid in c.ids:
            kept = c.occurrences(nid, "tick")
            assert all(time.time() - ts(o["scheduled_for"]) < 10 for o in kept), nid
    finally:
        c.close()


def _add_node_config(c: LocalCluster, nid: str, index: int, peers: list[str]) -> None:
    """Write `nid`'s config (ports after the cluster's) listing `peers` and register it."""
    http_port, raft_port = c.port_base + index, c.port_base + 100 + index
    head = c.configs[0].read_text().split("[[peers]]", 1)[0]
    lines = []
    for line in head.splitlines():
        key = line.split("=", 1)[0].strip()
        value = {"node_id": f'"{nid}"', "data_dir": f'"{nid}"',
                 "raft_addr": f'"127.0.0.1:{raft_port}"', "http_port": str(http_port)}.get(key)
        lines.append(f"{key} = {value}" if value else line)
    text = "\n".join(lines) + "\n"
    for peer in peers:
        i = c.ids.index(peer)
        text += (f'\n[[peers]]\nid = "{peer}"\nraft_addr = "127.0.0.1:{c.port_base + 100 + i}"'
                 f'\nhttp_url = "{c.urls[peer]}"\n')
    path = c.root / f"{nid}.toml"
    path.write_text(text)
    c.ids.append(nid)
    c.configs.append(path)
    c.urls[nid] = f"http://127.0.0.1:{http_port}"


def test_remove_a_dead_node_and_add_a_fresh_one(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path)
    c.start()
    try:
        leader = c.wait_leader(timeout=30)
        add_job(c, leader, "tick")
        time.sleep(2)
        dead = next(n for n in c.ids if n != leader)
        c.kill(dead)
        alive = [n for n in c.ids if n != dead]
        servers = ",".join(c.urls[n] for n in alive)
        res = _ops_cli(c, "cluster", "remove-node", "--server", servers, "--id", dead)
        assert res.returncode == 0, res.stderr
        # The leader itself cannot be removed (transfer leadership first).
        refused = _ops_cli(c, "cluster", "remove-node", "--server", servers, "--id", leader)
        assert refused.returncode == 2 and "leader" in refused.stderr
        _add_node_config(c, "n4", 3, alive)
        # The new node runs first: the leader adds only a node that answers, proving it
        # holds the cluster secret and has applied nothing yet.
        c.start("n4")
        wait_until(lambda: c.cluster_view("n4"), 30, message="n4 answering")
        res = _ops_cli(c, "cluster", "add-node", "--server", servers, "--id", "n4",
                       "--raft-addr", f"127.0.0.1:{c.port_base + 103}",
                       "--http-url", c.urls["n4"])
        assert res.returncode == 0, res.stderr
        assert "n4 is a member" in res.stderr
        digests = c.wait_converged(timeout=40)
        assert set(digests) == {*alive, "n4"}
        for nid in (*alive, "n4"):
            view = c.get(nid, "/v1/cluster/members")
            assert {(m["id"], m["http_url"]) for m in view["members"]} == {
                (n, c.urls[n]) for n in (*alive, "n4")}, view
        # Adding it again changes nothing and does not tell to wipe a running node.
        again = _ops_cli(c, "cluster", "add-node", "--server", servers, "--id", "n4",
                         "--raft-addr", f"127.0.0.1:{c.port_base + 103}",
                         "--http-url", c.urls["n4"])
        assert again.returncode == 0, again.stderr
        assert "n4 was already a member" in again.stderr
        assert "n4 is a member. Start it" not in again.stderr
        add_job(c, "n4", "tock")
        # Another leader failure: the two survivors (one of them the new node) carry on.
        leader = c.wait_leader()
        killed_at = time.time()
        c.kill(leader)
        survivors = [n for n in (*alive, "n4") if n != leader]
        new_leader = c.wait_leader(timeout=15, among=survivors)
        assert new_leader in survivors
        time.sleep(3)
        instants = assert_every_second_once(c.occurrences(new_leader, "tick"))
        assert instants[-1] > killed_at + 2
        assert len(assert_every_second_once(c.occurrences(new_leader, "tock"))) >= 3
        c.wait_converged()
        view = c.get(new_leader, "/v1/cluster")
        assert {p["id"] for p in view["peers"]} == set(survivors + [leader]) - {new_leader}
    finally:
        c.close()


def _restart(c: LocalCluster, nid: str) -> None:
    proc = c.procs.pop(nid)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    c.start(nid)


def test_rolling_restart_misses_no_tick(cluster: LocalCluster) -> None:
    leader = cluster.wait_leader()
    add_job(cluster, leader, "tick")
    time.sleep(2)
    started = time.time()
    done: set[str] = set()
    # Followers first, the leader last. A restarted follower can still cause an election
    # (pysyncobj has no pre-vote), so the leader is looked up again before each step.
    while True:
        leader = cluster.wait_leader(timeout=15)
        followers = [n for n in cluster.ids if n != leader and n not in done]
        if not followers:
            break
        _restart(cluster, followers[0])
        done.add(followers[0])
        cluster.wait_converged(timeout=30)
        time.sleep(1)
    _restart(cluster, leader)
    new_leader = cluster.wait_leader(timeout=10)
    assert new_leader != leader
    cluster.wait_converged(timeout=30)
    time.sleep(2)
    instants = assert_every_second_once(cluster.occurrences(new_leader, "tick"))
    assert instants[0] < started and instants[-1] > time.time() - 3
    log = (cluster.root / f"{leader}.log").read_text()
    assert "leadership handed over" in log


def test_journal_stays_bounded_by_compaction(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path)
    for path in c.configs:
        path.write_text(path.read_text().replace("[raft]\n",
                                                 "[raft]\nlogCompactionMinEntries = 20\n"))
    c.start()
    try:
        leader = c.wait_leader(timeout=30)
        for i in range(5):
            add_job(c, leader, f"tick{i}")
        c.start_worker("w1")
        journals = [c.root / nid / "raft.journal" for nid in c.ids]

        def sizes() -> list[int]:
            return [p.stat().st_size for p in journals]

        time.sleep(8)
        early = sizes()
        applied_early = c.get(leader, "/v1/digest")["last_applied_index"]
        # Many more entries than one compaction interval (20) go through...
        wait_until(lambda: c.get(leader, "/v1/digest")["last_applied_index"]
                   - applied_early > 60, 60, interval=1.0,
                   message="60 more entries applied")
        late = sizes()
        # ...and every journal file kept its size: compaction rewrites it from the start.
        assert all(lt <= max(2 * e, 1 << 20) for e, lt in zip(early, late, strict=True)), \
            (early, late)
        assert all((c.root / nid / "raft.snapshot").exists() for nid in c.ids)
        c.wait_converged()
    finally:
        c.close()
