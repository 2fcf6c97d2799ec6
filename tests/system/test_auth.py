"""Bearer tokens and scopes against real node processes (LocalCluster shares one tokens file)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Route

from raftcron.api.app import ROUTES
from raftcron.auth import create_token
from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import serving_cluster

pytestmark = pytest.mark.system

OPEN = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/"),
        ("GET", "/jobs/some-job")}  # a redirect to the page's route for the job


def _never_500(resp: httpx.Response) -> None:
    assert resp.status_code != 500, f"{resp.request.method} {resp.request.url} answered 500"


class As:
    """Requests to one cluster node with one token (or none)."""

    def __init__(self, c: LocalCluster, token: str | None, nid: str | None = None) -> None:
        self.c = c
        self.nid = nid or c.ids[0]
        headers = c.auth_headers(token) if token else {}
        self.http = httpx.Client(timeout=15, headers=headers,
                                 event_hooks={"response": [_never_500]})

    def __call__(self, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        if body is not None:
            kw["json"] = body
        return self.http.request(method, self.c.urls[self.nid] + path, **kw)

    def close(self) -> None:
        self.http.close()


@pytest.fixture(scope="module")
def cl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with serving_cluster(Path(tmp_path_factory.mktemp("auth"))) as c:
        yield c


@pytest.fixture
def clients(cl: LocalCluster) -> Iterator[list[As]]:
    made: list[As] = []
    yield made
    for a in made:
        a.close()


def client(cl: LocalCluster, made: list[As], token: str | None, nid: str | None = None) -> As:
    a = As(cl, token, nid)
    made.append(a)
    return a


def job(job_id: str, tenant: str = "default", **extra: Any) -> dict[str, Any]:
    return {"id": job_id, "tenant": tenant, "schedule": {"cron": "0 0 1 1 *"},
            "target": {"shell": "true"}, **extra}


def err(resp: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, (resp.request.method, resp.request.url, resp.text)
    body = resp.json()["error"]
    if code:
        assert body["code"] == code, body
    return body


def route_calls() -> list[tuple[str, str]]:
    """Every (method, concrete path) of the API, path parameters filled in."""
    out = []
    for r in ROUTES:
        if not isinstance(r, Route):
            continue
        path = (r.path.replace("{job_id}", "some-job").replace("{job_id:path}", "some-job")
                .replace("{name}", "some-tenant")
                .replace("{occurrence_id:path}", "some-occ")
                .replace("{attempt_id:path}", "some-att"))
        for method in sorted(r.methods or ()):
            if method != "HEAD":
                out.append((method, path))
    return out


def test_no_token_is_401_everywhere_but_health_and_the_page(cl: LocalCluster,
                                                             clients: list[As]) -> None:
    anon = client(cl, clients, None)
    calls = route_calls()
    assert len(calls) > 30
    for method, path in calls:
        resp = anon(method, path, {"x": 1} if method != "GET" else None)
        if (method, path) in OPEN:
            assert resp.status_code in (200, 302, 503), (method, path, resp.status_code)
            continue
        body = err(resp, 401, "unauthorized")
        assert body["field"] == "Authorization"
        assert resp.headers["www-authenticate"].startswith("Bearer"), (method, path)
    assert anon("GET", "/web/app.js").status_code == 200
    assert anon("GET", "/web/style.css").status_code == 200
    bad = client(cl, clients, "rc_not-a-real-token")
    for method, path in (("GET", "/v1/jobs"), ("POST", "/v1/jobs"), ("GET", "/metrics")):
        err(bad(method, path, job("x") if method == "POST" else None), 401, "unauthorized")
    garbage = anon("GET", "/v1/jobs", headers={"Authorization": "Basic Zm9vOmJhcg=="})
    err(garbage, 401, "unauthorized")
    # Nothing was written by any of these.
    jobs = cl.get(cl.ids[0], "/v1/jobs", params={"consistent": "true"})["jobs"]
    assert "x" not in {j["id"] for j in jobs}
    assert cl.get(cl.ids[0], "/v1/tenants")["tenants"] == []


def test_read_token_reads_but_cannot_write(cl: LocalCluster, clients: list[As]) -> None:
    admin = client(cl, clients, cl.admin_token)
    assert admin("POST", "/v1/jobs", job("r-1")).status_code == 201
    reader = client(cl, clients, cl.create_token("read", name="reader"), cl.ids[1])
    # Another node than the one that answered the create: read through a barrier, or the
    # job may not have been applied there yet.
    assert reader("GET", "/v1/jobs/r-1?consistent=true").status_code == 200
    for path in ("/metrics", "/openapi.json", "/v1/cluster", "/v1/cluster/nodes",
                 "/v1/status/jobs", "/v1/alerts", "/v1/tenants", "/v1/occurrences"):
        assert reader("GET", path).status_code == 200, path
    writes = [(m, p) for m, p in route_calls() if m != "GET"]
    for method, path in writes:
        path = path.replace("some-job", "r-1")
        body = err(reader(method, path, {"worker_id": "w"}), 403, "forbidden")
        assert "reader" in body["message"], body
    assert admin("GET", "/v1/jobs/r-1?consistent=true").json()["paused"] is False


def test_tenant_token_manages_only_its_tenant(cl: LocalCluster, clients: list[As]) -> None:
    admin = client(cl, clients, cl.admin_token)
    assert admin("POST", "/v1/jobs", job("blue-1", "blue")).status_code == 201
    red = client(cl, clients, cl.create_token("tenant:red", name="red"), cl.ids[2])

    assert red("POST", "/v1/jobs", job("red-1", "red")).status_code == 201
    assert red("POST", "/v1/jobs", job("red-2", "red")).status_code == 201
    body = err(red("POST", "/v1/jobs", job("red-sneaky", "blue")), 403, "forbidden")
    assert body["field"] == "tenant"
    # Defaults to the "default" tenant, which red does not hold.
    err(red("POST", "/v1/jobs", {k: v for k, v in job("red-3").items() if k != "tenant"}),
        403, "forbidden")

    listed = red("GET", "/v1/jobs?consistent=true").json()["jobs"]
    assert sorted(j["id"] for j in listed) == ["red-1", "red-2"]
    assert red("GET", "/v1/jobs?tenant=blue").json()["jobs"] == []
    err(red("GET", "/v1/jobs/blue-1"), 404, "not_found")
    assert [j["id"] for j in red("GET", "/v1/status/jobs").json()["jobs"]] == ["red-1", "red-2"]

    # Writes to its own jobs work; to another tenant's are refused and change nothing.
    assert red("POST", "/v1/jobs/red-1/pause").json()["paused"] is True
    assert red("POST", "/v1/jobs/red-1/resume").json()["paused"] is False
    occ = red("POST", "/v1/jobs/red-1/trigger", {}, headers={"Idempotency-Key": "k1"})
    assert occ.status_code == 202, occ.text
    put = red("PUT", "/v1/jobs/red-2", job("red-2", "red", queue="redq"))
    assert put.status_code == 200 and put.json()["queue"] == "redq"
    for method, path, payload in (
        ("POST", "/v1/jobs/blue-1/pause", None), ("POST", "/v1/jobs/blue-1/resume", None),
        ("POST", "/v1/jobs/blue-1/trigger", {}), ("DELETE", "/v1/jobs/blue-1", None),
        ("POST", "/v1/jobs/blue-1/backfill", {"start": "2026-01-01T00:00:00Z",
                                              "end": "2026-01-02T00:00:00Z"}),
        ("PUT", "/v1/jobs/blue-1", job("blue-1", "red")),  # taking it over
        ("PUT", "/v1/jobs/blue-1", job("blue-1", "blue")),
    ):
        err(red(method, path, payload), 403, "forbidden")
    # A batch naming blue's id is refused as existing, without describing blue's job.
    batch = red("POST", "/v1/jobs:batchCreate", {"jobs": [job("blue-1", "red")]})
    assert batch.status_code == 200, batch.text
    refusal = batch.json()["results"][0]
    assert refusal["error"]["code"] == "already_exists"
    assert "current_version" not in refusal and "differs" not in refusal
    blue = admin("GET", "/v1/jobs/blue-1?consistent=true").json()
    assert blue["version"] == 1 and blue["tenant"] == "blue" and blue["paused"] is False
    assert admin("GET", "/v1/occurrences?job_id=blue-1").json()["occurrences"] == []

    # Occurrences: only its own, in lists and by id.
    admin_occ = admin("POST", "/v1/jobs/blue-1/trigger", {}).json()
    err(red("GET", f"/v1/occurrences/{admin_occ['id']}"), 404, "not_found")
    mine = red("GET", f"/v1/occurrences/{occ.json()['id']}")
    assert mine.status_code == 200
    seen = red("GET", "/v1/occurrences?consistent=true").json()["occurrences"]
    assert {o["job_id"] for o in seen} == {"red-1"}
    # Tenants cannot set quotas, and see only their own tenant.
    err(red("PUT", "/v1/tenants/red", {"max_jobs": 100}), 403, "forbidden")
    assert red("DELETE", "/v1/jobs/red-2").status_code == 200


def test_worker_tokens_lease_but_do_not_manage_jobs(cl: LocalCluster, clients: list[As]) -> None:
    leader = cl.wait_leader()
    follower = next(n for n in cl.ids if n != leader)
    worker = client(cl, clients, cl.worker_token, follower)  # forwarded to the leader
    lease = worker("POST", "/v1/leases", {"worker_id": "w", "queues": ["nothing-here"]})
    assert lease.status_code == 200 and lease.json() == {"leases": []}
    err(worker("POST", "/v1/jobs", job("w-1")), 403, "forbidden")
    err(worker("GET", "/v1/jobs"), 403, "forbidden")
    err(worker("PUT", "/v1/tenants/x", {}), 403, "forbidden")
    batch = worker("POST", "/v1/heartbeats", {"worker_id": "w", "attempts": [
        {"attempt_id": "nope", "fencing_token": 1}]})
    assert batch.status_code == 200, batch.text

    limited = client(cl, clients, cl.create_token("worker:q1,q2", name="qw"), leader)
    ok = limited("POST", "/v1/leases", {"worker_id": "w", "queues": ["q2", "q1"]})
    assert ok.status_code == 200, ok.text
    for queues in (["q3"], ["q1", "q3"], None):
        payload: dict[str, Any] = {"worker_id": "w"}
        if queues is not None:
            payload["queues"] = queues
        body = err(limited("POST", "/v1/leases", payload), 403, "forbidden")
        assert body["field"] == "queues"
    via_follower = client(cl, clients, cl.create_token("worker:q1"), follower)
    err(via_follower("POST", "/v1/leases", {"worker_id": "w", "queues": ["default"]}), 403)


def test_tenant_quotas_through_the_api(cl: LocalCluster, clients: list[As]) -> None:
    admin = client(cl, clients, cl.admin_token, cl.ids[1])
    for bad, field in (({"max_jobs": 0}, "max_jobs"), ({"max_jobs": True}, "max_jobs"),
                       ({"max_fires_per_minute": 10**6 + 1}, "max_fires_per_minute"),
                       ({"max_runs": 1}, "max_runs"), ([], "body")):
        assert err(admin("PUT", "/v1/tenants/green", bad), 400, "invalid")["field"] == field
    err(admin("PUT", "/v1/tenants/bad%20name", {}), 400, "invalid")
    put = admin("PUT", "/v1/tenants/green", {"max_jobs": 2, "max_fires_per_minute": 2,
                                              "max_concurrent_runs": None})
    assert put.status_code == 200, put.text
    assert put.json()["max_jobs"] == 2 and put.json()["max_concurrent_runs"] is None
    listed = admin("GET", "/v1/tenants").json()["tenants"]
    assert {"green"} <= {t["name"] for t in listed}
    green = client(cl, clients, cl.create_token("tenant:green"), cl.ids[0])
    # Another node than the one that applied the PUT: read through a barrier.
    seen = green("GET", "/v1/tenants?consistent=true").json()["tenants"]
    assert [t["name"] for t in seen] == ["green"]

    assert green("POST", "/v1/jobs", job("g-1", "green")).status_code == 201
    assert green("POST", "/v1/jobs", job("g-2", "green")).status_code == 201
    over = err(green("POST", "/v1/jobs", job("g-3", "green")), 409, "quota_exceeded")
    assert over["quota"] == "max_jobs" and "max_jobs" in over["message"]

    codes = []
    for i in range(6):  # two fires per minute (a minute boundary may let two more through)
        resp = green("POST", "/v1/jobs/g-1/trigger", {}, headers={"Idempotency-Key": f"t{i}"})
        codes.append(resp.status_code)
        if resp.status_code == 429:
            body = err(resp, 429, "rate_limited")
            assert body["quota"] == "max_fires_per_minute"
            assert "max_fires_per_minute" in body["message"]
            assert 1 <= int(resp.headers["retry-after"]) <= 60
            break
    assert codes[:2] == [202, 202] and codes[-1] == 429, codes
    raised = admin("PUT", "/v1/tenants/green", {"max_jobs": 3})
    assert raised.json()["max_fires_per_minute"] is None
    assert green("POST", "/v1/jobs", job("g-3", "green")).status_code == 201


def raftcron(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAFTCRON_TOKEN"}
    if token:
        env["RAFTCRON_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "raftcron", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_token_create_adds_a_working_token_without_restart(cl: LocalCluster,
                                                           clients: list[As]) -> None:
    pids = {n: p.pid for n, p in cl.procs.items()}
    out = raftcron("token", "create", "--scope", "tenant:cli", "--name", "cli-made",
                   "--config", str(cl.configs[0]))
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    assert token.startswith("rc_") and len(out.stdout.splitlines()) == 1
    assert token not in cl.tokens_file.read_text()
    stored = json.loads(cl.tokens_file.read_text())["tokens"]
    assert stored[-1]["name"] == "cli-made" and stored[-1]["scopes"] == ["tenant:cli"]
    for nid in cl.ids:
        made = client(cl, clients, token, nid)
        assert made("GET", "/v1/jobs").status_code == 200, nid
    assert client(cl, clients, token)("POST", "/v1/jobs", job("cli-1", "cli")).status_code == 201
    # The CLI client takes the token from RAFTCRON_TOKEN or --token.
    server = cl.urls[cl.ids[1]]
    listed = raftcron("job", "list", "--json", "--server", server, token=token)
    assert listed.returncode == 0, listed.stderr
    assert [j["id"] for j in json.loads(listed.stdout)["jobs"]] == ["cli-1"]
    flag = raftcron("job", "show", "cli-1", "--server", server, "--token", token)
    assert flag.returncode == 0, flag.stderr
    denied = raftcron("job", "list", "--server", server)
    assert denied.returncode == 2
    line = denied.stderr.strip()
    assert "401" in line and "RAFTCRON_TOKEN" in line and len(line.splitlines()) == 1
    assert {n: p.pid for n, p in cl.procs.items()} == pids


@pytest.mark.parametrize("args", [["--scope", "root"], ["--scope", "tenant:"],
                                  ["--scope", "worker:a b"]])
def test_token_create_with_a_bad_scope_exits_2_with_one_line(tmp_path: Path,
                                                             args: list[str]) -> None:
    out = raftcron("token", "create", *args, "--tokens-file", str(tmp_path / "t.json"))
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "scope" in out.stderr
    assert not (tmp_path / "t.json").exists()


def test_token_create_into_a_missing_directory_exits_2_and_creates_nothing(
        tmp_path: Path) -> None:
    out = raftcron("token", "create", "--scope", "read", "--tokens-file",
                   str(tmp_path / "typo" / "t.json"))
    assert out.returncode == 2 and out.stdout == ""
    assert "does not exist" in out.stderr.strip()
    assert not (tmp_path / "typo").exists()


def test_node_refuses_to_start_without_a_tokens_decision(tmp_path: Path) -> None:
    (tmp_path / "s").write_text("x" * 32)
    base = ('node_id = "n1"\ndata_dir = "n1"\nraft_addr = "127.0.0.1:1"\nhttp_port = 1\n'
            'secret_file = "s"\n')
    for extra, needle in (("", "tokens_file"), ('tokens_file = "missing.json"\n', "token"),
                          ('auth = "off"\ntokens_file = "t.json"\n', "auth"),
                          ('auth = "maybe"\n', "auth")):
        cfg = tmp_path / "n1.toml"
        cfg.write_text(extra + base)
        out = raftcron("node", "--config", str(cfg))
        assert out.returncode == 2, (extra, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in out.stderr
    assert not (tmp_path / "n1").exists()


@pytest.mark.parametrize("scope, queues", [(None, "default"), ("bogus", "default"),
                                           ("worker:q1", "q2")])
def test_a_worker_the_cluster_refuses_exits_2_with_one_line(
        cl: LocalCluster, scope: str | None, queues: str) -> None:
    """A missing or unknown token, or a queue the token may not lease from, is the
    worker's configuration: it says so and exits instead of retrying forever."""
    token = None if scope is None else (
        "rc_not_a_token" if scope == "bogus" else cl.create_token(scope))
    servers = ",".join(cl.urls.values())
    out = raftcron("worker", "--server", servers, "--queues", queues, "--id", "refused",
                   "--refused-grace-s", "1", token=token)
    assert out.returncode == 2, out.stderr
    # It kept asking through the grace period first (a tokens file may be rolling out).
    assert "stopping if still refused" in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("raftcron: cannot lease: "), out.stderr


