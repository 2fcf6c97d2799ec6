"""Tenant isolation against real nodes and workers (issue 17, attacks 1 and 5).

- A tenant whose policy names its queues cannot put a job on another team's queue.
- A job cannot read its worker's token: not from `/proc/$PPID/environ` (the worker reads
  it from `--token-file`), and with `--run-as nobody` not from the token file either.
- HTTP targets and `notify` URLs of a tenant with a policy cannot reach the metadata
  service or loopback (in any spelling).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftcron.auth import create_token
from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import serving_cluster

pytestmark = pytest.mark.system

LEAK_PROBE = ("echo environ:; tr '\\0' '\\n' < /proc/$PPID/environ; "
              "echo token-file:; cat {token_file}; echo done")


@pytest.fixture(scope="module")
def cl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with serving_cluster(Path(tmp_path_factory.mktemp("isolation"))) as c:
        yield c


def call(c: LocalCluster, token: str, method: str, path: str, body: Any = None,
         nid: str = "n1") -> httpx.Response:
    resp = httpx.request(method, c.urls[nid] + path, json=body, timeout=15,
                         headers=c.auth_headers(token))
    assert resp.status_code < 500, resp.text
    return resp


def refused(resp: httpx.Response, status: int, field: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["field"] == field, err
    return err


def job(job_id: str, tenant: str, **extra: Any) -> dict[str, Any]:
    return {"id": job_id, "tenant": tenant, "schedule": {"cron": "0 0 1 1 *"},
            "target": {"shell": "true"}, **extra}


def test_a_tenant_cannot_put_jobs_on_another_teams_queue(cl: LocalCluster) -> None:
    admin = cl.admin_token
    team_a = cl.create_token("tenant:team-a", name="team-a")
    put = call(cl, admin, "PUT", "/v1/tenants/team-a", {"queues": ["team-a"]})
    assert put.status_code == 200, put.text
    assert put.json()["queues"] == ["team-a"] and put.json()["max_jobs"] is None
    # Through a follower too: the decision is the committed policy's, at apply.
    for nid in ("n1", "n3"):
        err = refused(call(cl, team_a, "POST", "/v1/jobs",
                           job(f"steal-{nid}", "team-a", queue="billing-prod"), nid),
                      403, "queue")
        assert err["code"] == "policy_denied" and "billing-prod" in err["message"]
    batch = {"jobs": [job("b-ok", "team-a", queue="team-a"),
                      job("b-bad", "team-a", queue="billing-prod")]}
    refused(call(cl, team_a, "POST", "/v1/jobs:batchCreate", batch), 403, "jobs[1].queue")
    assert call(cl, team_a, "GET", "/v1/jobs/b-ok").status_code == 404  # nothing created
    ok = call(cl, team_a, "POST", "/v1/jobs", job("a-1", "team-a", queue="team-a"))
    assert ok.status_code == 201, ok.text
    edit = call(cl, team_a, "PUT", "/v1/jobs/a-1", job("a-1", "team-a", queue="billing-prod"))
    refused(edit, 403, "queue")
    assert call(cl, team_a, "GET", "/v1/jobs/a-1").json()["queue"] == "team-a"


def test_only_admin_sets_a_policy(cl: LocalCluster) -> None:
    call(cl, cl.admin_token, "PUT", "/v1/tenants/team-p", {"queues": ["team-p"]})
    for token in (cl.create_token("tenant:team-q", name="team-q"),
                  cl.create_token("tenant:team-p", name="team-p-itself"),
                  cl.create_token("read", name="reader"), cl.worker_token):
        resp = call(cl, token, "PUT", "/v1/tenants/team-p", {"queues": None})
        assert resp.status_code == 403, resp.text
    shown = call(cl, cl.admin_token, "GET", "/v1/tenants/team-p").json()
    assert shown["queues"] == ["team-p"] and shown["policy_set"] is True


def test_leaving_out_policy_fields_resets_them_to_any(cl: LocalCluster) -> None:
    admin = cl.admin_token
    call(cl, admin, "PUT", "/v1/tenants/team-r", {"queues": ["r"], "targets": ["http"]})
    after = call(cl, admin, "PUT", "/v1/tenants/team-r", {"max_jobs": 5}).json()
    assert (after["queues"], after["targets"], after["http_hosts"], after["max_jobs"]) == (
        None, None, None, 5)
    refused(call(cl, admin, "PUT", "/v1/tenants/team-r", {"http_hosts": ["http://x/"]}),
            400, "http_hosts[0]")


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/iam/",
                                 "http://127.0.0.1:8700/v1/jobs", "http://2130706433/",
                                 "http://[::ffff:169.254.169.254]/", "http://localhost/"])
def test_http_targets_and_notify_urls_cannot_reach_private_addresses(
        cl: LocalCluster, url: str) -> None:
    admin = cl.admin_token
    token = cl.create_token("tenant:team-h", name="team-h")
    call(cl, admin, "PUT", "/v1/tenants/team-h",
         {"queues": ["default"], "http_hosts": ["*.example.com"]})
    target = {"http": {"url": url}}
    name = f"h-{abs(hash(url))}"
    refused(call(cl, token, "POST", "/v1/jobs", job(name, "team-h", target=target)),
            403, "target.http.url")
    refused(call(cl, token, "POST", "/v1/jobs", job(name, "team-h", notify=[
        "https://hooks.example.com/x", url])), 403, "notify[1]")
    # A tenant without a policy keeps working as before.
    cl.create_token("tenant:team-old", name="team-old")
    legacy = call(cl, admin, "POST", "/v1/jobs", job(f"old-{name}", "team-old", target=target))
    assert legacy.status_code == 201, legacy.text


def test_a_policy_set_later_lists_the_jobs_it_refuses(cl: LocalCluster) -> None:
    admin = cl.admin_token
    created = call(cl, admin, "POST", "/v1/jobs", job("late-1", "team-late", queue="x"))
    assert created.status_code == 201, created.text
    call(cl, admin, "PUT", "/v1/tenants/team-late", {"queues": ["y"]})
    shown = call(cl, admin, "GET", "/v1/tenants/team-late").json()
    assert shown["jobs_outside_policy_count"] == 1
    assert shown["jobs_outside_policy"][0]["id"] == "late-1"
    assert shown["jobs_outside_policy"][0]["field"] == "queue"


def _probe_output(cl: LocalCluster, queue: str, token_file: Path, extra: tuple[str, ...],
                  cat_file: Path | None = None) -> str:
    """The output of a job that prints its worker's environ and `cat`s `cat_file`
    (default: the worker's token file)."""
    job_id = f"probe-{queue}"
    body = job(job_id, "default", queue=queue,
               target={"shell": LEAK_PROBE.format(token_file=cat_file or token_file)})
    assert cl.post("n1", "/v1/jobs", body).status_code == 201
    cl.start_worker(f"w-{queue}", queues=queue,
                    extra_args=("--token-file", str(token_file), *extra))
    trig = cl.post("n1", f"/v1/jobs/{job_id}/trigger", {})
    assert trig.status_code == 202, trig.text
    occ_id = trig.json()["id"]

    def finished() -> dict[str, Any] | None:
        o = cl.get("n1", f"/v1/occurrences/{occ_id}")
        return o if o["status"] in ("succeeded", "failed") else None

    occ = wait_until(finished, 60, message="the probe run finished")
    output = occ["attempt_list"][-1]["output"]
    assert "environ:" in output and "done" in output, output
    return output


def test_a_job_cannot_read_the_token_from_its_workers_environment(
        cl: LocalCluster, tmp_path: Path) -> None:
    token_file = tmp_path / "worker.token"
    token_file.write_text(cl.worker_token + "\n")
    token_file.chmod(0o600)
    # The job runs as the worker's uid, which may read the token file: that is what
    # --run-as is for (next test). Here: the worker's environment.
    output = _probe_output(cl, "probe-env", token_file, (), cat_file=Path("/dev/null"))
    assert "RAFTCRON_TOKEN" not in output and cl.worker_token not in output
    assert cl.admin_token not in output


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("tr") is None,
                    reason="--run-as needs root")
