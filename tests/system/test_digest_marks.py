"""Digest marks on a real three-node cluster that keeps applying (jobs firing every second,
a worker running them): every node reports its digest at the mark's one index, and they
are equal; only admin may make or read marks; unknown and malformed ids are refused with a
JSON body naming the field."""

from __future__ import annotations

import time
from typing import Any

import pytest

from raftcron.state.digest_marks import new_mark
from raftcron.testing import LocalCluster, compare_at_mark, wait_until
from tests.system.helpers import add_job

pytestmark = pytest.mark.system


def _busy(c: LocalCluster) -> str:
    """Jobs firing every second and a worker running them: the nodes keep applying."""
    leader = c.wait_leader()
    for i in range(4):
        add_job(c, leader, f"tick-{i}")
    c.start_worker("w1")
    time.sleep(3)
    return leader


def _read_everywhere(c: LocalCluster, mark: str) -> dict[str, dict[str, Any]]:
    answers: dict[str, dict[str, Any]] = {}

    def all_answered() -> bool:
        for nid, url in c.urls.items():
            if nid not in answers:
                resp = c.http.get(f"{url}/v1/digest/marks/{mark}")
                if resp.status_code == 200:
                    answers[nid] = resp.json()
                else:
                    assert resp.status_code == 404, resp.text
        return len(answers) == len(c.urls)

    wait_until(all_answered, 20, interval=0.2, message=f"every node's digest at {mark}")
    return answers


def test_every_node_reports_the_same_digest_at_the_marks_index(cluster: LocalCluster) -> None:
    leader = _busy(cluster)
    follower = next(n for n in cluster.ids if n != leader)
    results = []
    for via in (follower, leader):
        resp = cluster.post(via, "/v1/digest/marks")
        assert resp.status_code == 201, resp.text
        made = resp.json()
        assert resp.headers["location"] == f"/v1/digest/marks/{made['mark']}"
        # The node that was asked answers once it has its own digest too.
        assert made["node_id"] == via and len(made["digest"]) == 64
        answers = _read_everywhere(cluster, made["mark"])
        assert {a["node_id"] for a in answers.values()} == set(cluster.ids)
        assert {(a["mark"], a["index"], a["digest"]) for a in answers.values()} == {
            (made["mark"], made["index"], made["digest"])}
        results.append(made)
        # A manual run between the two marks: the state surely changes in between (a
        # tick claimed within the half second is likely, not certain).
        fired = cluster.post(leader, "/v1/jobs/tick-0/trigger", {})
        assert fired.status_code in (200, 201, 202), fired.text
    # The state moved on between the two marks: the digests describe the state at each
    # index, not a constant.
    assert results[1]["index"] > results[0]["index"]
    assert results[1]["digest"] != results[0]["digest"]
    # And it keeps moving: every node applies past the marks, so two `/v1/digest` reads
    # would race, while the marks still compare.
    wait_until(lambda: all((cluster.cluster_view(n) or {}).get("last_applied_index", 0)
                           > results[1]["index"] for n in cluster.ids), 10,
               message="every node past the second mark")


def test_the_harness_compares_one_mark_on_every_node(cluster: LocalCluster) -> None:
    leader = _busy(cluster)
    out = compare_at_mark(cluster.http, cluster.urls[leader], cluster.urls)
    assert set(out["digests"]) == set(cluster.ids)
    assert {(d["index"], d.get("digest")) for d in out["digests"].values()} == {
        (out["index"], out["digests"][leader]["digest"])}
    assert out["digests"][leader]["digest"] is not None
    # A node that cannot answer is recorded with its error, within the bound.
    urls = {**cluster.urls, "gone": "http://127.0.0.1:9"}
    out = compare_at_mark(cluster.http, cluster.urls[leader], urls, timeout_s=2)
    assert "no digest within 2 s" in out["digests"]["gone"]["error"]
    assert all("digest" in out["digests"][n] for n in cluster.ids)


def test_only_admin_makes_or_reads_marks_and_bad_ids_are_refused(
        cluster: LocalCluster) -> None:
    leader = cluster.wait_leader()
    url = cluster.urls[leader]
    made = cluster.post(leader, "/v1/digest/marks").json()
    for scopes in (("read",), ("worker",), ("tenant:acme",)):
        headers = cluster.auth_headers(cluster.create_token(*scopes))
        resp = cluster.http.post(f"{url}/v1/digest/marks", headers=headers)
        assert resp.status_code == 403, (scopes, resp.text)
        assert resp.json()["error"]["code"] == "forbidden"
        resp = cluster.http.get(f"{url}/v1/digest/marks/{made['mark']}", headers=headers)
        assert resp.status_code == 403, (scopes, resp.text)
    resp = cluster.http.post(f"{url}/v1/digest/marks", headers={"Authorization": "Bearer x"})
    assert resp.status_code == 401
    # An unknown mark is 404, a malformed one 400, each naming the field.
    unknown = new_mark()
    resp = cluster.http.get(f"{url}/v1/digest/marks/{unknown}")
    assert resp.status_code == 404
    error = resp.json()["error"]
    assert (error["code"], error["field"]) == ("not_found", "mark")
    assert unknown in error["message"]
    for bad in ("x", "digest-mark-", "digest-mark-" + "G" * 32, "digest-mark-" + "0" * 33,
                "barrier-" + "0" * 32):
        resp = cluster.http.get(f"{url}/v1/digest/marks/{bad}")
        assert resp.status_code == 400, (bad, resp.text)
        error = resp.json()["error"]
        assert (error["code"], error["field"]) == ("invalid", "mark"), bad
