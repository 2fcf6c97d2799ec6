"""Issue 17, attacks 2, 3 and 4, played against real node processes, and the principals
that must not get through: another tenant, a worker token for another queue, a read token,
the node token, a replayed idempotency key. Each answer must be a clean 4xx, or a read
with nothing leaked."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftcron.api.auth import node_token
from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import serving_cluster
from tests.system.test_auth import As, job

pytestmark = pytest.mark.system

SECRET = "Bearer sk-live-4f9a2c"
URL_PASSWORD = "pw-77e1b0"


@pytest.fixture(scope="module")
def cl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with serving_cluster(Path(tmp_path_factory.mktemp("isolation"))) as c:
        yield c


@pytest.fixture(scope="module")
def tokens(cl: LocalCluster) -> dict[str, str]:
    return {
        "a": cl.create_token("tenant:a", name="team-a"),
        "b": cl.create_token("tenant:b", name="team-b"),
        "read": cl.create_token("read", name="reader"),
        "qa": cl.create_token("worker:qa", name="worker-qa"),
        "qb": cl.create_token("worker:qb", name="worker-qb"),
    }


@pytest.fixture
def as_(cl: LocalCluster) -> Iterator[Any]:
    made: list[As] = []

    def make(token: str | None, nid: str | None = None) -> As:
        made.append(As(cl, token, nid))
        return made[-1]

    yield make
    for a in made:
        a.close()


def http_job(job_id: str, tenant: str, url: str = "https://hooks.example.com/charge",
             **extra: Any) -> dict[str, Any]:
    return job(job_id, tenant, target={"http": {
        "url": url, "headers": {"Authorization": SECRET, "Accept": "text/plain"}}}, **extra)


def refused(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, (resp.status_code, resp.text)
    err = resp.json()["error"]
    assert err["code"] == code, err
    assert SECRET not in resp.text and URL_PASSWORD not in resp.text
    return err


# --- attack 2: another tenant's Idempotency-Key ------------------------------------------

def test_an_idempotency_key_replays_only_the_same_request_of_the_same_principal(
        cl: LocalCluster, tokens: dict[str, str], as_: Any) -> None:
    a, b = as_(tokens["a"]), as_(tokens["b"], cl.ids[1])
    key = {"Idempotency-Key": "deploy-42"}
    first = a("POST", "/v1/jobs", http_job("a-billing", "a"), headers=key)
    assert first.status_code == 201, first.text

    # Tenant b sends the same key with a's job id under its own tenant: a fresh request
    # (the id is taken: 409), never the replay of a's answer with a's job in it.
    stolen = b("POST", "/v1/jobs", http_job("a-billing", "b"), headers=key)
    refused(stolen, 409, "already_exists")
    assert "a-billing" not in [j["id"] for j in b("GET", "/v1/jobs").json()["jobs"]]
    # Nor does a's key replay anything for yet another principal: its own job is created.
    own = as_(cl.admin_token, cl.ids[2])("POST", "/v1/jobs", job("b-own", "b"), headers=key)
    assert own.status_code == 201 and own.json()["id"] == "b-own", own.text

    # The same principal and the same request: the stored answer, visible to a, redacted.
    again = a("POST", "/v1/jobs", http_job("a-billing", "a"), headers=key)
    assert again.status_code == 201, again.text
    assert again.json()["target"]["http"]["headers"]["Authorization"] == "***"
    # The same principal, the same key, another request: 422.
    other = a("POST", "/v1/jobs", http_job("a-other", "a"), headers=key)
    err = refused(other, 422, "idempotency_key_reused")
    assert err["field"] == "Idempotency-Key"
    assert a("GET", "/v1/jobs/a-other").status_code == 404


def test_replayed_writes_are_bound_to_the_body_for_every_write(
        cl: LocalCluster, tokens: dict[str, str], as_: Any) -> None:
    a = as_(tokens["a"])
    assert a("POST", "/v1/jobs", job("a-trig", "a")).status_code == 201
    key = {"Idempotency-Key": "run-1"}
    t1 = a("POST", "/v1/jobs/a-trig/trigger", {}, headers=key)
    t2 = a("POST", "/v1/jobs/a-trig/trigger", {}, headers=key)
    assert t1.status_code == t2.status_code == 202 and t1.json()["id"] == t2.json()["id"]
    refused(a("POST", "/v1/jobs/a-trig/trigger", {"override_overlap": True}, headers=key),
            422, "idempotency_key_reused")
    batch = {"jobs": [job("a-batch-1", "a")]}
    assert a("POST", "/v1/jobs:batchCreate", batch, headers=key).status_code == 200
    refused(a("POST", "/v1/jobs:batchCreate", {"jobs": [job("a-batch-2", "a")]},
              headers=key), 422, "idempotency_key_reused")
    assert a("GET", "/v1/jobs/a-batch-2").status_code == 404


# --- attack 3: a worker token for another queue --------------------------------------------

def test_a_worker_token_for_another_queue_cannot_touch_an_attempt(
        cl: LocalCluster, tokens: dict[str, str], as_: Any) -> None:
    admin = as_(cl.admin_token)
    assert admin("POST", "/v1/jobs", job("qb-job", "b", queue="qb")).status_code == 201
    occ = admin("POST", "/v1/jobs/qb-job/trigger", {}).json()
    qb = as_(tokens["qb"])
    got = qb("POST", "/v1/leases", {"worker_id": "wb", "queues": ["qb"], "wait_s": 10})
    (lease,) = got.json()["leases"]
    attempt, token = lease["attempt_id"], lease["fencing_token"]

    def attempt_now() -> dict[str, Any]:
        detail = admin("GET", f"/v1/occurrences/{occ['id']}?consistent=true").json()
        return detail["attempt_list"][0]

    before = attempt_now()
    for nid in cl.ids:  # through the leader and through followers
        qa = as_(tokens["qa"], nid)
        pair = {"attempt_id": attempt, "fencing_token": token}
        calls = [
            ("/v1/heartbeats", {"worker_id": "wb", "attempts": [pair]}, "attempts.0.attempt_id"),
            ("/v1/releases", {"worker_id": "wb", "attempts": [pair]}, "attempts.0.attempt_id"),
            ("/v1/completions", {"worker_id": "wb", "completions": [
                {**pair, "outcome": "succeeded", "exit_code": 0, "output": "forged"}]},
             "completions.0.attempt_id"),
            (f"/v1/attempts/{attempt}/heartbeat", {"worker_id": "wb", "fencing_token": token},
             "attempt_id"),
            (f"/v1/attempts/{attempt}/complete", {"worker_id": "wb", "fencing_token": token,
                                                  "outcome": "succeeded", "exit_code": 0},
             "attempt_id"),
        ]
        for path, body, field in calls:
            err = refused(qa("POST", path, body), 403, "forbidden")
            assert err["field"] == field, (path, err)
    assert attempt_now() == before  # still running, same heartbeat, no output

    # The token that may lease qb completes it.
    done = qb("POST", f"/v1/attempts/{attempt}/complete",
              {"worker_id": "wb", "fencing_token": token, "outcome": "succeeded",
               "exit_code": 0})
    assert done.status_code == 200 and done.json()["status"] == "succeeded", done.text


# --- attack 4: secrets in targets ------------------------------------------------------------

def test_only_admin_reads_target_secrets_and_the_worker_gets_them_in_its_lease(
        cl: LocalCluster, tokens: dict[str, str], as_: Any) -> None:
    admin = as_(cl.admin_token)
    url = f"https://bot:{URL_PASSWORD}@hooks.example.com/charge"
    created = admin("POST", "/v1/jobs", http_job("a-secret", "a", url=url, queue="sec"))
    assert created.status_code == 201
    assert created.json()["target"]["http"]["headers"]["Authorization"] == SECRET

    for who in ("read", "a"):
        for nid in cl.ids:
            reader = as_(tokens[who], nid)
            for path in ("/v1/jobs/a-secret?consistent=true", "/v1/jobs?tenant=a",
                         "/v1/jobs", "/v1/status/jobs"):
                resp = reader("GET", path)
                assert resp.status_code == 200, (who, path, resp.text)
                assert SECRET not in resp.text and URL_PASSWORD not in resp.text, (who, path)
            shown = reader("GET", "/v1/jobs/a-secret").json()["target"]["http"]
            assert shown["headers"] == {"Authorization": "***", "Accept": "***"}
            assert shown["url"] == "https://***@hooks.example.com/charge"
    # Another tenant does not even see the job.
    refused(as_(tokens["b"])("GET", "/v1/jobs/a-secret"), 404, "not_found")

    # The node token (derived from the cluster secret) reads the cluster view, and no job.
    node = as_(node_token((cl.root / "cluster.secret").read_text().strip()))
    assert node("GET", "/v1/cluster").status_code == 200
    for path in ("/v1/jobs", "/v1/jobs/a-secret", "/v1/status/jobs", "/v1/backup",
                 "/v1/occurrences"):
        refused(node("GET", path), 403, "forbidden")

    # The worker that runs it needs the real target: the lease carries it.
    admin("POST", "/v1/jobs/a-secret/trigger", {})
    worker = as_(cl.worker_token)
    (lease,) = worker("POST", "/v1/leases", {"worker_id": "ws", "queues": ["sec"],
                                              "wait_s": 10}).json()["leases"]
    assert lease["target"]["http"]["headers"]["Authorization"] == SECRET
    assert lease["target"]["http"]["url"] == url and lease["tenant"] == "a"
    worker("POST", "/v1/releases", {"worker_id": "ws", "attempts": [
        {"attempt_id": lease["attempt_id"], "fencing_token": lease["fencing_token"]}]})


def test_an_edit_that_sends_the_placeholder_back_keeps_the_secret_only_for_the_same_url(
        cl: LocalCluster, tokens: dict[str, str], as_: Any) -> None:
    admin, a = as_(cl.admin_token), as_(tokens["a"])
    assert admin("POST", "/v1/jobs", http_job("a-edit", "a")).status_code == 201
    shown = a("GET", "/v1/jobs/a-edit").json()
    edit = {k: shown[k] for k in ("tenant", "schedule", "target", "queue")}
    edit["max_attempts"] = 5
    put = a("PUT", "/v1/jobs/a-edit", edit)
    assert put.status_code == 200, put.text
    stored = admin("GET", "/v1/jobs/a-edit?consistent=true").json()
    assert stored["max_attempts"] == 5
    assert stored["target"]["http"]["headers"]["Authorization"] == SECRET

    # Pointing the job elsewhere with "***" would send the secret to a host the tenant
    # reads: refused, naming the header.
    edit["target"]["http"]["url"] = "https://collector.example.org/"
    edit["target"]["http"]["headers"]["Accept"] = "text/plain"  # sent again: not kept
    err = refused(a("PUT", "/v1/jobs/a-edit", edit), 400, "invalid")
    assert err["field"] == "target.http.headers.Authorization"
    # A new job has no stored secret to keep.
    err = refused(a("POST", "/v1/jobs", {**edit, "id": "a-new"}), 400, "invalid")
    assert err["field"] == "target.http.headers.Authorization"
    err = refused(a("POST", "/v1/jobs:batchCreate", {"jobs": [{**edit, "id": "a-new"}]}),
                  400, "invalid")
    assert err["field"] == "jobs[0].target.http.headers.Authorization"
    assert admin("GET", "/v1/jobs/a-edit").json()["target"]["http"]["url"] == \
        "https://hooks.example.com/charge"


# --- secret references: resolved on the worker, never in the log -----------------------------

class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.seen.append(self.headers.get("Authorization", ""))
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = f"echo {self.headers.get('Authorization')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_secret_reference_is_resolved_by_the_worker_and_never_stored(
        cl: LocalCluster, tokens: dict[str, str], as_: Any, tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    secrets = tmp_path / "secrets.json"
    value = "Bearer ref-only-9d3e51"
    secrets.write_text(json.dumps({"a/billing-api": value}))
    os.chmod(secrets, 0o600)
    a = as_(tokens["a"])
    target = {"http": {"url": f"http://127.0.0.1:{server.server_port}/hook",
                       "headers": {"Authorization": {"secret": "billing-api"}}}}
    assert a("POST", "/v1/jobs", job("a-ref", "a", target=target, queue="refs",
                                     max_attempts=1)).status_code == 201
    # A job of tenant b naming the same secret gets nothing: names resolve per tenant.
    b = as_(tokens["b"])
    assert b("POST", "/v1/jobs", job("b-ref", "b", target=target, queue="refs",
                                     max_attempts=1)).status_code == 201
    log = open(tmp_path / "worker.log", "ab")
    env = {k: v for k, v in os.environ.items() if k != "RAFTCRON_TOKEN"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "raftcron", "worker", "--server", ",".join(cl.urls.values()),
         "--queues", "refs", "--id", "ref-worker", "--token", cl.worker_token,
         "--secrets-file", str(secrets)], stdout=log, stderr=subprocess.STDOUT, env=env,
        start_new_session=True)
    try:
        occ_a = a("POST", "/v1/jobs/a-ref/trigger", {}).json()["id"]
        occ_b = b("POST", "/v1/jobs/b-ref/trigger", {}).json()["id"]

        def finished(client: As, occ: str) -> dict[str, Any] | None:
            d = client("GET", f"/v1/occurrences/{occ}").json()
            return d if d["status"] in ("succeeded", "failed") else None

        done_a = wait_until(lambda: finished(a, occ_a), 30, message="a's run finished")
        done_b = wait_until(lambda: finished(b, occ_b), 30, message="b's run finished")
    finally:
        worker.terminate()
        worker.wait(10)
        server.shutdown()
    assert done_a["status"] == "succeeded"
    assert _Recorder.seen == [value]  # sent once, by a's run only
    assert value not in json.dumps(done_a)  # the echoed secret is scrubbed from the output
    assert done_a["attempt_list"][0]["output"] == "echo ***"
    assert done_b["status"] == "failed"
    assert "unknown secret 'billing-api'" in done_b["attempt_list"][0]["output"]
    # The value is nowhere in any node's files (state, Raft journal, snapshots).
    for path in cl.root.rglob("*"):
        if path.is_file() and path != secrets and not path.name.endswith(".log"):
            assert value.encode() not in path.read_bytes(), path


def test_a_backfill_key_names_the_backfill_across_ranges_and_principals(
        cl: LocalCluster, tokens: dict[str, str], as_: Any) -> None:
    """`raftcron job backfill` sends one key with slice after slice: each slice is its own
    request, a repeated slice creates nothing, and another tenant cannot backfill."""
    a = as_(tokens["a"])
    assert a("POST", "/v1/jobs", job("a-bf", "a", schedule={"cron": "* * * * *"})).status_code \
        == 201
    key = {"Idempotency-Key": "bf-2026"}
    slices = [{"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:04:00Z"},
              {"start": "2026-01-01T00:05:00Z", "end": "2026-01-01T00:09:00Z"}]
    made = [a("POST", "/v1/jobs/a-bf/backfill", s, headers=key) for s in slices]
    assert [r.status_code for r in made] == [202, 202], [r.text for r in made]
    assert [r.json()["created"] for r in made] == [5, 5]
    again = a("POST", "/v1/jobs/a-bf/backfill", slices[0], headers=key)
    assert again.status_code == 202 and again.json()["created"] == 0
    assert again.json()["occurrence_ids"] == made[0].json()["occurrence_ids"]
    refused(as_(tokens["b"])("POST", "/v1/jobs/a-bf/backfill", slices[0], headers=key),
            403, "forbidden")


@pytest.mark.parametrize("content, mode, says", [
    ('{"a/x": "v"}', 0o644, "chmod 600"),
    ('["not", "a", "map"]', 0o600, "JSON object"),
])
def test_a_worker_with_an_unusable_secrets_file_exits_2_with_one_line(
        tmp_path: Path, content: str, mode: int, says: str) -> None:
    secrets = tmp_path / "secrets.json"
    secrets.write_text(content)
    os.chmod(secrets, mode)
    out = subprocess.run(
        [sys.executable, "-m", "raftcron", "worker", "--server", "http://127.0.0.1:9",
         "--token", "rc_x", "--secrets-file", str(secrets)],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and says in out.stderr, out.stderr
