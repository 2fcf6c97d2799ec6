"""Times a user can trust, on real nodes and a real worker: each run's recorded start is
within 50 ms of the job's own reading of the clock (`date +%s.%N` in the job process) and
never before its instant; a `sleep 0.2` lasts 0.2 s on the record; no finish precedes its
start or its instant. With dispatch ahead on (runs leased about a second early) and off
(`lease_ahead_s = 0`: leased at their instant)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job, serving_cluster

pytestmark = pytest.mark.system

RUNS = 8
START_TOLERANCE_S = 0.05
SLEEP_S = 0.2
DURATION_TOLERANCE_S = 0.05


def iso_s(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def lease_ahead(seconds: float) -> Callable[[LocalCluster], None]:
    def configure(c: LocalCluster) -> None:
        for path in c.configs:
            path.write_text(f"lease_ahead_s = {seconds}\n" + path.read_text())
    return configure


def finished_runs(c: LocalCluster, job_id: str) -> list[tuple[dict, dict]]:
    """(occurrence, its succeeded attempt) of every finished run of the job."""
    nid = c.leader() or "n1"
    out = []
    for occ in c.get(nid, f"/v1/occurrences?job_id={job_id}&limit=100")["occurrences"]:
        if occ["status"] != "succeeded":
            continue
        attempts = c.get(nid, f"/v1/occurrences/{occ['id']}")["attempt_list"]
        out += [(occ, a) for a in attempts if a["status"] == "succeeded"]
    return out


@pytest.mark.parametrize("ahead_s", [2.0, 0.0], ids=["dispatch-ahead", "at-the-instant"])
def test_the_recorded_start_and_duration_are_the_jobs_own(tmp_path: Path,
                                                           ahead_s: float) -> None:
    with serving_cluster(tmp_path / "c", lease_ahead(ahead_s)) as c:
        c.start_worker("w1", concurrency=4)
        add_job(c, c.leader() or "n1", "clocked", target={
            "shell": f"date +%s.%N; sleep {SLEEP_S}"})
        runs = wait_until(lambda: len(r := finished_runs(c, "clocked")) >= RUNS and r, 60,
                          message=f"{RUNS} runs of the every-second job to succeed")
        leased_early = 0
        for occ, att in runs:
            instant = iso_s(occ["scheduled_for"])
            own = float(att["output"].split()[0])  # the job's own reading at its start
            started, finished = iso_s(att["started_at"]), iso_s(att["finished_at"])
            where = (occ["id"], att)
            assert abs(started - own) <= START_TOLERANCE_S, (where, started - own)
            assert started >= instant, where
            assert own >= instant, where  # the safety: the process really started after
            assert finished >= started and finished >= instant, where
            assert abs(att["duration_s"] - SLEEP_S) <= DURATION_TOLERANCE_S, where
            assert att["duration_s"] == pytest.approx(finished - started, abs=0.002)
            assert iso_s(occ["finished_at"]) >= instant, where
            leased_early += iso_s(att["leased_at"]) < instant
        if ahead_s:  # the condition this case exists for: runs leased before their instant
            assert leased_early >= len(runs) // 2, (leased_early, len(runs))
        else:
            assert leased_early == 0, leased_early


def test_run_show_and_job_runs_print_the_recorded_times(tmp_path: Path) -> None:
    with serving_cluster(tmp_path / "c") as c:
        c.start_worker("w1", concurrency=4)
        add_job(c, c.leader() or "n1", "berlin", schedule={
            "cron": "* * * * * *", "timezone": "Europe/Berlin"}, target={"shell": "true"})
        occ, att = wait_until(lambda: (r := finished_runs(c, "berlin")) and r[0], 60,
                              message="a run of the job to succeed")
        env = {**os.environ, "RAFTCRON_TOKEN": c.admin_token}
        server = ["--server", c.urls[c.leader() or "n1"]]
        shown = subprocess.run(
            [sys.executable, "-m", "raftcron", "run", "show", occ["id"], *server],
            capture_output=True, text=True, env=env, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert f"started {att['started_at']}" in shown.stdout
        assert f"duration {att['duration_s']:.3f}s" in shown.stdout
        runs = subprocess.run(
            [sys.executable, "-m", "raftcron", "job", "runs", "berlin", *server],
            capture_output=True, text=True, env=env, timeout=60)
        assert runs.returncode == 0, runs.stderr
        header = runs.stdout.splitlines()[0]
        assert "instant (UTC)" in header and "instant (Europe/Berlin)" in header
        assert header.count("instant (UTC)") == 1 and "started (UTC)" in header
        assert att["started_at"] in runs.stdout


def test_a_running_runs_start_is_recorded_before_it_ends(tmp_path: Path) -> None:
    """The worker reports a run's start with its heartbeats: `started_at` shows while the
    run goes on, and the completion keeps that start."""
    with serving_cluster(tmp_path / "c") as c:
        c.start_worker("w1", concurrency=2)
        add_job(c, c.leader() or "n1", "long", cron="*/10 * * * * *",
                heartbeat_timeout_s=3, target={"shell": "date +%s.%N; sleep 4"})

        def running_with_start() -> tuple[dict, dict] | None:
            for occ in c.occurrences(c.leader() or "n1", "long", status="running"):
                for att in c.get(c.leader() or "n1",
                                 f"/v1/occurrences/{occ['id']}")["attempt_list"]:
                    if att["status"] == "running" and att["started_at"]:
                        return occ, att
            return None

        occ, running = wait_until(running_with_start, 40,
                                  message="a running attempt with its start recorded")
        assert running["duration_s"] is None
        assert iso_s(running["started_at"]) >= iso_s(occ["scheduled_for"])
        done = wait_until(lambda: next((a for a in c.get(
            c.leader() or "n1", f"/v1/occurrences/{occ['id']}")["attempt_list"]
            if a["id"] == running["id"] and a["status"] == "succeeded"), None), 30,
            message="the run to end")
        assert done["started_at"] == running["started_at"]
        own = float(done["output"].split()[0])
        assert abs(iso_s(done["started_at"]) - own) <= START_TOLERANCE_S
        assert abs(done["duration_s"] - 4) <= 0.3
