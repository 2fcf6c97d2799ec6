"""A rolling upgrade with a node of the previous build in the cluster, on three real nodes.

n3 emulates a node of protocol level 1 on purpose: the test-only
RAFTCRON_TEST_PROTOCOL_LEVEL=1 makes it announce level 1 and stop (exit 70) on any entry
above it, exactly as that build would (tests/integration/test_protocol_levels_machine.py
shows the stop). It is made the first leader on purpose (it starts first, with the
shortest election timeout), then SIGTERM moves leadership onto an upgraded node (Raft
TimeoutNow, as in the README's rolling upgrade) while n3 is down, an unknown member, and
n3 comes back still old. Throughout, no node exits, the upgraded leader writes no
`ConfirmClock`, and calendar and cancel requests get 409 `cluster_not_upgraded`. Then n3
is "upgraded" (restarted without the override): the level rises to 2 on every node and
the features work.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from raftcron.cli.common import EXIT_REFUSED
from raftcron.cluster.levels import TEST_LEVEL_ENV
from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job

pytestmark = pytest.mark.system

OLD = "n3"
UPGRADED = ["n1", "n2"]
CALENDAR = {"timezone": "UTC", "exclude": [{"date": "2030-12-25"}]}


def _db(c: LocalCluster, nid: str) -> Path:
    return c.root / nid / "state.db"


def _confirmations(c: LocalCluster, nid: str) -> int:
    """ConfirmClock entries applied on `nid` (rows of cluster_availability)."""
    conn = sqlite3.connect(f"file:{_db(c, nid)}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM cluster_availability").fetchone()[0])
    finally:
        conn.close()


def _metric(c: LocalCluster, nid: str, name: str) -> float | None:
    text = c.http.get(c.urls[nid] + "/metrics").text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found[1]) if found else None


def _none_exited(c: LocalCluster) -> None:
    for nid, proc in c.procs.items():
        assert proc.poll() is None, f"{nid} exited with {proc.returncode}: " + (
            c.root / f"{nid}.log").read_text()[-3000:]


def _pending_occurrence(c: LocalCluster, nid: str) -> str:
    occs = wait_until(lambda: [o for o in c.occurrences(nid, "held")
                               if o["status"] == "pending"], 20, message="a pending run")
    return str(occs[-1]["id"])


def _succeeded(c: LocalCluster, nid: str) -> list[dict[str, Any]]:
    return [o for o in c.occurrences(nid, "tick") if o["status"] == "succeeded"]


def _leased_ahead(c: LocalCluster, nid: str) -> float:
    return _metric(c, nid, "raftcron_leases_ahead_total") or 0.0


def _expect_not_upgraded(resp: Any, feature: str, level: int = 1) -> None:
    assert resp.status_code == 409, resp.text
    err = resp.json()["error"]
    assert err["code"] == "cluster_not_upgraded", err
    assert err["feature"] == feature and err["cluster_level"] == level, err
    assert err["required_level"] == 2, err
    assert f"cluster not fully upgraded (level {level} of 2)" in err["message"], err


def _views(c: LocalCluster) -> dict[str, dict[str, Any]]:
    return {nid: c.cluster_view(nid) or {} for nid in c.procs}


def _cli(c: LocalCluster, nid: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAFTCRON_TOKEN": c.admin_token}
    return subprocess.run([sys.executable, "-m", "raftcron", *args, "--server", c.urls[nid]],
                          capture_output=True, text=True, timeout=60, env=env)


def _restart(c: LocalCluster, nid: str, *, old: bool) -> None:
    c.signal(nid, signal.SIGTERM)
    assert c.procs[nid].wait(timeout=20) == 0
    c.procs.pop(nid)
    c.node_env[nid] = {TEST_LEVEL_ENV: "1"} if old else {}
    c.start(nid)


def test_an_old_node_keeps_running_until_upgraded_and_then_the_level_rises(
        tmp_path: Path) -> None:
    c = LocalCluster(tmp_path)
    c.ready_level = 1  # the cluster stays at level 1 while n3 is old
    c.node_env[OLD] = {TEST_LEVEL_ENV: "1"}
    # Dispatch ahead is on by default (the configs leave it out): an upgrade with the
    # default config must not lease ahead before level 2 (Lease.ahead_ms).
    c.set_raft_options(OLD, raftMinTimeout=0.3, raftMaxTimeout=0.35)
    for nid in UPGRADED:
        c.set_raft_options(nid, raftMinTimeout=1.5, raftMaxTimeout=2.5)
    try:
        c.start(OLD)
        time.sleep(0.5)
        for nid in UPGRADED:
            c.start(nid)
        assert c.wait_leader(timeout=30) == OLD, "the old node leads first, on purpose"
        c.wait_serving()
        add_job(c, OLD, "tick")
        add_job(c, OLD, "held", queue="nobody")  # its runs stay queued: cancel targets
        # Leases, acknowledging heartbeats and completions all the while: the previous
        # build must read every one of them.
        c.start_worker("w1")

        # Leadership moves onto an upgraded node (SIGTERM: a TimeoutNow transfer) while the
        # old node is down: an unknown member counts as old.
        _restart(c, OLD, old=True)
        leader = c.wait_leader(timeout=20, among=UPGRADED)
        c.wait_serving()
        wait_until(lambda: c.http.get(c.urls[OLD] + "/readyz").status_code == 200, 30,
                   message="n3 caught up")
        time.sleep(4)  # several confirmation and level-check periods of the new leader
        _none_exited(c)
        views = _views(c)
        assert {v["cluster_level"] for v in views.values()} == {1}, views
        assert views[OLD]["protocol_level"] == 1
        assert views[leader]["protocol_level"] == 2
        peers = {p["id"]: p["protocol_level"] for p in views[leader]["peers"]}
        assert peers[OLD] == 1, peers
        assert _metric(c, leader, "raftcron_cluster_level") == 1.0
        ready = c.http.get(c.urls[leader] + "/readyz")
        assert ready.status_code == 200, ready.text  # running as the old build does
        assert "cluster not fully upgraded (level 1 of 2)" in " ".join(
            ready.json()["warnings"]), ready.text
        assert all(_confirmations(c, nid) == 0 for nid in c.procs), "no ConfirmClock"
        _expect_not_upgraded(c.http.put(c.urls[leader] + "/v1/calendars/holidays",
                                        json=CALENDAR), "calendars")
        run_id = _pending_occurrence(c, leader)
        _expect_not_upgraded(c.post(OLD, f"/v1/occurrences/{run_id}/cancel",
                                    {"note": "x"}), "cancel")
        panel = {n["node_id"]: (n["protocol_level"], n["cluster_level"])
                 for n in c.get(leader, "/v1/cluster/nodes")["nodes"]}
        assert panel == {"n1": (2, 1), "n2": (2, 1), OLD: (1, 1)}, panel
        out = _cli(c, leader, "calendar", "put", "holidays", "--date", "2030-12-25")
        assert out.returncode == EXIT_REFUSED, out  # refused by the server, not bad input
        assert out.stderr.count("\n") == 1 and \
            "cluster not fully upgraded (level 1 of 2)" in out.stderr, out.stderr
        job = c.post(leader, "/v1/jobs", {"id": "cal", "schedule": {"cron": "0 0 * * *"},
                                          "target": {"shell": "true"},
                                          "calendars": ["holidays"]})
        _expect_not_upgraded(job, "calendars")
        assert job.json()["error"]["field"] == "calendars"
        succeeded = wait_until(lambda: _succeeded(c, leader), 30, message="runs succeeding")
        time.sleep(2)
        assert len(_succeeded(c, leader)) > len(succeeded), "the cluster keeps running jobs"
        assert _leased_ahead(c, leader) == 0, "nothing leased ahead at level 1"
        _none_exited(c)
        assert "cannot be decoded" not in (c.root / f"{OLD}.log").read_text()

        # Upgrade n3: restarted without the override, it announces level 2.
        _restart(c, OLD, old=False)
        wait_until(lambda: {v.get("cluster_level") for v in _views(c).values()} == {2}, 30,
                   message="cluster level 2 on every node")
        leader = c.wait_leader(timeout=20)
        assert _metric(c, OLD, "raftcron_cluster_level") == 2.0
        assert c.http.get(c.urls[OLD] + "/readyz").json()["warnings"] == []
        resp = c.http.put(c.urls[OLD] + "/v1/calendars/holidays", json=CALENDAR)
        assert resp.status_code == 201, resp.text
        run_id = _pending_occurrence(c, leader)
        resp = c.post(OLD, f"/v1/occurrences/{run_id}/cancel", {"note": "upgraded"})
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "cancelled"
        wait_until(lambda: all(_confirmations(c, nid) > 0 for nid in c.procs), 20,
                   message="ConfirmClock applied on every node")
        wait_until(lambda: _leased_ahead(c, c.leader() or leader) > 0, 30,
                   message="runs leased ahead at level 2")
        _none_exited(c)
        c.wait_converged()
    finally:
        c.close()