def test_a_job_run_as_nobody_cannot_read_the_token_file_or_the_worker(
        cl: LocalCluster, tmp_path: Path) -> None:
    token_file = tmp_path / "worker.token"
    token_file.write_text(cl.worker_token + "\n")
    token_file.chmod(0o600)
    tmp_path.chmod(0o755)  # the file's mode alone must keep the job out
    output = _probe_output(cl, "probe-run-as", token_file, ("--run-as", "nobody"))
    assert cl.worker_token not in output and "RAFTCRON_TOKEN" not in output
    assert output.count("Permission denied") >= 2, output  # environ and the file
    home = pwd.getpwnam("nobody").pw_dir
    env_probe = job("whoami", "default", queue="probe-run-as",
                    target={"shell": "id -u; echo HOME=$HOME USER=$USER"})
    assert cl.post("n1", "/v1/jobs", env_probe).status_code == 201
    occ_id = cl.post("n1", "/v1/jobs/whoami/trigger", {}).json()["id"]
    occ = wait_until(lambda: (o := cl.get("n1", f"/v1/occurrences/{occ_id}"))["status"]
                     == "succeeded" and o, 60, message="whoami ran")
    out = occ["attempt_list"][-1]["output"]
    expected_home = home if os.path.isdir(home) else "/"
    assert out.split()[0] == str(pwd.getpwnam("nobody").pw_uid), out
    assert f"HOME={expected_home} USER=nobody" in out, out


