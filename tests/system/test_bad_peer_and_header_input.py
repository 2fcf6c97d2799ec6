"""Input that used to be accepted and then failed later, on real nodes (issue 40 §6):

- a peer answering nonsense to `/v1/cluster` (`{}`, a list, strings for numbers, an error
  status) made `GET /v1/cluster/nodes` answer 500; it is now that peer's error;
- an HTTP target header no request can carry (a NUL in the value, the name `X Y:`) was
  stored (201) and failed every run; it is now refused with 400 naming the header;
- a TLS node given an `http://` peer URL started and sent its node token in clear; it
  now refuses to start.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest

from raftcron.testing import LocalCluster, self_signed_cert
from tests.system.helpers import serving_cluster

pytestmark = pytest.mark.system


class FakePeer:
    """What n1 believes is n3's HTTP address: it answers `GET /v1/cluster` with `answer`
    (status, body) when one is set and passes every other request (and that one while
    `answer` is None) to the real n3, so that clock probes, protocol levels and
    forwarding keep working and the cluster stays healthy."""

    def __init__(self) -> None:
        self.answer: tuple[int, bytes] | None = None
        self.real_url = ""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _relay(self) -> None:
                answer = fake.answer
                if (answer is not None and self.command == "GET"
                        and self.path.split("?")[0] == "/v1/cluster"):
                    status, body = answer
                else:
                    length = int(self.headers.get("Content-Length") or 0)
                    sent = self.rfile.read(length) if length else None
                    keep = {k: v for k, v in self.headers.items()
                            if k.lower() in ("authorization", "content-type")}
                    resp = httpx.request(self.command, fake.real_url + self.path,
                                         content=sent, headers=keep, timeout=10)
                    status, body = resp.status_code, resp.content
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _relay  # noqa: N815 - http.server's names

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakePeer]:
    peer = FakePeer()
    try:
        yield peer
    finally:
        peer.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, fake: FakePeer
            ) -> Iterator[LocalCluster]:
    def point_n1_at_the_fake(c: LocalCluster) -> None:
        fake.real_url = c.urls["n3"]
        config = c.configs[0]
        text = config.read_text()
        assert text.count(c.urls["n3"]) == 1
        config.write_text(text.replace(c.urls["n3"], fake.url))

    with serving_cluster(Path(tmp_path_factory.mktemp("bad-input")),
                         point_n1_at_the_fake) as c:
        yield c


GOOD_FIELDS = {"role", "commit_index", "last_applied_index", "now_ms"}


def bad_answers(real_view: dict[str, Any]) -> list[tuple[int, bytes, str]]:
    """(status, body, what the error of n3's entry says) for every way a peer answer can
    be wrong."""
    def view(**changes: Any) -> bytes:
        return json.dumps({**real_view, **changes}).encode()

    return [
        (200, b"{}", "no node_id"),
        (200, b"[]", "not a JSON object"),
        (200, b"null", "not a JSON object"),
        (200, b"not json", "JSONDecodeError"),
        (200, view(node_id="n2"), "the view of node 'n2', not 'n3'"),
        (200, view(node_id=7), "the view of node '7', not 'n3'"),
        (200, view(commit_index="12"), "commit_index is not an integer"),
        (200, view(last_applied_index=1.5, role="leader"),
         "last_applied_index is not an integer"),
        (200, view(now_ms=True), "now_ms is not an integer"),
        (200, view(role=["leader"]), "role is not a string"),
        (401, b'{"error": {"code": "unauthorized", "message": "who are you"}}', "HTTP 401"),
        (500, b"{}", "HTTP 500"),
    ]


def test_a_bad_peer_answer_is_that_peers_error_never_a_500(cluster: LocalCluster,
                                                           fake: FakePeer) -> None:
    real_view = cluster.http.get(cluster.urls["n3"] + "/v1/cluster").json()
    assert GOOD_FIELDS <= set(real_view)
    # The fake relaying n3's own view: n3 is listed as a node like the others.
    fake.answer = None
    resp = cluster.http.get(cluster.urls["n1"] + "/v1/cluster/nodes")
    assert resp.status_code == 200, resp.text
    nodes = {n["node_id"]: n for n in resp.json()["nodes"]}
    assert nodes["n3"]["reachable"] is True and nodes["n3"]["http_url"] == fake.url
    for status, body, error in bad_answers(real_view):
        fake.answer = (status, body)
        resp = cluster.http.get(cluster.urls["n1"] + "/v1/cluster/nodes")
        assert resp.status_code == 200, (body, resp.status_code, resp.text)
        listing = resp.json()
        nodes = {n["node_id"]: n for n in listing["nodes"]}
        assert sorted(nodes) == ["n1", "n2", "n3"], (body, listing)
        assert nodes["n3"]["reachable"] is False, (body, nodes["n3"])
        assert error in nodes["n3"]["error"], (body, nodes["n3"])
        assert nodes["n3"]["replication_lag"] is None
        # The others are shown as they are, with the leader known.
        assert nodes["n1"]["reachable"] and nodes["n2"]["reachable"], (body, listing)
        assert listing["leader_id"] in ("n1", "n2", "n3")
    fake.answer = None


BAD_HEADERS = [("X-Nul", "a\x00b", "'X-Nul' holds the control character U+0000"),
               ("X Y:", "1", "header name 'X Y:' is not an HTTP token"),
               ("X-Esc", "a\x1bb", "'X-Esc' holds the control character U+001B"),
               ("X-Utf", "caf\u00e9", "'X-Utf' holds the non-ASCII character U+00E9"),
               ("X-End", "a ", "'X-End' starts or ends with a space or tab")]


def http_job(job_id: str, headers: dict[str, Any]) -> dict[str, Any]:
    return {"id": job_id, "schedule": {"cron": "0 9 * * *"},
            "target": {"http": {"url": "https://hooks.example/x", "headers": headers}}}


def assert_refused(resp: httpx.Response, message: str) -> None:
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["field"] == "target.http.headers", error
    assert message in error["message"], error


@pytest.mark.parametrize(("name", "value", "message"), BAD_HEADERS)
def test_an_unsendable_header_is_refused_with_400_naming_it(
        cluster: LocalCluster, name: str, value: str, message: str) -> None:
    leader = cluster.wait_leader()
    job_id = "hdr-" + "".join(ch for ch in name if ch.isalnum())
    headers = {"X-Fine": "ok", name: value}
    assert_refused(cluster.post(leader, "/v1/jobs", http_job(job_id, headers)), message)
    assert cluster.http.get(f"{cluster.urls[leader]}/v1/jobs/{job_id}").status_code == 404
    batch = {"jobs": [http_job(f"{job_id}-b", {"X-A": "1"}), http_job(job_id, headers)]}
    resp = cluster.post(leader, "/v1/jobs:batchCreate", batch)
    assert resp.status_code == 400 and message in resp.text, resp.text
    assert cluster.http.get(
        f"{cluster.urls[leader]}/v1/jobs/{job_id}-b").status_code == 404
    # An edit cannot bring one in either.
    assert cluster.post(leader, "/v1/jobs", http_job(job_id, {"X-A": "1"})).status_code == 201
    edit = cluster.http.put(f"{cluster.urls[leader]}/v1/jobs/{job_id}",
                            json=http_job(job_id, headers))
    assert_refused(edit, message)
    stored = cluster.get(leader, f"/v1/jobs/{job_id}")
    assert stored["target"]["http"]["headers"] == {"X-A": "1"}
    assert cluster.http.delete(f"{cluster.urls[leader]}/v1/jobs/{job_id}").status_code == 200


def test_the_served_schema_refuses_the_same_headers(cluster: LocalCluster) -> None:
    spec = cluster.http.get(cluster.urls["n1"] + "/openapi.json").json()
    validator = jsonschema_rs.validator_for(_find_headers_schema(spec))
    for name, value, _ in BAD_HEADERS:
        assert not validator.is_valid({"X-Fine": "ok", name: value}), name
    assert validator.is_valid({"X-A": "1", "X-Tab": "a\tb", "Authorization": "Bearer x"})
    assert validator.is_valid({"X-Key": {"secret": "api-key"}})


def _find_headers_schema(spec: Any) -> dict[str, Any]:
    """The `headers` schema of the HTTP target, wherever the spec keeps it."""
    stack = [spec]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found = node.get("headers")
            if isinstance(found, dict) and "propertyNames" in found:
                return found
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    raise AssertionError("no headers schema in /openapi.json")


def test_a_tls_node_with_an_http_peer_url_does_not_start(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path)
    cert, key = self_signed_cert(tmp_path)
    c.enable_tls(cert, key)
    config = c.configs[0]
    text = config.read_text()
    n2_url = c.urls["n2"]  # https:// now
    config.write_text(text.replace(f'http_url = "{n2_url}"',
                                   f'http_url = "{n2_url.replace("https://", "http://")}"'))
    res = subprocess.run([sys.executable, "-m", "raftcron", "node", "--config", str(config)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("raftcron: config peer 'n2' has http_url 'http://"), lines
    assert "serves TLS" in lines[0]
    assert not (tmp_path / "n1").exists()  # it stopped before making anything
    c.http.close()
