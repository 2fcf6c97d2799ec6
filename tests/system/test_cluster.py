"""Real node processes, real sockets, real SQLite files."""

from __future__ import annotations

import signal
import time
from datetime import datetime

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job, assert_every_second_once, ts


def ts_ms(iso: str) -> int:
    return round(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)

pytestmark = pytest.mark.system


def test_jobs_created_through_a_follower_fire_once_per_instant(cluster: LocalCluster) -> None:
    follower = cluster.followers()[0]
    add_job(cluster, follower, "tick")
    add_job(cluster, follower, "tick2", cron="*/2 * * * * *")
    time.sleep(5)
    occs = cluster.occurrences(follower, "tick")
    instants = assert_every_second_once(occs)
    assert len(instants) >= 3
    two = [ts(o["scheduled_for"]) for o in cluster.occurrences(follower, "tick2")]
    assert two and all(t % 2 == 0 for t in two) and len(set(two)) == len(two)
    cluster.wait_converged()


def test_leader_sigkill_fails_over_within_seconds_without_dups_or_holes(
        cluster: LocalCluster) -> None:
    leader = cluster.wait_leader()
    add_job(cluster, leader, "tick")
    time.sleep(2)
    killed_at = time.time()
    cluster.kill(leader)
    new_leader = cluster.wait_leader(timeout=10)
    elected_after = time.time() - killed_at
    assert new_leader != leader
    assert elected_after < 5, f"new leader took {elected_after:.2f}s"
    time.sleep(3)
    occs = cluster.occurrences(new_leader, "tick")
    instants = assert_every_second_once(occs)
    # Every second across the kill is accounted for.
    assert instants[0] < killed_at - 1 and instants[-1] > killed_at + 2
    epochs = {o["epoch"] for o in occs}
    assert len(epochs) >= 2
    cluster.wait_converged()


def test_follower_kill9_under_load_catches_up_with_equal_digest(cluster: LocalCluster) -> None:
    leader = cluster.wait_leader()
    for i in range(20):
        add_job(cluster, leader, f"load{i}")
    follower = cluster.followers()[0]
    time.sleep(1.5)
    cluster.kill(follower)
    time.sleep(3)
    cluster.start(follower)
    digests = cluster.wait_converged(timeout=40)
    assert len(digests) == 3
    assert_every_second_once(cluster.occurrences(follower, "load3"))


@pytest.mark.parametrize("down_s", [12])
def test_whole_cluster_down_applies_each_misfire_policy(tmp_path, down_s: int) -> None:
    c = LocalCluster(tmp_path)
    c.start()
    try:
        leader = c.wait_leader(timeout=30)
        grace = 2
        for policy in ("skip", "run_once", "catch_up"):
            add_job(c, leader, f"m-{policy}", misfire_policy=policy, misfire_grace_s=grace,
                    catch_up_max=3)
        time.sleep(2.5)
        c.stop_all()
        stopped_at = time.time()
        time.sleep(down_s)
        c.start()
        leader = c.wait_leader(timeout=30)
        restarted_at = time.time()
        time.sleep(3)
        for policy in ("skip", "run_once", "catch_up"):
            occs = c.occurrences(leader, f"m-{policy}")
            # every instant recorded, across the outage
            assert_every_second_once(occs, covering=(stopped_at, restarted_at))
            # Missed = claimed more than the grace after the instant (the claim's own time,
            # as the policy sees it); the outage guarantees many of them.
            missed = sorted((o for o in occs if ts_ms(o["created_at"])
                             - ts_ms(o["scheduled_for"]) > grace * 1000),
                            key=lambda o: o["scheduled_for"])
            assert len(missed) >= down_s - 2 * grace - 2, len(missed)
            fired = [o["scheduled_for"] for o in missed if o["reason"] != "misfire"]
            keep = {"skip": 0, "run_once": 1, "catch_up": 3}[policy]
            # run_once: exactly the latest missed instant fires; catch_up: exactly the
            # latest three; skip: none. Every other missed instant is a recorded skip.
            latest = [o["scheduled_for"] for o in missed][max(0, len(missed) - keep):]
            assert fired == latest, (policy, fired, latest)
            skipped = [o for o in missed if o["reason"] == "misfire"]
            assert len(skipped) == len(missed) - keep
            assert all(o["status"] == "skipped" for o in skipped)
        c.wait_converged()
    finally:
        c.close()


def test_schedule_edit_mid_stream_takes_effect_without_refiring(cluster: LocalCluster) -> None:
    leader = cluster.wait_leader()
    add_job(cluster, leader, "edit")
    time.sleep(3)
    job = cluster.get(leader, "/v1/jobs/edit")
    body = {"id": "edit", "schedule": {"cron": "*/3 * * * * *"}, "target": {"shell": "true"}}
    resp = cluster.http.put(cluster.urls[leader] + "/v1/jobs/edit", json=body,
                            headers={"If-Match": str(job["version"])})
    assert resp.status_code == 200, resp.text
    edited_at = time.time()
    stale = cluster.http.put(cluster.urls[leader] + "/v1/jobs/edit", json=body,
                             headers={"If-Match": str(job["version"])})
    assert stale.status_code == 412
    time.sleep(7)
    occs = cluster.occurrences(leader, "edit")
    ids = [o["id"] for o in occs]
    assert len(ids) == len(set(ids))
    after = [o for o in occs if ts(o["scheduled_for"]) > edited_at + 1.5]
    assert after and all(ts(o["scheduled_for"]) % 3 == 0 for o in after)
    assert {o["job_version"] for o in after} == {2}
    before = [o for o in occs if o["job_version"] == 1]
    assert len(before) >= 2


def test_paused_leader_resumes_without_double_firing(cluster: LocalCluster) -> None:
    leader = cluster.wait_leader()
    add_job(cluster, leader, "tick")
    time.sleep(2)
    old_epoch = cluster.get(leader, "/v1/cluster")["epoch"]
    paused_at = time.time()
    cluster.signal(leader, signal.SIGSTOP)
    others = [n for n in cluster.procs if n != leader]
    new_leader = cluster.wait_leader(timeout=10, among=others)
    time.sleep(2)
    cluster.signal(leader, signal.SIGCONT)
    resumed_at = time.time()
    time.sleep(3)
    # The old leader learnt of the new term and stopped ticking.
    view = wait_until(lambda: (v := cluster.cluster_view(leader)) and v["role"] != "leader"
                      and v, 10, message="old leader to step down")
    assert view["leader_duties"] is False
    occs = cluster.occurrences(new_leader, "tick")
    # Firing went on through the pause and after the resume: every second from before the
    # pause to seconds after SIGCONT, once.
    assert_every_second_once(occs, covering=(paused_at - 1, resumed_at + 2))
    after = [o for o in occs if ts(o["scheduled_for"]) > resumed_at + 1]
    assert after and all(o["epoch"] > old_epoch for o in after), [
        (o["scheduled_for"], o["epoch"]) for o in after]
    cluster.wait_converged()
    assert cluster.get(new_leader, "/v1/cluster")["epoch"] > old_epoch
