"""Property-based fuzzing of the HTTP API of a real node with schemathesis.

The schema is loaded from a running node's `/openapi.json`; every operation gets a bounded
number of generated requests (valid and invalid) sent with the admin token. No response
may be a 5xx other than the documented 503 (no leader / outcome unknown, with Retry-After),
and the nodes' digests must be equal afterwards. No worker runs: fuzzed shell jobs never
execute. Needs the `fuzz` extra (`pip install -e '.[fuzz]'`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    assert sent >= len(operations)
    assert not server_errors, f"{len(server_errors)} server errors:\n" + "\n".join(server_errors)
