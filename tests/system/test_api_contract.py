"""The API contract over real HTTP: 405 answers name the allowed methods, and
/openapi.json says what the server does (schemathesis with every check)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftcron.testing import LocalCluster
from tests.system.helpers import serving_cluster
from tests.system.schemathesis_hooks import prepare_node

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One real node (a cluster of one) with the admin token."""
    with serving_cluster(Path(tmp_path_factory.mktemp("contract")), nodes=1) as c:
        prepare_node(c)  # what references in generated bodies are pointed at
        yield c


# (method, path, every method the path serves): paths served by several routes, one
# route, a path parameter that spans slashes, the metrics and health routes, static files.
NOT_ALLOWED = [
    ("DELETE", "/v1/jobs", "GET, HEAD, POST"),
    ("PATCH", "/v1/jobs/some-job", "GET, HEAD, PUT, DELETE"),
    ("GET", "/v1/leases", "POST"),
    ("PUT", "/metrics", "GET, HEAD"),
    ("POST", "/healthz", "GET, HEAD"),
    ("GET", "/v1/alerts/missed:a/b/ack", "POST"),
    ("DELETE", "/v1/tenants/acme", "GET, HEAD, PUT"),
    ("POST", "/v1/cluster/members/n9", "DELETE"),
    ("DELETE", "/web/index.html", "GET, HEAD"),
]


@pytest.mark.parametrize(("method", "path", "allowed"), NOT_ALLOWED)
def test_405_names_every_method_the_path_serves(node: LocalCluster, method: str, path: str,
                                               allowed: str) -> None:
    resp = node.http.request(method, node.urls["n1"] + path)
    assert resp.status_code == 405, resp.text
    assert resp.headers.get("allow") == allowed
    assert resp.headers["content-type"].startswith("application/json")
    error = resp.json()["error"]
    assert error["code"] == "method_not_allowed"
    assert method in error["message"] and allowed in error["message"]


def test_allowed_methods_are_served_not_refused(node: LocalCluster) -> None:
    """Each method an `Allow` names is routed (whatever the answer, never 405)."""
    url = node.urls["n1"]
    for _, path, allowed in NOT_ALLOWED:
        for method in allowed.split(", "):
            if method in ("GET", "HEAD"):  # writes are exercised elsewhere
                resp = node.http.request(method, url + path)
                assert resp.status_code != 405, (method, path, resp.text)


# --- conformance: schemathesis with every check ---------------------------------------------

HERE = Path(__file__).resolve().parent
# Bounded for CI on 2 shared cores: cases per operation, and the seconds each part may take
# (fuzzing repeats until its time is spent; the coverage phase runs first and in full).
# RAFTCRON_CONFORMANCE_SEED replays (or varies) a run.
CONFORMANCE_MAX_EXAMPLES = int(os.environ.get("RAFTCRON_CONFORMANCE_EXAMPLES", "20"))
CONFORMANCE_SEED = os.environ.get("RAFTCRON_CONFORMANCE_SEED", "2")
# (phases, seconds, fewest cases that make the part count): the coverage phase alone sends
# about a thousand; the stateful one, run after it, builds sequences of calls (fewer on a
# loaded machine) reaching the jobs and tenants that fuzzing created.
# RAFTCRON_CONFORMANCE_SECONDS lengthens the first part (e.g. 120 for a long run).
CONFORMANCE_PARTS = [
    ("coverage,fuzzing", int(os.environ.get("RAFTCRON_CONFORMANCE_SECONDS", "50")), 500),
    ("stateful", 20, 20)]
CLIENT_TIMEOUT_S = 10  # as a generated client would wait; the long poll is shortened


def _schemathesis(node: LocalCluster, cwd: Path, phases: str, max_time_s: int
                  ) -> tuple[int, str]:
    command = [
        str(Path(sys.executable).with_name("schemathesis")), "--no-color",
        "--config-file", str(HERE / "schemathesis.toml"),
        "run", f"{node.urls['n1']}/openapi.json", "--checks", "all", "--phases", phases,
        "-H", f"Authorization: Bearer {node.admin_token}",
        "--max-examples", str(CONFORMANCE_MAX_EXAMPLES), "--max-time", str(max_time_s),
        "--seed", CONFORMANCE_SEED, "--request-timeout", str(CLIENT_TIMEOUT_S),
        "--generation-database", "none",
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.system.schemathesis_hooks",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent.parent),
                                                       os.environ.get("PYTHONPATH")]))}
    run = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=max_time_s + 60)
    return run.returncode, run.stdout + run.stderr


def test_schemathesis_with_every_check_finds_nothing(node: LocalCluster,
                                                     tmp_path: Path) -> None:
    """Every operation of /openapi.json, positive and negative cases, every check
    (status codes, content types, schemas, valid data accepted, invalid data refused,
    405 with Allow, auth enforced, ...): any finding fails. The one exclusion, the long
    poll, is declared in the schema (`x-long-poll`) and applied by schemathesis_hooks;
    membership changes get invalid requests only (schemathesis.toml)."""
    pytest.importorskip("schemathesis")
    for phases, max_time_s, fewest in CONFORMANCE_PARTS:
        code, report = _schemathesis(node, tmp_path, phases, max_time_s)
        summary = report[report.rfind("SUMMARY"):] if "SUMMARY" in report else report[-3000:]
        print(f"\nschemathesis {phases} (seed {CONFORMANCE_SEED}):\n{summary}")
        assert code == 0, report[-20_000:]
        cases = re.search(r"\b(\d+) generated, \1 passed", report)
        assert cases and int(cases.group(1)) >= fewest, summary
        if phases.startswith("coverage"):  # every operation of the schema was tested
            operations = sum(len(ops) for ops in node.http.get(
                node.urls["n1"] + "/openapi.json").json()["paths"].values())
            selected = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)\n", report)
            assert selected and len(set(selected.groups())) == 1, summary
            # schemathesis may leave out the schema's own URL (GET /openapi.json)
            assert int(selected.group(1)) >= operations - 1, (operations, summary)
    # The fuzzing left the node serving (no membership change took its quorum away).
    assert node.http.get(node.urls["n1"] + "/readyz").status_code == 200
