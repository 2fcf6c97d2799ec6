"""Property-based fuzzing of the HTTP API of a real node with schemathesis.

The schema is loaded from a running node's `/openapi.json`; every operation gets a bounded
number of generated requests (valid and invalid) sent with the admin token. No response
may be a 5xx other than the documented 503 (no leader / outcome unknown, with Retry-After),
and the nodes' digests must be equal afterwards. No worker runs: fuzzed shell jobs never
execute. Needs the `fuzz` extra (`pip install -e '.[fuzz]'`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

from raftcron.testing import LocalCluster  # noqa: E402

pytestmark = pytest.mark.system

MAX_EXAMPLES = int(os.environ.get("RAFTCRON_FUZZ_EXAMPLES", "40"))
LONG_POLL_CAP_S = 0.2


@pytest.fixture(scope="module")
def fuzz_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(Path(tmp_path_factory.mktemp("fuzz")))
    c.start()
    try:
        c.wait_leader(timeout=30)
        c.wait_converged(timeout=30)  # every node answers HTTP
        yield c
    finally:
        c.close()


def _auth(c: LocalCluster) -> dict[str, str]:
    token = getattr(c, "admin_token", None)
    return {"Authorization": f"Bearer {token}"} if token else {}


def _operations(c: LocalCluster) -> tuple[str, list[Any]]:
    # A follower: its writes go through Raft forwarding, the longer path.
    nid = next(n for n in c.ids if n != c.leader())
    url = c.urls[nid]
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", headers=_auth(c),
                                           timeout=10)
    operations = [result.ok() for result in schema.get_all_operations()]
    # Membership changes would fuzz the cluster's topology itself: not through this test.
    return url, [op for op in operations if not (op.path.startswith("/v1/cluster/members")
                                                 and op.method.upper() != "GET")]


def _strategy(operation: Any) -> Any:
    modes = [operation.as_strategy(GenerationMode.POSITIVE)]
    try:
        modes.append(operation.as_strategy(GenerationMode.NEGATIVE))
    except Exception:  # noqa: BLE001 - some operations have nothing to negate
        pass
    return st.one_of(*modes)


def test_api_fuzz_no_server_error_and_equal_digests(fuzz_cluster: LocalCluster) -> None:
    url, operations = _operations(fuzz_cluster)
    assert len(operations) >= 20
    headers = _auth(fuzz_cluster)
    server_errors: list[str] = []
    sent = 0

    def send(case: Any) -> None:
        nonlocal sent
        if case.path == "/v1/leases" and isinstance(case.body, dict):
            wait = case.body.get("wait_s")
            if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > 0:
                case.body["wait_s"] = min(wait, LONG_POLL_CAP_S)  # keep the run bounded
        response = case.call(base_url=url, headers=headers, timeout=40)
        sent += 1
        if response.status_code == 503 and response.headers.get("Retry-After"):
            return  # documented: no leader, or the outcome is unknown (retry)
        try:
            case.validate_response(response, checks=[not_a_server_error])
        except AssertionError:
            server_errors.append(
                f"{case.method} {case.formatted_path} query={case.query!r} "
                f"body={case.body!r} -> {response.status_code} {response.text[:300]}")

    for operation in operations:
        run = settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
                       suppress_health_check=list(HealthCheck))(given(_strategy(operation))(send))
        run()
    digests = fuzz_cluster.wait_converged(timeout=60)
    assert len(digests) == 3
    print(f"\nschemathesis fuzz: {sent} requests over {len(operations)} operations, "
          f"{len(server_errors)} 5xx")
    assert sent >= len(operations)
    assert not server_errors, f"{len(server_errors)} server errors:\n" + "\n".join(server_errors)


# --- hand-made hostile shapes, sent to every operation -------------------------------------

HOSTILE_INSTANTS = [
    "9999-12-31T23:59:59-23:59",  # local year 9999, UTC year 10000
    "9999-12-31T23:59:59.999Z", "9999-12-31T00:00:00-23:59", "0000-01-01T00:00:00Z",
    "0001-01-01T00:00:00+23:59", "1969-12-31T23:59:59Z", "1970-01-01T00:00:00+23:59",
    "1970-01-01T00:00:00Z", "2016-12-31T23:59:60Z", "2026-06-30T23:59:60+00:00",
    "2026-01-01T00:00:00+23:59:59.999999", "2026-01-01T00:00:00-23:59:59",
    "2026-01-01T00:00:00+24:00", "2026-01-01T00:00:00+99:99", "+10000-01-01T00:00:00Z",
    "2026-01-01T00:00:00", "2026-01-01", "", "Z", "9" * 64, "9" * 65,
]
HUGE_STRING = "x" * 900_000  # the body stays under the 1 MiB cap


def _job(job_id: str = "fuzz-new", **schedule: Any) -> dict[str, Any]:
    return {"id": job_id, "schedule": {"cron": "0 9 * * *", **schedule},
            "target": {"shell": "true"}}


def hostile_bodies() -> list[tuple[str, bytes]]:
    """(label, raw body): malformed, oversized, deep, and valid JSON with hostile values."""
    out: list[tuple[str, bytes]] = [
        ("empty", b""),
        ("whitespace", b"  \n "),
        ("brackets x200000", b"[" * 200_000),
        ("objects x100000", b'{"a":' * 100_000),
        ("closed brackets x33", b"[" * 33 + b"]" * 33),
        ("body over 1 MiB", json.dumps({"id": "x" * (2 << 20)}).encode()),
        ("not UTF-8", b"\xff\xfe{}"),
        ("NaN", b'{"wait_s": NaN, "jitter_s": NaN}'),
        ("1e999", b'{"wait_s": 1e999, "max": 1e999}'),
        ("lone surrogate", b'{"id": "\\ud800", "worker_id": "\\udfff"}'),
        ("huge integer", b'{"max": 1' + b"0" * 5000 + b"}"),
        ("huge string id", json.dumps(_job(HUGE_STRING)).encode()),
        ("huge shell", json.dumps(_job() | {"target": {"shell": HUGE_STRING}}).encode()),
        ("huge keys", json.dumps({HUGE_STRING: 1}).encode()),
        ("huge worker id", json.dumps({"worker_id": HUGE_STRING, "queues": ["q"]}).encode()),
    ]
    for i, text in enumerate(HOSTILE_INSTANTS):
        out.append((f"start_at {text!r}", json.dumps(_job(f"fz-s{i}", start_at=text)).encode()))
        out.append((f"end_at {text!r}", json.dumps(_job(f"fz-e{i}", end_at=text)).encode()))
        out.append((f"backfill {text!r}", json.dumps(
            {"start": text, "end": "2026-01-02T00:00:00Z"}).encode()))
        out.append((f"backfill end {text!r}", json.dumps(
            {"start": "2026-01-01T00:00:00Z", "end": text}).encode()))
    out.append(("backfill over centuries", json.dumps(
        {"start": "1970-01-01T00:00:00Z", "end": "9999-12-31T23:59:59.999Z"}).encode()))
    return out


def hostile_query_values() -> list[str]:
    return [*HOSTILE_INSTANTS, "x" * 10_000, "-1", "0", "1" * 400, "\x00", "%", "true"]


def _path(template: str, method: str) -> str:
    """The path with its parameters filled: the fuzz job (so that validation is reached),
    except for DELETE, which gets another id."""
    value = "fuzz-other" if method == "DELETE" else "fuzz-job"
    return re.sub(r"\{[^}]+\}", value, template)


def test_hostile_shapes_get_no_server_error(fuzz_cluster: LocalCluster) -> None:
    c = fuzz_cluster
    nid = next(n for n in c.ids if n != c.leader())
    url = c.urls[nid]
    assert c.post(nid, "/v1/jobs", {**_job("fuzz-job"), "paused": True}).status_code in (
        201, 409)
    spec = c.http.get(url + "/openapi.json").json()
    bodies = hostile_bodies()
    queries = hostile_query_values()
    sent = 0
    server_errors: list[str] = []

    def send(method: str, path: str, label: str = "", **kw: Any) -> None:
        nonlocal sent
        try:
            response = c.http.request(method, url + path, timeout=40, **kw)
        except httpx.HTTPError as e:  # a dropped connection is as bad as a 5xx
            server_errors.append(f"{method} {path} {label} {kw.get('params')} -> {e!r}")
            sent += 1
            return
        sent += 1
        if response.status_code >= 500 and not (
                response.status_code == 503 and response.headers.get("Retry-After")):
            server_errors.append(f"{method} {path} {label} {kw.get('params')} -> "
                                 f"{response.status_code} {response.text[:200]}")

    for template, ops in spec["paths"].items():
        for method, op in ops.items():
            method = method.upper()
            if template.startswith("/v1/cluster/members") and method == "DELETE":
                continue  # the cluster's own topology: not through this test
            path = _path(template, method)
            if method in ("POST", "PUT"):
                for label, raw in bodies:
                    send(method, path, content=raw,
                         headers={"Content-Type": "application/json"}, label=label)
            names = [p["name"] for p in op.get("parameters", []) if p["in"] == "query"]
            for name in names or ["x"]:
                for value in queries:
                    if method == "GET":
                        send(method, path, params={name: value})
    digests = c.wait_converged(timeout=60)
    print(f"\nhostile shapes: {sent} requests ({len(bodies)} bodies x every POST/PUT, "
          f"{len(queries)} values x every GET query parameter), {len(server_errors)} 5xx")
    assert len(digests) == 3
    assert sent > 500
    assert not server_errors, f"{len(server_errors)} server errors:\n" + "\n".join(
        server_errors[:50])
