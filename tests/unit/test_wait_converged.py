"""`LocalCluster.wait_converged` compares the nodes at one digest mark.

The nodes here are answered by an in-process transport standing in for their HTTP API
(the harness is the code under test; the marks themselves are tested on real nodes in
tests/system/test_digest_marks.py). Each node applies the mark at the same index, while
its applied index keeps moving, which a digest read at "the same moment" cannot compare.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftcron import testing
from raftcron.testing import LocalCluster

NODES = ("n1", "n2", "n3")
DIGESTING = "digesting"


class FakeNodes:
    """Three nodes' `/v1/cluster` and digest mark endpoints; `digest_of(node, mark_no)`
    answers each node's digest at a mark, None while it has not applied it, or DIGESTING
    while it has applied it and is digesting it (api.digest_marks answers 404 both ways,
    naming the index in the second)."""

    def __init__(self, digest_of: Callable[[str, int], str | None]) -> None:
        self.digest_of = digest_of
        self.marks: list[str] = []
        self.index = 100

    def handler(self, urls: dict[str, str]) -> Callable[[httpx.Request], httpx.Response]:
        by_port = {httpx.URL(u).port: nid for nid, u in urls.items()}

        def handle(request: httpx.Request) -> httpx.Response:
            nid = by_port[request.url.port]
            path = request.url.path
            if path == "/v1/cluster":
                return httpx.Response(200, json={"role": "leader" if nid == "n2"
                                                 else "follower"})
            if path == "/v1/digest/marks" and request.method == "POST":
                assert nid == "n2", "the mark goes through the leader"
                self.index += 7  # the cluster kept applying since the last one
                mark = f"digest-mark-{len(self.marks):032x}"
                self.marks.append(mark)
                return httpx.Response(201, json={"mark": mark, "index": self.index})
            mark = path.rsplit("/", 1)[-1]
            number = self.marks.index(mark)
            digest = self.digest_of(nid, number)
            index = 107 + 7 * number
            if digest is None:
                return httpx.Response(404, json={"error": {"code": "not_found"}})
            if digest == DIGESTING:
                return httpx.Response(404, json={"error": {"code": "not_found",
                                                           "index": index}})
            return httpx.Response(200, json={"mark": mark, "index": index,
                                             "digest": digest, "node_id": nid})

        return handle


def _cluster(tmp_path: Path, nodes: FakeNodes) -> LocalCluster:
    c = LocalCluster(tmp_path)
    c.procs = dict.fromkeys(NODES)  # type: ignore[arg-type]
    c.http = httpx.Client(transport=httpx.MockTransport(nodes.handler(c.urls)))
    return c


def test_equal_digests_at_the_mark_are_answered_with_its_index(tmp_path: Path) -> None:
    nodes = FakeNodes(lambda nid, n: "d" * 64)
    out = _cluster(tmp_path, nodes).wait_converged(timeout=5)
    assert out == {nid: {"node_id": nid, "last_applied_index": 107, "digest": "d" * 64}
                   for nid in NODES}
    assert len(nodes.marks) == 1


def test_different_digests_at_one_mark_fail_at_once(tmp_path: Path) -> None:
    nodes = FakeNodes(lambda nid, n: ("x" if nid == "n3" else "d") * 64)
    with pytest.raises(AssertionError, match="digests differ at digest mark"):
        _cluster(tmp_path, nodes).wait_converged(timeout=30)
    assert len(nodes.marks) == 1


def test_a_node_that_never_digests_a_mark_gets_a_new_one(tmp_path: Path,
                                                         monkeypatch: Any) -> None:
    # n3 never digests the first mark (a snapshot carried it past the mark), then does.
    monkeypatch.setattr(testing, "MARK_RETRY_S", 0.5)
    nodes = FakeNodes(lambda nid, n: None if (nid, n) == ("n3", 0) else f"{n}" * 64)
    out = _cluster(tmp_path, nodes).wait_converged(timeout=10)
    assert len(nodes.marks) == 2
    assert {v["last_applied_index"] for v in out.values()} == {114}


def test_the_timeout_names_the_node_that_did_not_answer_and_is_kept(
        tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(testing, "MARK_RETRY_S", 0.5)
    nodes = FakeNodes(lambda nid, n: None if nid == "n1" else "d" * 64)
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"n1: HTTP 404"):
        _cluster(tmp_path, nodes).wait_converged(timeout=2)
    # Bounded by the timeout, give or take one round of reads (loose: a shared machine).
    assert time.monotonic() - began < 2 + 3


def test_a_node_still_digesting_the_mark_is_waited_for_without_a_new_mark(
        tmp_path: Path, monkeypatch: Any) -> None:
    # A large state: n3 applied the mark and digests it for longer than MARK_RETRY_S. A
    # new mark would only queue behind that one.
    monkeypatch.setattr(testing, "MARK_RETRY_S", 0.3)
    done_at = time.monotonic() + 1.5

    def digest_of(nid: str, n: int) -> str:
        if nid == "n3" and time.monotonic() < done_at:
            return DIGESTING
        return "d" * 64

    nodes = FakeNodes(digest_of)
    out = _cluster(tmp_path, nodes).wait_converged(timeout=10)
    assert len(nodes.marks) == 1
    assert {v["digest"] for v in out.values()} == {"d" * 64}
