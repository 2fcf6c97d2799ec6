"""Pre-vote on real node processes: a follower cut off or paused for several election
timeouts comes back without raising the term or deposing the leader.

The network cut drops, with nftables on the loopback interface, every packet of the
follower's Raft connections (its own Raft port, and the ports of the connections it
opened to its peers), in a table of its own that is deleted afterwards; the HTTP ports
stay reachable, so the test can watch the follower during the cut. It needs root and
`nft`, like the chaos suite.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job

pytestmark = pytest.mark.system

# Several election timeouts (raftMaxTimeout is 0.6 s).
OUT_S = 4.0


def _metric(c: LocalCluster, nid: str, name: str) -> float | None:
    text = c.http.get(c.urls[nid] + "/metrics").text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found[1]) if found else None


def _raft_port(c: LocalCluster, nid: str) -> int:
    text = c.configs[c.ids.index(nid)].read_text()
    found = re.search(r'^raft_addr = "[^"]*:(\d+)"', text, re.M)
    assert found, text
    return int(found[1])


def _raft_connection_ports(c: LocalCluster, nid: str) -> set[int]:
    """Local ports of the TCP connections process `nid` opened to its peers' Raft ports."""
    peers = {_raft_port(c, other) for other in c.ids if other != nid}
    pid = c.procs[nid].pid
    out = subprocess.run(["ss", "-tnpH", "state", "established"], check=True,
                         capture_output=True, text=True).stdout
    ports = set()
    for line in out.splitlines():
        if f"pid={pid}," not in line:
            continue
        local, peer = line.split()[2:4]
        if int(peer.rpartition(":")[2]) in peers:
            ports.add(int(local.rpartition(":")[2]))
    return ports


def _need_nft() -> None:
    message = ""
    if os.geteuid() != 0:
        message = "needs root (nftables)"
    elif shutil.which("nft") is None or shutil.which("ss") is None:
        message = "needs nft and ss (apt-get install -y nftables iproute2)"
    if not message:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and the network cut {message}")
    pytest.skip(message)


@contextmanager
def raft_cut(c: LocalCluster, nid: str) -> Iterator[None]:
    """Drop every packet of `nid`'s Raft connections, both ways, until the block ends."""
    ports = {_raft_port(c, nid)} | _raft_connection_ports(c, nid)
    table = f"rc_prevote_{os.getpid()}_{nid}"
    listed = ", ".join(str(p) for p in sorted(ports))
    ruleset = (f"table inet {table} {{\n  chain input {{\n"
               "    type filter hook input priority 0; policy accept;\n"
               f"    tcp sport {{ {listed} }} drop\n    tcp dport {{ {listed} }} drop\n"
               "  }\n}\n")
    subprocess.run(["nft", "-f", "-"], input=ruleset, text=True, check=True)
    try:
        yield
    finally:
        subprocess.run(["nft", "delete", "table", "inet", table], check=False)


def _views(c: LocalCluster) -> dict[str, dict[str, Any]]:
    views = {nid: c.cluster_view(nid) for nid in c.procs}
    assert all(views.values()), views
    return views  # type: ignore[return-value]


def _views_at_one_term(c: LocalCluster) -> dict[str, dict[str, Any]] | None:
    views = _views(c)
    return views if len({v["term"] for v in views.values()}) == 1 else None


def _assert_rejoined_without_election(c: LocalCluster, leader: str, follower: str,
                                      before: dict[str, dict[str, Any]]) -> None:
    # Back in step: the follower applies what the leader committed meanwhile.
    wait_until(lambda: (_views(c)[follower]["commit_index"] or 0)
               >= (_views(c)[leader]["commit_index"] or 0) - 5, 20,
               message=f"{follower} catching up")
    time.sleep(1.0)  # an election it would provoke happens within this
    after = _views(c)
    for nid in c.procs:
        assert after[nid]["term"] == before[nid]["term"], (nid, before, after)
        assert after[nid]["leader_id"] == leader, (nid, after)
        assert after[nid]["epoch"] == before[nid]["epoch"], (nid, before, after)
    assert after[leader]["role"] == "leader" and after[leader]["leader_duties"]
    epochs = {o["epoch"] for o in c.occurrences(leader, "tick")}
    assert epochs == {before[leader]["epoch"]}, epochs
    c.wait_converged()


def _start_ticking(c: LocalCluster) -> tuple[str, str, dict[str, dict[str, Any]]]:
    leader = c.wait_leader()
    add_job(c, leader, "tick")  # one command a second at least: commits keep flowing
    time.sleep(1.5)
    follower = c.followers()[0]
    return leader, follower, _views(c)


