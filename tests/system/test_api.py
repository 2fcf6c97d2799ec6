"""The HTTP API against real node processes: validation, status codes, idempotency."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Route

from raftcron.api.app import PAGE_PATHS, ROUTES
from raftcron.testing import LocalCluster, wait_until

pytestmark = pytest.mark.system

CLIENT_TIMEOUT = 15.0


def _never_500(resp: httpx.Response) -> None:
    assert resp.status_code != 500, f"{resp.request.method} {resp.request.url} answered 500"


class Api:
    """A client for one cluster that fails the test on any 500 response."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.c = cluster
        self.http = httpx.Client(timeout=CLIENT_TIMEOUT, headers=cluster.auth_headers(),
                                 event_hooks={"response": [_never_500]})

    def url(self, nid: str, path: str) -> str:
        return self.c.urls[nid] + path

    def request(self, method: str, nid: str, path: str, **kw: Any) -> httpx.Response:
        return self.http.request(method, self.url(nid, path), **kw)

    def get(self, nid: str, path: str, **kw: Any) -> httpx.Response:
        return self.request("GET", nid, path, **kw)

    def post(self, nid: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        if body is not None:
            kw["json"] = body
        return self.request("POST", nid, path, **kw)

    def put(self, nid: str, path: str, body: Any, **kw: Any) -> httpx.Response:
        return self.request("PUT", nid, path, json=body, **kw)

    def delete(self, nid: str, path: str, **kw: Any) -> httpx.Response:
        return self.request("DELETE", nid, path, **kw)

    def leader(self) -> str:
        return self.c.wait_leader(timeout=30)

    def follower(self) -> str:
        leader = self.leader()
        return next(n for n in self.c.ids if n != leader and n in self.c.procs)

    def create(self, nid: str, job_id: str, cron: str = "0 0 1 1 *", **extra: Any) -> dict:
        body = {"id": job_id, "schedule": {"cron": cron}, "target": {"shell": "true"}, **extra}
        resp = self.post(nid, "/v1/jobs", body)
        assert resp.status_code == 201, resp.text
        return resp.json()

    def close(self) -> None:
        self.http.close()


def assert_error(resp: httpx.Response, status: int, field: str | None = None,
                 code: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, (resp.status_code, resp.text)
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    err = resp.json()["error"]
    assert isinstance(err["code"], str) and err["code"]
    assert isinstance(err["message"], str) and err["message"]
    if field is not None:
        assert err.get("field") == field, err
    if code is not None:
        assert err["code"] == code, err
    return err


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    c = LocalCluster(Path(tmp_path_factory.mktemp("api")))
    c.start()
    a = Api(c)
    try:
        c.wait_leader(timeout=30)
        wait_until(lambda: all(c.cluster_view(n) for n in c.ids), 30, message="all nodes up")
        yield a
    finally:
        a.close()
        c.close()


def job_body(job_id: str, **schedule: Any) -> dict[str, Any]:
    return {"id": job_id, "schedule": {"cron": "0 0 1 1 *", **schedule},
            "target": {"shell": "true"}}


# --- validation -----------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "field"), [
    (job_body("v-cron", cron="61 * * * *"), "schedule.cron"),
    (job_body("v-cron2", cron="* * *"), "schedule.cron"),
    (job_body("v-tz", timezone="Mars/Olympus"), "schedule.timezone"),
    ({**job_body("v-unknown"), "colour": "blue"}, "colour"),
    (job_body("v-unknown2", every="1s"), "schedule.every"),
    (job_body("bad id!"), "id"),
    (job_body("x" * 129), "id"),
    ({**job_body("v-ftp"), "target": {"http": {"url": "ftp://example.com/x"}}},
     "target.http.url"),
    (job_body("v-jitter", jitter_s=-1), "schedule.jitter_s"),
    ({**job_body("v-attempts"), "max_attempts": 0}, "max_attempts"),
    ({**job_body("v-policy"), "misfire_policy": "sometimes"}, "misfire_policy"),
    ({"id": "v-nosched", "target": {"shell": "true"}}, "schedule"),
    ([1, 2, 3], "body"),
    ("just a string", "body"),
])
def test_invalid_job_is_400_naming_the_field(api: Api, body: Any, field: str) -> None:
    resp = api.post(api.follower(), "/v1/jobs", body)
    assert_error(resp, 400, field, code="invalid")


