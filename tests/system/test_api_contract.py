"""The API contract over real HTTP: 405 answers name the allowed methods, and
/openapi.json says what the server does (schemathesis with every check)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raftcron.testing import LocalCluster

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One real node (a cluster of one) with the admin token."""
    c = LocalCluster(Path(tmp_path_factory.mktemp("contract")), nodes=1)
    c.start()
    try:
        c.wait_leader(timeout=30)
        c.wait_serving()
        yield c
    finally:
        c.close()


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
