"""Cancel, concurrency groups and backfill sharing on three real nodes with real workers,
real shell processes and real SQLite files."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from raftcron.core.timefmt import parse_iso_ms
from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job

pytestmark = pytest.mark.system


def occ(c: LocalCluster, nid: str, occ_id: str) -> dict[str, Any]:
    return c.get(nid, f"/v1/occurrences/{occ_id}")


def cli(c: LocalCluster, nid: str, *args: str, token: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAFTCRON_TOKEN"}
    env["RAFTCRON_TOKEN"] = token or c.admin_token
    return subprocess.run([sys.executable, "-m", "raftcron", *args, "--server", c.urls[nid]],
                          capture_output=True, text=True, timeout=90, env=env)


def ms(iso: str) -> int:
    return parse_iso_ms(iso, "instant")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] == "Z"


def test_cancelling_a_running_run_kills_its_process_group_and_ends_cancelled(
        cluster: LocalCluster, tmp_path: Path) -> None:
    """The job ignores SIGTERM (so does its child, which inherits that): only the SIGKILL
    after the grace period stops it. A follower takes the cancel (it is forwarded)."""
    leader = cluster.wait_leader()
    follower = next(n for n in cluster.ids if n != leader)
    pidfile = tmp_path / "child.pid"
    add_job(cluster, leader, "stubborn", cron="0 0 1 1 *", queue="q-cancel",
            heartbeat_timeout_s=3, max_attempts=3,
            target={"shell": f"trap '' TERM; sleep 300 & echo $! > {pidfile}; wait; wait"})
    occ_id = cluster.post(leader, "/v1/jobs/stubborn/trigger", {}).json()["id"]
    cluster.start_worker("w-cancel", queues="q-cancel")
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 20,
               message="the job to start")
    child = int(pidfile.read_text())
    done = cli(cluster, follower, "run", "cancel", occ_id, "--note", "wrong input file")
    assert done.returncode == 0, done.stderr
    assert "stopping" in done.stdout
    final = wait_until(lambda: (o := occ(cluster, follower, occ_id))["status"] == "cancelled"
                       and o, 40, message="the run to end cancelled")
    assert final["cancellation"]["by"] == "local-admin"
    assert final["cancellation"]["note"] == "wrong input file"
    assert final["reason"] == "cancelled by local-admin"
    [attempt] = final["attempt_list"]  # cancelled: not retried although max_attempts is 3
    assert attempt["status"] == "cancelled" and attempt["cancel_requested"]
    wait_until(lambda: gone(child), 15, message="the job's child to be killed")
    # A second cancel names the state; the CLI says it in one line and exits 1.
    again = cli(cluster, leader, "run", "cancel", occ_id, "--note", "again")
    assert again.returncode == 1 and "cancelled" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1


def test_a_queued_run_is_cancelled_at_once_and_only_by_its_own_tenant(
        cluster: LocalCluster) -> None:
    leader = cluster.wait_leader()
    add_job(cluster, leader, "queued", cron="0 0 1 1 *", queue="nobody", tenant="acme")
    occ_id = cluster.post(leader, "/v1/jobs/queued/trigger", {}).json()["id"]
    acme = cluster.create_token("tenant:acme", name="acme-bot")
    other = cluster.create_token("tenant:other", name="other-bot")
    reader = cluster.create_token("read", name="reader")
    url = f"{cluster.urls[leader]}/v1/occurrences/{occ_id}/cancel"

    def post(token: str) -> Any:
        return cluster.http.post(url, json={"note": "not this month"},
                                 headers=cluster.auth_headers(token))

    wait_until(lambda: post(other).status_code == 404, 10, message="the tokens file read")
    assert post(reader).status_code == 403
    assert post(cluster.worker_token).status_code == 403
    assert occ(cluster, leader, occ_id)["status"] == "pending"
    resp = post(acme)
    assert resp.status_code == 200, resp.text
    assert resp.json()["status"] == "cancelled"
    assert resp.json()["cancellation"]["by"] == "acme-bot"


def test_a_group_never_holds_more_than_its_limit_and_others_are_not_stalled(
        cluster: LocalCluster, tmp_path: Path) -> None:
    leader = cluster.wait_leader()
    done = cli(cluster, leader, "group", "set", "db-heavy", "--limit", "2")
    assert done.returncode == 0, done.stderr
    for i in range(4):
        add_job(cluster, leader, f"heavy{i}", cron="0 0 1 1 *", queue="q-group",
                concurrency_group="db-heavy", target={"shell": "sleep 2"})
    add_job(cluster, leader, "light", cron="0 0 1 1 *", queue="q-group",
            target={"shell": "true"})
    heavy = [cluster.post(leader, f"/v1/jobs/heavy{i}/trigger", {},
                          headers={"Idempotency-Key": f"k{i}-{n}"}).json()["id"]
             for n in range(2) for i in range(4)]
    # Three workers of one slot each: without the group's limit three runs would hold
    # leases at once, and two at once are always on two workers, so a peak of exactly 2
    # is the limit holding across workers.
    for worker in ("wg1", "wg2", "wg3"):
        cluster.start_worker(worker, concurrency=1, queues="q-group")
    seen = wait_until(lambda: (g := cluster.get(
        leader, "/v1/concurrency-groups/db-heavy"))["holding"] == 2 and g["waiting"] and g,
        30, message="the group full with runs waiting")
    assert len(seen["holders"]) == 2 and seen["waiters"]
    light = cluster.post(leader, "/v1/jobs/light/trigger", {}).json()["id"]
    light_done = wait_until(lambda: (o := occ(cluster, leader, light))["status"] ==
                            "succeeded" and o, 20, message="the light run")
    waiting_after = cluster.get(leader, "/v1/concurrency-groups/db-heavy")["waiting"]
    # Still waiters after the light run ended: it went out past them, not after them.
    assert waiting_after > 0, "the group drained first: the test proved nothing"
    finals = [wait_until(lambda o_id=o_id: (o := occ(cluster, leader, o_id))["status"] ==
                         "succeeded" and o, 60, message="the group's runs") for o_id in heavy]
    spans = [(ms(a["leased_at"]), ms(a["finished_at"])) for o in finals
             for a in o["attempt_list"]]
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                    key=lambda x: (x[0], x[1]))
    holding = peak = 0
    for _, step in events:
        holding += step
        peak = max(peak, holding)
    assert peak == 2, f"{peak} runs of the group held leases at once"
    assert len({a["worker_id"] for o in finals for a in o["attempt_list"]}) >= 2
    assert ms(light_done["attempt_list"][0]["leased_at"]) < max(e for _, e in spans)
    shown = cli(cluster, leader, "group", "list")
    assert shown.returncode == 0 and "db-heavy" in shown.stdout


def test_live_runs_stay_ahead_of_a_large_backfill_on_their_queue(cluster: LocalCluster) -> None:
    """1,500 backfill runs of an `allow` job are queued before the live runs of an
    every-second job on the same queue. Each live run is leased within a few leases of its
    instant (counted in fencing-token order, not timed): the backfill does not go first.

    With dispatch ahead (on by default) a live run may be leased before its instant; the
    worker starts it at the instant, so only backfill leases granted at or after the
    instant and before the live run's lease can have delayed its start, and those are
    what is counted (none for a run leased ahead)."""
    leader = cluster.wait_leader()
    add_job(cluster, leader, "bulk", cron="* * * * *", target={"shell": "sleep 0.05"})
    resp = cluster.post(leader, "/v1/jobs/bulk/backfill",
                        {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:59:00Z"})
    assert resp.status_code == 202, resp.text
    add_job(cluster, leader, "live", cron="* * * * * *", target={"shell": "true"})
    cluster.start_worker("w-bf", concurrency=2, extra_args=("--prefetch", "0"))
    time.sleep(12)
    cluster.post(leader, "/v1/jobs/live/pause")
    with sqlite3.connect(f"file:{cluster.root / leader / 'state.db'}?mode=ro", uri=True) as db:
        live = db.execute(
            "SELECT o.scheduled_for_ms, a.fencing_token FROM occurrences o JOIN attempts a "
            "ON a.occurrence_id = o.id AND a.number = 1 WHERE o.job_id = 'live' "
            "AND o.kind = 'scheduled' AND a.fencing_token IS NOT NULL").fetchall()
        backfill = db.execute(
            "SELECT a.leased_ms, a.fencing_token FROM attempts a JOIN occurrences o "
            "ON o.id = a.occurrence_id WHERE o.kind = 'backfill' "
            "AND a.fencing_token IS NOT NULL").fetchall()
        pending = db.execute("SELECT count(*) FROM occurrences WHERE kind = 'backfill' "
                             "AND status = 'pending'").fetchone()[0]
    assert pending > 100, f"the backfill drained ({pending} left): the test saw no contention"
    assert len(live) >= 5, f"only {len(live)} live runs were leased during the backfill"
    assert backfill, "no backfill run was leased: the backfill was starved"
    worst = max(sum(1 for leased_ms, token in backfill
                    if leased_ms >= instant and token < live_token)
                for instant, live_token in live)
    assert worst <= 6, f"a live run waited behind {worst} backfill leases"