def test_unparseable_and_empty_bodies_are_400_body(api: Api) -> None:
    nid = api.leader()
    for raw in (b"{not json", b"\xff\xfe", b"", b"   "):
        resp = api.post(nid, "/v1/jobs", content=raw,
                        headers={"content-type": "application/json"})
        assert_error(resp, 400, "body")


def test_body_over_the_limit_is_413(api: Api) -> None:
    nid = api.follower()
    huge = json.dumps({**job_body("v-huge"), "target": {"shell": "x" * (2 << 20)}}).encode()
    assert len(huge) > 2 << 20
    resp = api.post(nid, "/v1/jobs", content=huge,
                    headers={"content-type": "application/json"})
    assert_error(resp, 413, "body")

    def chunks() -> Iterator[bytes]:  # no content-length: the server must count
        for i in range(0, len(huge), 64 * 1024):
            yield huge[i:i + 64 * 1024]

    resp = api.post(nid, "/v1/jobs", content=chunks(),
                    headers={"content-type": "application/json"})
    assert_error(resp, 413, "body")
    assert api.get(nid, "/v1/jobs/v-huge").status_code == 404


def test_bad_path_id_and_bad_query_parameters_are_400(api: Api) -> None:
    nid = api.follower()
    assert_error(api.get(nid, "/v1/jobs/bad%20id"), 400, "id")
    assert_error(api.post(nid, "/v1/jobs/bad%20id/pause"), 400, "id")
    for limit in ("0", "501", "abc", "-1", "1.5"):
        assert_error(api.get(nid, "/v1/jobs", params={"limit": limit}), 400, "limit")
        assert_error(api.get(nid, "/v1/occurrences", params={"limit": limit}), 400, "limit")
    assert_error(api.get(nid, "/v1/jobs", params={"paused": "maybe"}), 400, "paused")
    assert_error(api.get(nid, "/v1/occurrences", params={"status": "odd"}), 400, "status")
    assert_error(api.get(nid, "/v1/occurrences", params={"kind": "odd"}), 400, "kind")
    assert_error(api.get(nid, "/v1/occurrences", params={"since": "yesterday"}), 400, "since")
    assert_error(api.get(nid, "/v1/occurrences", params={"cursor": "nope"}), 400, "cursor")
    assert_error(api.get(nid, "/v1/jobs", params={"cursor": "not a job id"}), 400, "cursor")
    for path in ("/v1/jobs", "/v1/occurrences"):
        assert_error(api.get(nid, path, params={"consistent": "maybe"}), 400, "consistent")
        assert api.get(nid, path, params={"consistent": "false"}).status_code == 200


def test_bad_if_match_is_400(api: Api) -> None:
    nid = api.leader()
    api.create(nid, "ifm-bad")
    for value in ("abc", "W/\"1\"", "-1", "1.0"):
        resp = api.put(nid, "/v1/jobs/ifm-bad", job_body("ifm-bad"),
                       headers={"If-Match": value})
        assert_error(resp, 400, "If-Match")
        resp = api.delete(nid, "/v1/jobs/ifm-bad", headers={"If-Match": value})
        assert_error(resp, 400, "If-Match")
    assert api.get(nid, "/v1/jobs/ifm-bad").json()["version"] == 1