def test_a_worker_whose_token_reaches_the_nodes_late_waits_for_it(
        cl: LocalCluster, clients: list[As], tmp_path: Path) -> None:
    """A worker started with a token the nodes do not know yet (the tokens file is still
    being copied to them) keeps asking, and works once the file arrives."""
    staged = tmp_path / "tokens.json"
    shutil.copy(cl.tokens_file, staged)
    token = create_token(str(staged), ["worker:late"], "late")
    env = {**{k: v for k, v in os.environ.items() if k != "RAFTCRON_TOKEN"},
           "RAFTCRON_TOKEN": token}
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "raftcron", "worker", "--server", ",".join(cl.urls.values()),
             "--queues", "late", "--id", "late", "--refused-grace-s", "60"],
            stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(lambda: "stopping if still refused" in log.read_text(), 30,
                   message="the worker refused and retrying")
        assert proc.poll() is None, log.read_text()
        os.utime(staged)
        os.replace(staged, cl.tokens_file)  # the rollout reaches the nodes
        marker = tmp_path / "ran"
        admin = client(cl, clients, cl.admin_token)
        made = admin("POST", "/v1/jobs", job("late-1", queue="late",
                                             target={"shell": f"touch {marker}"}))
        assert made.status_code == 201, made.text
        fired = admin("POST", "/v1/jobs/late-1/trigger", {})
        assert fired.status_code == 202, fired.text
        wait_until(marker.exists, 30, message="the late-token worker ran the job")
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=30)