def raftcron(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAFTCRON_TOKEN"}
    return subprocess.run([sys.executable, "-m", "raftcron", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_expired_and_revoked_tokens_are_refused_and_list_shows_no_secret(
        cl: LocalCluster) -> None:
    tokens = str(cl.tokens_file)
    old = create_token(tokens, ["read"], "expired-one", expires_in_s=60,
                       now=time.time() - 120)
    assert call_status(cl, old) == 401
    fresh = raftcron("token", "create", "--scope", "read", "--name", "to-revoke",
                     "--expires-in", "30d", "--tokens-file", tokens)
    assert fresh.returncode == 0, fresh.stderr
    token = fresh.stdout.strip()
    assert call_status(cl, token) == 200
    listed = raftcron("token", "list", "--json", "--config", str(cl.configs[0]))
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)["tokens"]}
    assert rows["to-revoke"]["last_used_at"] is not None  # n1 saw it used just now
    assert rows["to-revoke"]["expires_at"] - rows["to-revoke"]["created_at"] == 30 * 86_400
    assert rows["expired-one"]["expired"] is True
    assert token not in listed.stdout and "sha256" not in listed.stdout
    revoked = raftcron("token", "revoke", "to-revoke", "--tokens-file", tokens)
    assert revoked.returncode == 0, revoked.stderr
    for nid in cl.ids:
        assert call_status(cl, token, nid) == 401
    missing = raftcron("token", "revoke", "to-revoke", "--tokens-file", tokens)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1


def call_status(cl: LocalCluster, token: str, nid: str = "n1") -> int:
    return httpx.get(cl.urls[nid] + "/v1/jobs", headers=cl.auth_headers(token),
                     timeout=15).status_code


def test_writes_are_in_the_audit_trail_with_the_principal(cl: LocalCluster) -> None:
    team = cl.create_token("tenant:team-audit", name="team-audit")
    call(cl, cl.admin_token, "PUT", "/v1/tenants/team-audit", {"queues": ["qa"]})
    resp = call(cl, team, "POST", "/v1/jobs", job("audit-1", "team-audit", queue="qb"))
    request_id = resp.headers["x-request-id"]

    def logged() -> dict[str, Any] | None:
        for line in (cl.root / "n1.log").read_text().splitlines():
            if line.startswith("raftcron-audit: ") and request_id in line:
                return json.loads(line.split(": ", 1)[1])
        return None

    record = wait_until(logged, 10, message="the audit line")
    assert (record["principal"], record["method"], record["path"], record["status"],
            record["outcome"]) == ("team-audit", "POST", "/v1/jobs", 403, "denied")


def test_a_cluster_whose_state_predates_policies_starts_and_behaves_as_before(
        tmp_path: Path) -> None:
    c = LocalCluster(tmp_path / "old-state")
    try:
        c.start()
        c.wait_leader(timeout=30)
        c.wait_serving()
        assert call(c, c.admin_token, "PUT", "/v1/tenants/legacy",
                    {"max_jobs": 5}).status_code == 200
        legacy = c.create_token("tenant:legacy", name="legacy")
        created = call(c, legacy, "POST", "/v1/jobs", job("old-1", "legacy", queue="any-q"))
        assert created.status_code == 201, created.text
        c.wait_converged()
        c.stop_all()
        for nid in c.ids:  # the state as the previous version left it
            db = sqlite3.connect(c.root / nid / "state.db")
            for column in ("queues", "targets", "http_hosts"):
                db.execute(f"ALTER TABLE tenants DROP COLUMN {column}")
            db.commit()
            db.close()
        c.start()
        c.wait_leader(timeout=30)
        c.wait_serving()
        shown = call(c, c.admin_token, "GET", "/v1/tenants/legacy?consistent=true").json()
        assert (shown["max_jobs"], shown["queues"], shown["policy_set"]) == (5, None, False)
        again = call(c, legacy, "POST", "/v1/jobs", job("old-2", "legacy", queue="other-q",
                                                         target={"http": {
                                                             "url": "http://127.0.0.1:9/"}}))
        assert again.status_code == 201, again.text  # no policy: as before
        call(c, c.admin_token, "PUT", "/v1/tenants/legacy", {"max_jobs": 5, "queues": ["q"]})
        refused(call(c, legacy, "POST", "/v1/jobs", job("old-3", "legacy", queue="other-q")),
                403, "queue")
        digests = c.wait_converged()
        assert len({d["digest"] for d in digests.values()}) == 1
    finally:
        c.close()