def test_bad_trigger_and_backfill_bodies_are_400(api: Api) -> None:
    nid = api.follower()
    api.create(api.leader(), "bodies")
    assert_error(api.post(nid, "/v1/jobs/bodies/trigger", [1]), 400, "body")
    assert_error(api.post(nid, "/v1/jobs/bodies/trigger", {"override_overlap": "yes"}), 400,
                 "override_overlap")
    # A misspelt option is an error, not silently ignored.
    assert_error(api.post(nid, "/v1/jobs/bodies/trigger", {"overide_overlap": True}), 400,
                 "overide_overlap")
    assert_error(api.post(nid, "/v1/jobs/bodies/backfill",
                          {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z",
                           "dry_run": True}), 400, "dry_run")
    assert_error(api.post(nid, "/v1/jobs/bodies/backfill", {"end": "2026-01-01T00:00:00Z"}),
                 400, "start")
    assert_error(api.post(nid, "/v1/jobs/bodies/backfill",
                          {"start": "2026-01-01T00:00:00", "end": "2026-01-02T00:00:00Z"}),
                 400, "start")
    assert_error(api.post(nid, "/v1/jobs/bodies/backfill",
                          {"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}),
                 400, "end")
    resp = api.post(nid, "/v1/jobs/bodies/trigger",
                    headers={"Idempotency-Key": "k" * 201})
    assert_error(resp, 400, "Idempotency-Key")


# --- 404 / 409 / 412 --------------------------------------------------------------------

def test_unknown_job_and_occurrence_are_404(api: Api) -> None:
    nid = api.follower()
    assert_error(api.get(nid, "/v1/jobs/no-such-job"), 404, code="not_found")
    assert_error(api.get(nid, "/v1/occurrences/no-such-occurrence"), 404, code="not_found")
    assert_error(api.put(nid, "/v1/jobs/no-such-job", job_body("no-such-job")), 404)
    assert_error(api.delete(nid, "/v1/jobs/no-such-job"), 404)
    for action in ("pause", "resume", "trigger"):
        assert_error(api.post(nid, f"/v1/jobs/no-such-job/{action}"), 404)
    assert_error(api.post(nid, "/v1/jobs/no-such-job/backfill",
                          {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z"}),
                 404)
    assert_error(api.get(nid, "/v1/no-such-route"), 404)


def test_duplicate_create_is_409(api: Api) -> None:
    api.create(api.leader(), "dup")
    resp = api.post(api.follower(), "/v1/jobs", job_body("dup"))
    assert_error(resp, 409, code="already_exists")
    assert api.get(api.leader(), "/v1/jobs/dup").json()["version"] == 1


def test_batch_create_creates_each_job_and_reports_each_refusal(api: Api) -> None:
    api.create(api.leader(), "bc-exists")
    nid = api.follower()
    resp = api.post(nid, "/v1/jobs:batchCreate", {"jobs": [
        job_body("bc-1", cron="* * * * * *"), job_body("bc-exists"),
        job_body("bc-2", timezone="Europe/Berlin")]})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["created"] == 2
    assert [(r["id"], r["created"]) for r in body["results"]] == [
        ("bc-1", True), ("bc-exists", False), ("bc-2", True)]
    assert body["results"][1]["error"]["code"] == "already_exists"
    # the existing job is described: its version, and what the one sent would change
    assert body["results"][1]["current_version"] == 1
    assert body["results"][1]["differs"] == []
    assert "current_version" not in body["results"][0]
    again = api.post(nid, "/v1/jobs:batchCreate", {"jobs": [
        job_body("bc-2", timezone="Asia/Tokyo"), {**job_body("bc-1", cron="* * * * * *"),
                                                   "paused": True, "max_attempts": 9}]})
    assert again.status_code == 200, again.text
    assert [(r["created"], r["current_version"], r["differs"])
            for r in again.json()["results"]] == [
        (False, 1, ["schedule"]), (False, 1, ["max_attempts", "paused"])]
    got = api.get(nid, "/v1/jobs/bc-2").json()
    assert got["version"] == 1 and got["schedule"]["timezone"] == "Europe/Berlin"
    # the leader's ticker learns of batch-created jobs like any other: bc-1 fires
    wait_until(lambda: api.c.occurrences(api.leader(), "bc-1"), 15,
               message="an occurrence of the batch-created job")


def test_batch_create_retry_replays_and_a_reused_key_is_refused(api: Api) -> None:
    nid = api.leader()
    key = {"Idempotency-Key": "bk-key"}
    first = api.post(nid, "/v1/jobs:batchCreate", {"jobs": [job_body("bk-1")]}, headers=key)
    retry = api.post(api.follower(), "/v1/jobs:batchCreate", {"jobs": [job_body("bk-1")]},
                     headers=key)
    assert first.json() == retry.json() == {"created": 1, "results": [
        {"id": "bk-1", "created": True, "version": 1}]}
    other = api.post(nid, "/v1/jobs:batchCreate",
                     {"jobs": [job_body("bk-2"), job_body("bk-3")]}, headers=key)
    assert other.status_code == 422, other.text
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert api.get(nid, "/v1/jobs/bk-2?consistent=true").status_code == 404
    assert api.get(nid, "/v1/jobs/bk-1").json()["version"] == 1


@pytest.mark.parametrize(("body", "field"), [
    ({"jobs": [job_body("bcv-ok"), job_body("bcv-bad", cron="61 * * * *")]},
     "jobs[1].schedule.cron"),
    ({"jobs": []}, "jobs"),
    ({"jobs": [job_body("bcv-ok"), 7]}, "jobs[1]"),
    ({"jobs": "nope"}, "jobs"),
    ({"jobs": [job_body(f"bcv-{i}") for i in range(1001)]}, "jobs"),
    ([], "jobs"),
])
def test_batch_create_validation_is_400_and_creates_nothing(api: Api, body: Any,
                                                             field: str) -> None:
    assert_error(api.post(api.leader(), "/v1/jobs:batchCreate", body), 400, field=field)
    assert api.get(api.leader(), "/v1/jobs/bcv-ok").status_code == 404


def test_if_match_mismatch_is_412_on_put_and_delete(api: Api) -> None:
    nid = api.follower()
    api.create(nid, "ifm")
    resp = api.put(nid, "/v1/jobs/ifm", job_body("ifm", cron="0 1 * * *"),
                   headers={"If-Match": '"1"'})
    assert resp.status_code == 200, resp.text
    assert resp.headers["etag"] == '"2"'
    stale = api.put(nid, "/v1/jobs/ifm", job_body("ifm", cron="0 2 * * *"),
                    headers={"If-Match": "1"})
    assert_error(stale, 412, code="version_conflict")
    assert_error(api.delete(nid, "/v1/jobs/ifm", headers={"If-Match": "1"}), 412)
    job = api.get(nid, "/v1/jobs/ifm").json()
    assert job["version"] == 2 and job["schedule"]["cron"] == "0 1 * * *"
    resp = api.delete(nid, "/v1/jobs/ifm", headers={"If-Match": '"2"'})
    assert resp.status_code == 200 and resp.json() == {"deleted": "ifm"}
    assert_error(api.get(nid, "/v1/jobs/ifm?consistent=true"), 404)


# --- job lifecycle ------------------------------------------------------------------------

def test_pause_and_resume_are_reflected_in_get(api: Api) -> None:
    nid = api.follower()
    api.create(api.leader(), "pr")
    resp = api.post(nid, "/v1/jobs/pr/pause")
    assert resp.status_code == 200 and resp.json()["paused"] is True
    assert api.get(nid, "/v1/jobs/pr").json()["paused"] is True
    paused_ids = [j["id"] for j in api.get(nid, "/v1/jobs",
                                          params={"paused": "true", "limit": 500}).json()["jobs"]]
    assert "pr" in paused_ids
    resp = api.post(nid, "/v1/jobs/pr/resume")
    assert resp.status_code == 200 and resp.json()["paused"] is False
    assert api.get(nid, "/v1/jobs/pr").json()["paused"] is False
    # A PUT without "paused" keeps the current state.
    api.post(nid, "/v1/jobs/pr/pause")
    resp = api.put(nid, "/v1/jobs/pr", job_body("pr", cron="0 3 * * *"))
    assert resp.status_code == 200 and resp.json()["paused"] is True


def _manual(api: Api, nid: str, job_id: str) -> list[dict[str, Any]]:
    page = api.get(nid, "/v1/occurrences", params={"job_id": job_id, "kind": "manual",
                                                   "limit": 500, "consistent": "true"})
    assert page.status_code == 200, page.text
    return page.json()["occurrences"]


def test_trigger_with_the_same_idempotency_key_makes_one_occurrence(api: Api) -> None:
    leader, follower = api.leader(), api.follower()
    api.create(leader, "trig")
    first = api.post(follower, "/v1/jobs/trig/trigger", headers={"Idempotency-Key": "K-1"})
    assert first.status_code == 202, first.text
    second = api.post(leader, "/v1/jobs/trig/trigger", headers={"Idempotency-Key": "K-1"})
    assert second.status_code == 202, second.text
    assert first.json()["id"] == second.json()["id"]
    assert first.json()["duplicate"] is False and second.json()["duplicate"] is True
    assert first.json()["kind"] == "manual"
    assert [o["id"] for o in _manual(api, follower, "trig")] == [first.json()["id"]]
    # The same key on another job is another occurrence.
    api.create(leader, "trig-other")
    other = api.post(follower, "/v1/jobs/trig-other/trigger",
                     headers={"Idempotency-Key": "K-1"})
    assert other.status_code == 202 and other.json()["id"] != first.json()["id"]


def test_trigger_without_a_key_twice_makes_two_occurrences(api: Api) -> None:
    nid = api.follower()
    api.create(api.leader(), "trig2")
    a = api.post(nid, "/v1/jobs/trig2/trigger")
    b = api.post(nid, "/v1/jobs/trig2/trigger")
    assert a.status_code == b.status_code == 202
    assert a.json()["id"] != b.json()["id"]
    assert not a.json()["duplicate"] and not b.json()["duplicate"]
    assert {o["id"] for o in _manual(api, nid, "trig2")} == {a.json()["id"], b.json()["id"]}


PARIS_NOON = {"cron": "0 12 * * *", "timezone": "Europe/Paris"}
PARIS_RANGE = {"start": "2026-03-27T12:00:00Z", "end": "2026-03-31T09:59:59Z"}


def _backfill_twice(api: Api, job_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    leader, follower = api.leader(), api.follower()
    body = {"id": job_id, "schedule": PARIS_NOON, "target": {"shell": "true"}}
    assert api.post(follower, "/v1/jobs", body).status_code == 201
    first = api.post(follower, f"/v1/jobs/{job_id}/backfill", PARIS_RANGE)
    assert first.status_code == 202, first.text
    api.get(leader, f"/v1/jobs/{job_id}", params={"consistent": "true"})
    second = api.post(leader, f"/v1/jobs/{job_id}/backfill", PARIS_RANGE)
    assert second.status_code == 202, second.text
    return first.json(), second.json()


def test_backfill_twice_is_idempotent_and_follows_the_schedule(api: Api) -> None:
    f, s = _backfill_twice(api, "bf")
    assert f["occurrence_ids"] == s["occurrence_ids"]
    assert f["count"] == s["count"] == 3
    assert f["created"] == 3
    # EU summer time starts on 2026-03-29: noon in Paris moves from 11:00Z to 10:00Z.
    occs = api.get(api.follower(), "/v1/occurrences", params={
        "job_id": "bf", "kind": "backfill", "limit": 500, "consistent": "true"}).json()
    instants = sorted(o["scheduled_for"] for o in occs["occurrences"])
    assert instants == ["2026-03-28T11:00:00Z", "2026-03-29T10:00:00Z",
                        "2026-03-30T10:00:00Z"]
    assert {o["id"] for o in occs["occurrences"]} == set(f["occurrence_ids"])


def test_second_identical_backfill_reports_nothing_created(api: Api) -> None:
    f, s = _backfill_twice(api, "bf-created")
    assert f["created"] == 3
    assert s["created"] == 0


def test_backfill_of_a_per_minute_range_covers_each_instant_once(api: Api) -> None:
    nid = api.follower()
    api.create(nid, "bf2", cron="*/15 * * * *")
    rng = {"start": "2025-12-31T23:59:30Z", "end": "2026-01-01T01:59:59Z"}
    resp = api.post(nid, "/v1/jobs/bf2/backfill", rng)
    assert resp.status_code == 202, resp.text
    base = datetime(2026, 1, 1, tzinfo=UTC)
    expected = [(base + timedelta(minutes=15 * k)).isoformat().replace("+00:00", "Z")
                for k in range(8)]
    occs = api.get(nid, "/v1/occurrences", params={
        "job_id": "bf2", "kind": "backfill", "limit": 500}).json()["occurrences"]
    assert sorted(o["scheduled_for"] for o in occs) == expected
    assert resp.json()["created"] == 8


def test_job_list_pagination_covers_every_job_once(api: Api) -> None:
    leader = api.leader()
    ids = {f"pg-{i:02d}" for i in range(23)}
    for job_id in sorted(ids):
        api.create(leader, job_id, tenant="pgten")
    nid = api.follower()
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"tenant": "pgten", "limit": 5, "consistent": "true"}
        if cursor:
            params["cursor"] = cursor
        resp = api.get(nid, "/v1/jobs", params=params)
        assert resp.status_code == 200, resp.text
        page = resp.json()
        assert len(page["jobs"]) <= 5
        seen += [j["id"] for j in page["jobs"]]
        pages += 1
        cursor = page["next_cursor"]
        if not cursor:
            break
        assert pages < 10
    assert len(seen) == len(set(seen)) == 23
    assert set(seen) == ids
    assert seen == sorted(seen)
    assert pages == 5


def test_consistent_read_on_a_follower_sees_a_write_just_made(api: Api) -> None:
    leader = api.leader()
    follower = api.follower()
    api.create(leader, "cons")
    for version in range(2, 8):
        cron = f"{version} 0 * * *"
        resp = api.put(leader, "/v1/jobs/cons", job_body("cons", cron=cron))
        assert resp.status_code == 200, resp.text
        got = api.get(follower, "/v1/jobs/cons", params={"consistent": "true"})
        assert got.status_code == 200, got.text
        assert got.json()["version"] == version
        assert got.json()["schedule"]["cron"] == cron
    job_id = f"cons-new-{time.monotonic_ns()}"
    api.create(leader, job_id)
    listed = api.get(follower, "/v1/jobs", params={"consistent": "true", "limit": 500,
                                                   "cursor": "cons-new-"}).json()
    assert job_id in [j["id"] for j in listed["jobs"]]


def test_job_detail_has_next_fire_times_and_latest_occurrence(api: Api) -> None:
    nid = api.follower()
    body = {"id": "detail", "schedule": {"cron": "0 9 * * *", "timezone": "Europe/Paris"},
            "target": {"shell": "true"}}
    created = api.post(api.leader(), "/v1/jobs", body)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/v1/jobs/detail"
    job = api.get(nid, "/v1/jobs/detail", params={"consistent": "true"}).json()
    assert job["latest_occurrence"] is None
    fires = job["next_fire_times"]
    assert len(fires) == 5
    utcs = [utc(f["utc"]) for f in fires]
    now = datetime.now(UTC)
    assert now < utcs[0] <= now + timedelta(days=1, hours=1)
    for f, u in zip(fires, utcs, strict=True):
        assert f["utc"].endswith("Z")
        local = datetime.fromisoformat(f["local"])
        assert local == u
        assert local.hour == 9 and local.minute == 0
        assert local.utcoffset() in (timedelta(hours=1), timedelta(hours=2))
    assert all(b > a for a, b in zip(utcs, utcs[1:], strict=False))
    occ = api.post(nid, "/v1/jobs/detail/trigger", headers={"Idempotency-Key": "d"}).json()
    job = api.get(nid, "/v1/jobs/detail").json()
    assert job["latest_occurrence"]["id"] == occ["id"]
    got = api.get(nid, f"/v1/occurrences/{occ['id']}")
    assert got.status_code == 200 and got.json()["job_id"] == "detail"
    assert isinstance(got.json()["attempt_list"], list)


# --- service routes ------------------------------------------------------------------------

def _api_routes() -> list[Route]:
    return [r for r in ROUTES if isinstance(r, Route) and r.path not in PAGE_PATHS]


def _spec_path(route: Route) -> str:
    return route.path.replace(":path}", "}")


def test_openapi_documents_every_v1_and_health_route_with_its_methods(api: Api) -> None:
    resp = api.get(api.follower(), "/openapi.json")
    assert resp.status_code == 200
    spec = resp.json()
    assert spec["openapi"].startswith("3.")
    routes = [r for r in _api_routes() if r.path != "/openapi.json"]
    assert len(routes) >= 20
    for route in routes:
        assert _spec_path(route) in spec["paths"], route.path
        documented = spec["paths"][_spec_path(route)]
        for method in route.methods or ():
            if method != "HEAD":
                assert method.lower() in documented, (route.path, method)


def test_openapi_lists_every_route_path_except_the_index(api: Api) -> None:
    spec = api.get(api.leader(), "/openapi.json").json()
    missing = {_spec_path(r) for r in _api_routes()} - set(spec["paths"])
    assert not missing, f"routes missing from /openapi.json: {sorted(missing)}"


def test_healthz_and_readyz_with_a_leader(api: Api) -> None:
    for nid in api.c.ids:
        assert api.get(nid, "/healthz").status_code == 200
        ready = wait_until(lambda n=nid: api.get(n, "/readyz").status_code == 200 and
                           api.get(n, "/readyz"), 20, message=f"{nid} ready")
        body = ready.json()
        assert body["ready"] is True and body["problems"] == []
        assert body["leader_id"] == api.leader()


# --- worker endpoints -------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "field"), [
    ({"queues": ["apiq"]}, "worker_id"),
    ({"worker_id": "w", "max": 0}, "max"),
    ({"worker_id": "w", "max": 1001}, "max"),
    ({"worker_id": "w", "max": "2"}, "max"),
    ({"worker_id": "w", "max": True}, "max"),
    ({"worker_id": "w", "wait_s": -1}, "wait_s"),
    ({"worker_id": "w", "wait_s": 31}, "wait_s"),
    ({"worker_id": "w", "wait_s": "1"}, "wait_s"),
    ({"worker_id": "w", "queues": []}, "queues"),
    ({"worker_id": "w", "queues": "default"}, "queues"),
    ({"worker_id": "w", "queues": ["bad queue"]}, "queues"),
    ([1], "body"),
])
def test_lease_validation_is_400_naming_the_field(api: Api, body: Any, field: str) -> None:
    for nid in (api.leader(), api.follower()):
        assert_error(api.post(nid, "/v1/leases", body), 400, field)


def test_batch_validation_is_400_naming_the_field(api: Api) -> None:
    nid = api.follower()
    assert_error(api.post(nid, "/v1/heartbeats", {"worker_id": "w", "attempts": []}), 400,
                 "attempts")
    assert_error(api.post(nid, "/v1/heartbeats", {"worker_id": "w", "attempts": [
        {"attempt_id": "a", "fencing_token": -1}]}), 400, "attempts.0.fencing_token")
    assert_error(api.post(nid, "/v1/completions", {"worker_id": "w", "completions": [
        {"attempt_id": "a", "fencing_token": 1, "outcome": "meh"}]}), 400,
        "completions.0.outcome")
    assert_error(api.post(nid, "/v1/attempts/a/heartbeat", {"worker_id": "w"}), 400,
                 "fencing_token")


def test_unknown_attempt_is_404_single_and_not_found_in_batch(api: Api) -> None:
    nid = api.follower()
    hb = {"worker_id": "w1", "fencing_token": 1}
    assert_error(api.post(nid, "/v1/attempts/no-such-attempt/heartbeat", hb), 404,
                 code="not_found")
    done = {"worker_id": "w1", "fencing_token": 1, "outcome": "succeeded", "exit_code": 0}
    assert_error(api.post(nid, "/v1/attempts/no-such-attempt/complete", done), 404,
                 code="not_found")
    batch = api.post(nid, "/v1/heartbeats", {"worker_id": "w1", "attempts": [
        {"attempt_id": "no-such-attempt", "fencing_token": 1}]})
    assert batch.status_code == 200, batch.text
    [result] = batch.json()["results"]
    assert result["ok"] is False and result["rejected"] == "not_found"
    batch = api.post(nid, "/v1/completions", {"worker_id": "w1", "completions": [
        {"attempt_id": "no-such-attempt", "fencing_token": 1, "outcome": "failed"}]})
    assert batch.status_code == 200, batch.text
    [result] = batch.json()["results"]
    assert result["ok"] is False and result["rejected"] == "not_found"


def test_stale_fencing_token_is_409(api: Api) -> None:
    leader, follower = api.leader(), api.follower()
    api.create(leader, "leased", queue="apiq")
    occ = api.post(follower, "/v1/jobs/leased/trigger").json()
    resp = api.post(follower, "/v1/leases",
                    {"worker_id": "w1", "queues": ["apiq"], "max": 10, "wait_s": 5})
    assert resp.status_code == 200, resp.text
    leases = [x for x in resp.json()["leases"] if x["occurrence_id"] == occ["id"]]
    assert len(leases) == 1, resp.json()
    lease = leases[0]
    aid, token = lease["attempt_id"], lease["fencing_token"]
    for bad in (token - 1, token + 1):
        assert_error(api.post(follower, f"/v1/attempts/{aid}/heartbeat",
                              {"worker_id": "w1", "fencing_token": bad}), 409,
                     code="stale_token")
        assert_error(api.post(follower, f"/v1/attempts/{aid}/complete",
                              {"worker_id": "w1", "fencing_token": bad,
                               "outcome": "succeeded"}), 409, code="stale_token")
    assert_error(api.post(follower, f"/v1/attempts/{aid}/heartbeat",
                          {"worker_id": "w2", "fencing_token": token}), 409)
    ok = api.post(follower, f"/v1/attempts/{aid}/heartbeat",
                  {"worker_id": "w1", "fencing_token": token})
    assert ok.status_code == 200 and ok.json() == {"cancel": False}
    done = api.post(leader, f"/v1/attempts/{aid}/complete",
                    {"worker_id": "w1", "fencing_token": token, "outcome": "succeeded",
                     "exit_code": 0, "output": "hi"})
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "succeeded"
    final = api.get(follower, f"/v1/occurrences/{occ['id']}", params={"consistent": "true"})
    assert final.json()["status"] == "succeeded"


# --- no leader -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def isolated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, str]]:
    """A cluster of which only one follower is left running."""
    c = LocalCluster(Path(tmp_path_factory.mktemp("isolated")))
    c.start()
    a = Api(c)
    try:
        leader = c.wait_leader(timeout=30)
        wait_until(lambda: all(c.cluster_view(n) for n in c.ids), 30, message="all nodes up")
        lonely = next(n for n in c.ids if n != leader)
        for nid in c.ids:
            if nid != lonely:
                c.kill(nid)
        yield a, lonely
    finally:
        a.close()
        c.close()


def test_writes_on_a_node_without_peers_answer_503_with_retry_after(
        isolated: tuple[Api, str]) -> None:
    api, lonely = isolated
    assert api.get(lonely, "/healthz").status_code == 200
    for method, path, body in (
        ("POST", "/v1/jobs", job_body("lonely")),
        ("GET", "/v1/jobs?consistent=true", None),
        ("POST", "/v1/leases", {"worker_id": "w", "queues": ["default"]}),
    ):
        resp = api.request(method, lonely, path, json=body)  # a hang raises ReadTimeout
        err = assert_error(resp, 503)
        assert err["code"] in ("no_leader", "unknown_outcome"), err
        assert int(resp.headers["retry-after"]) >= 1
    assert api.get(lonely, "/v1/jobs/lonely").status_code == 404


def test_readyz_is_503_on_a_node_without_peers(isolated: tuple[Api, str]) -> None:
    api, lonely = isolated

    def not_ready() -> httpx.Response | None:
        resp = api.get(lonely, "/readyz")
        return resp if resp.status_code == 503 else None

    resp = wait_until(not_ready, 20, interval=0.3, message="readyz to answer 503")
    body = resp.json()
    assert body["ready"] is False and body["problems"]
