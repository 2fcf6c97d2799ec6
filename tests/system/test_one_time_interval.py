"""One-time and interval schedules on real nodes and a real worker: a one-time job fires
exactly once and then shows done, also when the cluster was down at its instant (its
misfire policy decides); an interval fires at anchor + k x every; beside a cron schedule,
each instant of the union fires once."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job, serving_cluster

pytestmark = pytest.mark.system


def iso_s(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def local_berlin(t: float) -> str:
    """The wall-clock time in Berlin at the instant `t`, without an offset."""
    from zoneinfo import ZoneInfo
    return datetime.fromtimestamp(t, ZoneInfo("Europe/Berlin")).strftime("%Y-%m-%dT%H:%M:%S")


def cli(c: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAFTCRON_TOKEN": c.admin_token}
    return subprocess.run([sys.executable, "-m", "raftcron", *args, "--server",
                           ",".join(c.urls.values())], capture_output=True, text=True,
                          env=env, timeout=60)


def scheduled(c: LocalCluster, job_id: str) -> list[dict]:
    return [o for o in c.occurrences(c.leader() or "n1", job_id) if o["kind"] == "scheduled"]


def test_a_one_time_job_fires_once_and_then_shows_done(tmp_path: Path) -> None:
    with serving_cluster(tmp_path / "c") as c:
        c.start_worker("w1", concurrency=2)
        instant = math.ceil(time.time()) + 4
        added = cli(c, "job", "add", "once", "--at", local_berlin(instant), "--tz",
                    "Europe/Berlin", "--shell", "echo once")
        assert added.returncode == 0, added.stderr
        leader = c.leader() or "n1"
        job = c.get(leader, "/v1/jobs/once")
        assert job["done"] is False
        assert [f["utc"] for f in job["next_fire_times"]] == [
            datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")]
        [occ] = wait_until(lambda: [o for o in scheduled(c, "once")
                                    if o["status"] == "succeeded"], 30,
                           message="the one-time run to succeed")
        assert iso_s(occ["scheduled_for"]) == instant
        time.sleep(3)  # a later tick claims nothing more
        assert len(scheduled(c, "once")) == 1
        job = c.get(c.leader() or "n1", "/v1/jobs/once")
        assert job["done"] is True and job["next_fire_times"] == []
        listed = cli(c, "job", "list")
        assert "at " + local_berlin(instant) in listed.stdout, listed.stdout


def test_a_one_time_instant_the_cluster_was_down_for_follows_the_misfire_policy(
        tmp_path: Path) -> None:
    c = LocalCluster(tmp_path / "c")
    c.start()
    try:
        leader = c.wait_leader(timeout=30)
        instant = math.ceil(time.time()) + 6
        at = datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for policy in ("skip", "run_once"):
            add_job(c, leader, f"once-{policy}", schedule={"at": at},
                    misfire_policy=policy, misfire_grace_s=1)
        c.stop_all()
        # Down across the instant, on purpose: started again only well after it.
        wait_until(lambda: time.time() > instant + 5, 30, message="the instant to pass")
        c.start()
        leader = c.wait_leader(timeout=30)
        occs = {p: wait_until(lambda p=p: scheduled(c, f"once-{p}"), 30,
                              message=f"the {p} job's instant to be recorded")
                for p in ("skip", "run_once")}
        assert [(o["scheduled_for"], o["status"], o["reason"]) for o in occs["skip"]] == [
            (at, "skipped", "misfire")]
        assert [o["scheduled_for"] for o in occs["run_once"]] == [at]
        assert occs["run_once"][0]["reason"] != "misfire"
        for p in ("skip", "run_once"):
            assert c.get(leader, f"/v1/jobs/once-{p}")["done"] is True
        c.wait_converged()
    finally:
        c.close()


def test_an_interval_fires_at_its_phase_and_beside_cron_each_instant_once(
        tmp_path: Path) -> None:
    with serving_cluster(tmp_path / "c") as c:
        c.start_worker("w1", concurrency=4)
        leader = c.leader() or "n1"
        anchor = math.ceil(time.time()) + 1  # an odd phase: whatever second that is
        add_job(c, leader, "every3", schedule={
            "every": "3s", "anchor": datetime.fromtimestamp(anchor, UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ")})
        resp = c.post(leader, "/v1/jobs", {"id": "union", "target": {"shell": "true"},
                                           "schedules": [{"cron": "*/2 * * * * *",
                                                          "name": "even"},
                                                         {"every": 3, "name": "thirds"}]})
        assert resp.status_code == 201, resp.text
        started = time.time()
        time.sleep(10)
        window = (started + 2, time.time() - 2)
        fired = sorted(iso_s(o["scheduled_for"]) for o in scheduled(c, "every3"))
        assert len(fired) == len(set(fired))
        assert all((t - anchor) % 3 == 0 for t in fired), fired
        inside = [t for t in fired if window[0] <= t <= window[1]]
        expected = [t for t in range(math.ceil(window[0]), math.floor(window[1]) + 1)
                    if (t - anchor) % 3 == 0]
        assert inside == expected
        union = scheduled(c, "union")
        instants = [iso_s(o["scheduled_for"]) for o in union]
        assert len(instants) == len(set(instants)), "an instant of both schedules fired twice"
        expected = [t for t in range(math.ceil(window[0]), math.floor(window[1]) + 1)
                    if t % 2 == 0 or t % 3 == 0]
        assert sorted(t for t in instants if window[0] <= t <= window[1]) == expected
        both = [o for o in union if iso_s(o["scheduled_for"]) % 6 == 0]
        assert both and all(sorted(o["schedules"]) == ["even", "thirds"] for o in both)
