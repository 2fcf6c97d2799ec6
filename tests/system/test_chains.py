"""Chains on real nodes and a real worker: a chained job runs once for each upstream run
that ends as it follows, knows which run started it, survives the leader's death between
the two, and refuses a missing upstream, another tenant's job and a cycle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from raftcron.core import identity
from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import serving_cluster

pytestmark = pytest.mark.system


def cli(c: LocalCluster, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAFTCRON_TOKEN": token or c.admin_token}
    return subprocess.run(
        [sys.executable, "-m", "raftcron", *args, "--server", ",".join(c.urls.values())],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def create(c: LocalCluster, body: dict[str, Any], token: str | None = None) -> Any:
    nid = c.leader() or c.ids[0]
    return c.post(nid, "/v1/jobs", body, headers=c.auth_headers(token))


def trigger(c: LocalCluster, job_id: str) -> str:
    resp = c.post(
        c.leader() or c.ids[0],
        f"/v1/jobs/{job_id}/trigger",
        {},
        headers={"Idempotency-Key": os.urandom(8).hex()},
    )
    assert resp.status_code in (200, 201, 202), resp.text
    return resp.json()["id"]


def ended(c: LocalCluster, occ_id: str, timeout: float = 30) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        nid = c.leader() or c.ids[0]
        job = identity.job_of(occ_id)
        for o in c.occurrences(nid, job):
            if o["id"] == occ_id and o["status"] in ("succeeded", "failed", "skipped", "cancelled"):
                return o
        return None

    return wait_until(done, timeout, message=f"{occ_id} to end")


def runs(c: LocalCluster, job_id: str, nid: str | None = None) -> list[dict[str, Any]]:
    return c.occurrences(nid or c.leader() or c.ids[0], job_id)


def test_each_upstream_end_starts_one_run_of_each_job_that_follows_it(tmp_path: Path) -> None:
    out = tmp_path / "chain.log"
    flag = tmp_path / "fail"
    with serving_cluster(tmp_path / "c") as c:
        c.start_worker("w1", concurrency=4)
        assert (
            create(
                c,
                {
                    "id": "extract",
                    "schedule": "0 0 1 1 *",
                    "max_attempts": 1,
                    "target": {"shell": f"test ! -e {flag}"},
                },
            ).status_code
            == 201
        )
        record = (
            f'echo "$RAFTCRON_JOB_ID $RAFTCRON_UPSTREAM_JOB_ID '
            f'$RAFTCRON_UPSTREAM_OCCURRENCE_ID $RAFTCRON_UPSTREAM_OUTCOME" >> {out}'
        )
        for job, on in (("load", "success"), ("alarm", "failure"), ("audit", "finish")):
            added = cli(c, "job", "add", job, "--after", "extract", "--on", on, "--shell", record)
            assert added.returncode == 0, added.stderr
        good = trigger(c, "extract")
        assert ended(c, good)["status"] == "succeeded"
        flag.touch()
        bad = trigger(c, "extract")
        assert ended(c, bad)["status"] == "failed"
        expected = {("load", good), ("audit", good), ("alarm", bad), ("audit", bad)}
        wait_until(
            lambda: out.exists() and len(out.read_text().splitlines()) == 4,
            30,
            message="the four chained runs",
        )
        outcome = {good: "succeeded", bad: "failed"}
        lines = sorted(tuple(line.split()) for line in out.read_text().splitlines())
        assert lines == sorted((job, "extract", occ, outcome[occ]) for job, occ in expected)
        time.sleep(1)  # nothing more comes
        for job in ("load", "alarm", "audit"):
            chained = runs(c, job)
            assert all(o["kind"] == "chained" and o["status"] == "succeeded" for o in chained)
            assert sorted(o["upstream"]["occurrence_id"] for o in chained) == sorted(
                occ for j, occ in expected if j == job
            )
        # The runs API filters them, and each job page shows the chain.
        leader = c.leader() or "n1"
        assert {o["job_id"] for o in c.occurrences(leader, kind="chained")} == {
            "load",
            "alarm",
            "audit",
        }
        assert all(o["kind"] != "chained" for o in c.occurrences(leader, kind="manual"))
        upstream_page = c.get(leader, "/v1/status/jobs/extract")
        assert upstream_page["chain"] == {
            "after": None,
            "followed_by": [
                {"job": "alarm", "on": "failure"},
                {"job": "audit", "on": "finish"},
                {"job": "load", "on": "success"},
            ],
        }
        page = c.get(leader, "/v1/status/jobs/alarm")
        assert page["chain"]["after"] == {"job": "extract", "on": "failure"}
        assert page["describe"] == "after each failure of extract"
        assert page["upcoming"] == [] and page["done"] is False
        overview = {j["id"]: j for j in c.get(leader, "/v1/status/jobs")["jobs"]}
        assert overview["alarm"]["schedule"] is None
        assert overview["alarm"]["after"] == {"job": "extract", "on": "failure"}
        assert overview["alarm"]["describe"] == "after each failure of extract"
        assert overview["alarm"]["next_fire_times"] == []
        assert overview["extract"]["after"] is None
        listed = cli(c, "job", "list")
        assert "after extract (failure)" in listed.stdout, listed.stdout
        shown = cli(c, "job", "runs", "alarm")
        assert shown.returncode == 0 and "chained" in shown.stdout, shown.stdout + shown.stderr


def test_a_leader_killed_while_the_upstream_runs_neither_skips_nor_doubles_the_chain(
    tmp_path: Path,
) -> None:
    """The upstream's completion reaches a new leader; the downstream run is created by
    that same entry, so each upstream run has exactly one downstream run, on every node."""
    started = tmp_path / "started"
    with serving_cluster(tmp_path / "c") as c:
        c.start_worker("w1", concurrency=4)
        assert (
            create(
                c,
                {
                    "id": "up",
                    "schedule": "0 0 1 1 *",
                    "max_attempts": 1,
                    "target": {"shell": f"touch {started}.$RAFTCRON_OCCURRENCE_ID.x; sleep 3"},
                },
            ).status_code
            == 201
        )
        assert (
            create(
                c, {"id": "down", "after": {"job": "up"}, "target": {"shell": "true"}}
            ).status_code
            == 201
        )
        ups = [trigger(c, "up") for _ in range(3)]
        wait_until(
            lambda: len(list(tmp_path.glob("started.*"))) == 3,
            30,
            message="the upstream runs to start",
        )
        old = c.leader()
        assert old is not None
        c.kill(old)  # while every upstream run is still going
        new = c.wait_leader(timeout=30, among=[n for n in c.ids if n != old])
        for occ in ups:
            assert ended(c, occ, timeout=60)["status"] == "succeeded"
        wait_until(
            lambda: len([o for o in runs(c, "down", new) if o["status"] == "succeeded"]) == 3,
            30,
            message="one downstream run per upstream run",
        )
        c.start(old)
        c.wait_converged(timeout=60)
        seen = {
            nid: sorted(
                (o["id"], o["upstream"]["occurrence_id"], o["status"]) for o in runs(c, "down", nid)
            )
            for nid in c.ids
        }
        for nid in c.ids:
            assert sorted(u for _, u, _ in seen[nid]) == sorted(ups), nid
            assert seen[nid] == seen[c.ids[0]], "every node holds the same runs"


def assert_refused(resp: Any, status: int, field: str, words: str) -> None:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["field"] == field and words in err["message"], err


def test_a_chain_to_a_missing_job_another_tenant_or_a_cycle_is_refused(tmp_path: Path) -> None:
    with serving_cluster(tmp_path / "c") as c:
        red = c.create_token("tenant:red", name="red")
        blue = c.create_token("tenant:blue", name="blue")
        reader = c.create_token("read", name="reader")
        shell = {"shell": "true"}
        assert (
            create(
                c, {"id": "red-a", "tenant": "red", "schedule": "0 9 * * *", "target": shell}, red
            ).status_code
            == 201
        )
        assert (
            create(
                c, {"id": "red-b", "tenant": "red", "after": {"job": "red-a"}, "target": shell}, red
            ).status_code
            == 201
        )
        # Another tenant's job reads as absent, in the words a missing one gets.
        assert_refused(
            create(
                c,
                {"id": "blue-b", "tenant": "blue", "after": {"job": "red-a"}, "target": shell},
                blue,
            ),
            400,
            "after.job",
            "does not exist in tenant 'blue'",
        )
        assert_refused(
            create(
                c, {"id": "red-c", "tenant": "red", "after": {"job": "nope"}, "target": shell}, red
            ),
            400,
            "after.job",
            "does not exist in tenant 'red'",
        )
        # A cycle, closed by an edit of the first job.
        nid = c.leader() or "n1"
        resp = c.http.put(
            c.urls[nid] + "/v1/jobs/red-a",
            json={"tenant": "red", "after": {"job": "red-b"}, "target": shell},
            headers=c.auth_headers(red),
        )
        assert_refused(resp, 400, "after.job", "a cycle: red-a after red-b after red-a")
        assert c.get(nid, "/v1/jobs/red-a")["schedule"]["cron"] == "0 9 * * *"
        assert_refused(
            create(
                c, {"id": "red-d", "tenant": "red", "after": {"job": "red-d"}, "target": shell}, red
            ),
            400,
            "after.job",
            "cannot run after itself",
        )
        # Malformed: the schema names the field.
        assert_refused(
            create(
                c,
                {
                    "id": "red-e",
                    "tenant": "red",
                    "after": {"job": "red-a", "on": "sometimes"},
                    "target": shell,
                },
                red,
            ),
            400,
            "after.on",
            "",
        )
        assert (
            create(
                c,
                {
                    "id": "red-f",
                    "tenant": "red",
                    "after": {"job": "red-a"},
                    "schedule": "* * * * *",
                    "target": shell,
                },
                red,
            ).status_code
            == 400
        )
        assert (
            create(
                c,
                {"id": "red-g", "tenant": "red", "after": {"job": "x" * 100_000}, "target": shell},
                red,
            ).status_code
            == 400
        )
        assert (
            create(
                c, {"id": "red-h", "tenant": "red", "after": [], "target": shell}, red
            ).status_code
            == 400
        )
        # A read token writes nothing; blue cannot see red's chain.
        assert (
            create(
                c,
                {"id": "red-i", "tenant": "red", "after": {"job": "red-a"}, "target": shell},
                reader,
            ).status_code
            == 403
        )
        seen = c.http.get(c.urls[nid] + "/v1/status/jobs/red-b", headers=c.auth_headers(blue))
        assert seen.status_code == 404
        jobs = {j["id"] for j in c.get(nid, "/v1/jobs", params={"tenant": "red"})["jobs"]}
        assert jobs == {"red-a", "red-b"}


def test_apply_takes_a_chained_job_listed_before_its_upstream(tmp_path: Path) -> None:
    with serving_cluster(tmp_path / "c") as c:
        path = tmp_path / "jobs.json"
        path.write_text(
            json.dumps(
                {
                    "jobs": [
                        {
                            "id": "report",
                            "after": {"job": "extract", "on": "success"},
                            "target": {"shell": "true"},
                        },
                        {"id": "extract", "schedule": "0 2 * * *", "target": {"shell": "true"}},
                    ]
                }
            )
        )
        applied = cli(c, "apply", "-f", str(path))
        assert applied.returncode == 0, applied.stderr
        again = cli(c, "apply", "-f", str(path))
        assert again.returncode == 0 and "2 unchanged" in again.stdout, again.stdout
        job = c.get(c.leader() or "n1", "/v1/jobs/report")
        assert job["after"] == {"job": "extract", "on": "success"} and "schedule" not in job
