"""Dispatch ahead with real nodes and workers (issue 18 §4), on by default (the nodes'
configs leave `lease_ahead_s` out): a run is leased before its instant and its job process
starts at the instant or after it by the real clock; a worker whose wall clock is 5 s off
the cluster's (moved on purpose with time-machine, as the chaos suite moves clocks) takes
no run ahead, and /metrics says so."""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job, serving_cluster

pytestmark = pytest.mark.system

CLOCK_DIR = Path(__file__).resolve().parents[2] / "chaos" / "clock"
RUN_S = 10


def iso_s(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def starts_job(c: LocalCluster, job_id: str, queue: str, log: Path) -> None:
    # `date` is not Python: the job process reads the real clock whatever the worker's is.
    add_job(c, c.leader() or "n1", job_id, queue=queue, target={
        "shell": f'echo "$RAFTCRON_OCCURRENCE_ID $(date +%s.%N)" >> {log}'})


def runs_of(c: LocalCluster, job_id: str) -> list[dict]:
    nid = c.leader() or "n1"
    body = c.get(nid, f"/v1/occurrences?job_id={job_id}&limit=500&include=attempts")
    return [o for o in body["occurrences"] if o["status"] == "succeeded"]


def metric(c: LocalCluster, nid: str, pattern: str) -> float:
    text = c.http.get(c.urls[nid] + "/metrics").text
    m = re.search(pattern, text, re.M)
    assert m, f"{pattern} missing from /metrics"
    return float(m.group(1))


def started(log: Path) -> dict[str, float]:
    out = {}
    for line in log.read_text().splitlines():
        occ, at = line.split()
        out[occ] = float(at)
    return out


def attempt_rows(c: LocalCluster, occ_id: str) -> list[dict]:
    return c.get(c.leader() or "n1", f"/v1/occurrences/{occ_id}")["attempt_list"]


def test_runs_are_leased_ahead_and_start_at_their_instant(tmp_path: Path) -> None:
    log = tmp_path / "starts.txt"
    log.touch()
    with serving_cluster(tmp_path / "c") as c:
        c.start_worker("good", concurrency=4, queues="ahead")
        starts_job(c, "tick", "ahead", log)
        time.sleep(RUN_S)
        leader = c.wait_leader()
        done = wait_until(lambda: len(r := runs_of(c, "tick")) >= RUN_S - 3 and r, 30,
                          message="the per-second runs to succeed")
        starts = started(log)
        ahead = 0
        for occ in done:
            [a] = [x for x in attempt_rows(c, occ["id"]) if x["status"] == "succeeded"]
            instant = iso_s(occ["scheduled_for"])
            # Never before its instant by the real clock (`date` in the job process).
            assert starts[occ["id"]] >= instant, (occ["id"], starts[occ["id"]] - instant)
            ahead += iso_s(a["leased_at"]) < instant
        # The cluster claims a run about a second ahead: most were leased before it.
        assert ahead >= len(done) // 2, f"only {ahead} of {len(done)} runs leased ahead"
        assert metric(c, leader, r"^raftcron_leases_ahead_total (\S+)$") >= ahead


def test_a_worker_whose_clock_is_off_takes_no_run_ahead(tmp_path: Path) -> None:
    log = tmp_path / "starts.txt"
    log.touch()
    with serving_cluster(tmp_path / "c") as c:
        c.worker_env.update({"PYTHONPATH": str(CLOCK_DIR), "CHAOS_CLOCK_BASE": "5"})
        c.start_worker("skewed", concurrency=4, queues="skewed")
        starts_job(c, "tock", "skewed", log)
        time.sleep(RUN_S)
        leader = c.wait_leader()
        done = wait_until(lambda: len(r := runs_of(c, "tock")) >= RUN_S - 3 and r, 30,
                          message="the skewed worker's runs to succeed")
        starts = started(log)
        for occ in done:
            instant = iso_s(occ["scheduled_for"])
            assert starts[occ["id"]] >= instant
            for a in attempt_rows(c, occ["id"]):
                assert iso_s(a["leased_at"]) >= instant, ("leased ahead", a)
        assert metric(c, leader, r'^raftcron_workers_refusing_ahead\{reason="skewed"\} (\S+)$'
                      ) == 1
        assert metric(c, leader, r'^raftcron_lease_polls_ahead_refused_total'
                      r'\{reason="skewed"\} (\S+)$') >= 1
        assert metric(c, leader, r"^raftcron_leases_ahead_total (\S+)$") == 0
        worker_log = (tmp_path / "c" / "worker-skewed.log").read_text()
        assert "taking no run ahead of its instant: clock skewed" in worker_log