def test_follower_cut_off_for_several_timeouts_rejoins_without_raising_the_term(
        cluster: LocalCluster) -> None:
    _need_nft()
    leader, follower, before = _start_ticking(cluster)
    rounds_before = _metric(cluster, follower, "raftcron_pre_vote_rounds_total")
    elections_before = _metric(cluster, follower, "raftcron_elections_started_total")
    with raft_cut(cluster, follower):
        cut_commit = _views(cluster)[follower]["commit_index"]
        time.sleep(OUT_S)
        during = _views(cluster)
        # The cut is real: the leader committed on without the follower, which saw none
        # of it.
        assert during[follower]["commit_index"] == cut_commit, during
        assert during[leader]["commit_index"] > cut_commit + 2, during
        assert during[leader]["term"] == before[leader]["term"]
    _assert_rejoined_without_election(cluster, leader, follower, before)
    # Its election timer fired again and again; it asked, and never raised its term.
    rounds = _metric(cluster, follower, "raftcron_pre_vote_rounds_total")
    assert rounds is not None and rounds_before is not None
    assert rounds >= rounds_before + 3, (rounds_before, rounds)
    assert _metric(cluster, follower, "raftcron_elections_started_total") == elections_before


def test_follower_paused_for_several_timeouts_rejoins_without_raising_the_term(
        cluster: LocalCluster) -> None:
    leader, follower, before = _start_ticking(cluster)
    cluster.signal(follower, signal.SIGSTOP)
    try:
        time.sleep(OUT_S)
        during = {nid: cluster.cluster_view(nid) for nid in (leader,)}
        assert during[leader] and during[leader]["leader_id"] == leader
    finally:
        cluster.signal(follower, signal.SIGCONT)
    _assert_rejoined_without_election(cluster, leader, follower, before)


def test_leader_alone_while_both_followers_are_paused_does_not_inflate_the_term(
        cluster: LocalCluster) -> None:
    """Both followers paused for several timeouts: the leader steps down
    (leaderFallbackTimeout) and then waits without raising its term, as nobody answers
    its pre-votes. Once they resume, one election settles it, a term or two later (two
    with a split vote), not one term per election timeout of the pause."""
    leader, _, before = _start_ticking(cluster)
    followers = [n for n in cluster.procs if n != leader]
    step_downs = _metric(cluster, leader, "raftcron_leader_step_downs_total")
    for nid in followers:
        cluster.signal(nid, signal.SIGSTOP)
    try:
        time.sleep(OUT_S)
        alone = cluster.cluster_view(leader)
        assert alone is not None and alone["role"] != "leader", alone
        assert alone["term"] == before[leader]["term"], alone
    finally:
        for nid in followers:
            cluster.signal(nid, signal.SIGCONT)
    new_leader = cluster.wait_leader(timeout=15)
    after = wait_until(lambda: _views_at_one_term(cluster), 10, message="one term")
    term = after[new_leader]["term"]
    assert before[leader]["term"] < term <= before[leader]["term"] + 2, (before, after)
    assert after[new_leader]["epoch"] > before[leader]["epoch"]
    assert _metric(cluster, leader, "raftcron_leader_step_downs_total") >= (step_downs or 0) + 1
    log = (cluster.root / f"{leader}.log").read_text()
    assert "within leaderFallbackTimeout" in log
    cluster.wait_converged()


def test_leader_sigkill_still_fails_over_through_pre_vote(cluster: LocalCluster) -> None:
    """The survivors' pre-vote succeeds once the dead leader is silent, and the new leader
    logs why it stood."""
    leader, _, before = _start_ticking(cluster)
    cluster.kill(leader)
    new_leader = cluster.wait_leader(timeout=10)
    assert new_leader != leader
    assert _views(cluster)[new_leader]["term"] > before[new_leader]["term"]
    log = (cluster.root / f"{new_leader}.log").read_text()
    line = [ln for ln in log.splitlines() if "starting an election for term" in ln][-1]
    assert "no append_entries from a leader for" in line and "pre-vote granted by" in line
    assert _metric(cluster, new_leader, "raftcron_elections_started_total") >= 1


def _as_older_version(c: LocalCluster, nid: str) -> None:
    """`nid` behaves as a version without pre-vote: it neither announces nor answers it
    (`preVote = false` in its `[raft]` table, the last table of the generated config)."""
    path = c.configs[c.ids.index(nid)]
    path.write_text(path.read_text().rstrip("\n") + "\npreVote = false\n")


def test_a_peer_without_pre_vote_does_not_block_the_election(tmp_path: Path) -> None:
    """Rolling upgrade: the survivors of a leader kill are one node with pre-vote and one
    without, which never stands itself here (30 s election timeout). The first must win
    its pre-vote by counting the silent older peer, or nobody would lead for 30 s."""
    old = "n1"
    c = LocalCluster(tmp_path)
    _as_older_version(c, old)
    c.set_raft_options(old, raftMinTimeout=30.0, raftMaxTimeout=40.0)
    c.start()
    try:
        leader = c.wait_leader(timeout=30)
        assert leader != old  # it cannot stand within 30 s
        c.wait_serving()
        add_job(c, leader, "tick")
        time.sleep(1.5)
        survivor = next(n for n in c.ids if n not in (old, leader))
        c.kill(leader)
        assert c.wait_leader(timeout=10) == survivor
        log = (tmp_path / f"{survivor}.log").read_text()
        line = [ln for ln in log.splitlines() if "starting an election for term" in ln][-1]
        assert f":{_raft_port(c, old)} (never announced pre-vote" in line, line
        c.wait_converged()
    finally:
        c.close()
