"""Hostile and odd input through the real API app (in-process, real SQLite): every bad
value is a 4xx naming the field, and nothing accepted can break a later read."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftcron.api.errors import MAX_BODY_BYTES, MAX_JSON_DEPTH
from raftcron.core import commands as c
from raftcron.core.model import parse_job
from raftcron.core.timefmt import ACCEPTED_MAX_MS
from tests.integration.inprocess import InProcessNode, api_client

POISON = "9999-12-31T23:59:59-23:59"  # local year 9999; UTC 10000-01-01T23:58:59Z
# Each of these names no instant the API can write back (or none at all).
BAD_INSTANTS = [
    POISON,
    "9999-12-31T23:59:59.999-00:01",
    "0000-01-01T00:00:00Z",
    "0001-01-01T00:00:00+23:59",
    "1970-01-01T00:00:00+00:01",  # 1969 in UTC
    "2016-12-31T23:59:60Z",  # a leap second: not representable
    "2026-03-08T07:00:00+24:00",
    "2026-03-08T07:00:00",  # naive
    "x" * 65,
]


def job_body(job_id: str = "j", **schedule: Any) -> dict[str, Any]:
    return {"id": job_id, "schedule": {"cron": "0 9 * * *", **schedule},
            "target": {"shell": "true"}}


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    node = InProcessNode(tmp_path / "n1")
    try:
        async with api_client(node) as http:
            yield http
    finally:
        node.close()


async def reads_answer(client: httpx.AsyncClient, job_id: str | None = None) -> None:
    paths = ["/v1/jobs", "/v1/status/jobs", "/v1/schedule/herd"]
    if job_id is not None:
        paths.append(f"/v1/jobs/{job_id}")
    for path in paths:
        response = await client.get(path)
        assert response.status_code == 200, (path, response.text)


def assert_invalid(response: httpx.Response, field: str, status: int = 400) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["field"] == field, error
    assert error["message"]


@pytest.mark.parametrize("field", ["start_at", "end_at"])
@pytest.mark.parametrize("text", BAD_INSTANTS)
async def test_a_schedule_bound_outside_the_writable_instants_is_refused(
        client: httpx.AsyncClient, field: str, text: str) -> None:
    response = await client.post("/v1/jobs", json=job_body(**{field: text}))
    assert_invalid(response, f"schedule.{field}")
    await reads_answer(client)
    assert (await client.get("/v1/jobs")).json()["jobs"] == []


async def test_the_last_and_first_accepted_instants_round_trip(
        client: httpx.AsyncClient) -> None:
    body = job_body(start_at="1970-01-01T00:00:00Z", end_at="9999-12-31T23:59:59.999Z")
    assert (await client.post("/v1/jobs", json=body)).status_code == 201
    await reads_answer(client, "j")
    shown = (await client.get("/v1/jobs/j")).json()["schedule"]
    assert (shown["start_at"], shown["end_at"]) == ("1970-01-01T00:00:00Z",
                                                    "9999-12-31T23:59:59.999Z")
    # The same instants written with extreme offsets are the same instants.
    same = job_body("k", start_at="1970-01-01T23:59:00+23:59",
                    end_at="9999-12-31T00:00:59.999-23:59")
    assert (await client.post("/v1/jobs", json=same)).status_code == 201
    shown = (await client.get("/v1/jobs/k")).json()["schedule"]
    assert (shown["start_at"], shown["end_at"]) == ("1970-01-01T00:00:00Z",
                                                    "9999-12-31T23:59:59.999Z")


async def test_a_poison_job_already_in_the_state_does_not_break_reads(
        tmp_path: Path) -> None:
    """A state DB whose job was committed before the UTC check (end_at in the year 10000):
    every read answers, the bound is shown clamped, and what is shown is accepted back."""
    node = InProcessNode(tmp_path / "old")
    spec = parse_job(job_body("poison")).to_spec()
    spec["schedule"]["end_at_ms"] = ACCEPTED_MAX_MS + 23 * 3_600_000 + 59 * 60_000
    spec["schedule"]["start_at_ms"] = -59 * 60_000  # 1969-12-31T23:01:00Z
    node.machine.apply_bytes(1, c.encode(c.PutJob("old-entry", 1_767_225_600_000, spec,
                                                  create=True)))
    try:
        async with api_client(node) as http:
            await reads_answer(http, "poison")
            shown = (await http.get("/v1/jobs/poison")).json()
            assert shown["schedule"]["end_at"] == "9999-12-31T23:59:59.999Z"
            assert shown["schedule"]["start_at"] == "1970-01-01T00:00:00Z"
            assert shown["next_fire_times"], "the clamped job still fires as before"
            listed = (await http.get("/v1/jobs")).json()["jobs"]
            assert [j["id"] for j in listed] == ["poison"]
            keep = {k: shown[k] for k in ("schedule", "target", "tenant", "queue")}
            put = await http.put("/v1/jobs/poison", json=keep)
            assert put.status_code == 200, put.text
    finally:
        node.close()


@pytest.mark.parametrize("field", ["start", "end"])
@pytest.mark.parametrize("text", [POISON, "0000-01-01T00:00:00Z", "2016-12-31T23:59:60Z"])
async def test_backfill_bounds_follow_the_same_rule(client: httpx.AsyncClient, field: str,
                                                    text: str) -> None:
    assert (await client.post("/v1/jobs", json=job_body())).status_code == 201
    body = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z", field: text}
    assert_invalid(await client.post("/v1/jobs/j/backfill", json=body), field)


@pytest.mark.parametrize("param", ["since", "until"])
@pytest.mark.parametrize("text", [POISON, "0000-01-01T00:00:00Z", "2016-12-31T23:59:60Z"])
async def test_occurrence_filters_follow_the_same_rule(client: httpx.AsyncClient, param: str,
                                                       text: str) -> None:
    response = await client.get("/v1/occurrences", params={param: text})
    assert_invalid(response, param)


DEEP = b"[" * 200_000
BODY_ROUTES = ["/v1/jobs", "/v1/jobs:batchCreate", "/v1/leases", "/v1/heartbeats",
               "/v1/completions", "/v1/releases", "/v1/tenants/t1", "/v1/cluster/members",
               "/v1/jobs/j/backfill", "/v1/jobs/j/trigger"]


async def _send(client: httpx.AsyncClient, path: str, raw: bytes) -> httpx.Response:
    method = "PUT" if path.startswith("/v1/tenants/") else "POST"
    return await client.request(method, path, content=raw,
                                headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("path", BODY_ROUTES)
async def test_deeply_nested_json_is_a_400_on_every_body_route(client: httpx.AsyncClient,
                                                               path: str) -> None:
    assert (await client.post("/v1/jobs", json=job_body())).status_code == 201
    for raw in (DEEP, b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)):
        response = await _send(client, path, raw)
        assert_invalid(response, "body")
        assert "nested" in response.json()["error"]["message"]


@pytest.mark.parametrize("path", BODY_ROUTES)
async def test_a_body_over_the_cap_is_a_413_on_every_body_route(client: httpx.AsyncClient,
                                                                path: str) -> None:
    huge = json.dumps({"id": "x" * MAX_BODY_BYTES}).encode()
    assert_invalid(await _send(client, path, huge), "body", status=413)


async def test_a_body_over_the_cap_without_a_length_is_a_413(
        client: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(MAX_BODY_BYTES // 65_536 + 2):
            yield b" " * 65_536

    for path in ("/v1/jobs", "/v1/cluster/members"):
        response = await client.post(path, content=chunks())
        assert_invalid(response, "body", status=413)


@pytest.mark.parametrize("raw", [
    b'{"id": "j", "schedule": "0 9 * * *", "target": {"shell": "\\ud800"}}',
    b'{"id": "j", "schedule": "0 9 * * *", "target": {"shell": "true"}, "\\udfff": 1}',
    b'{"id": "j", "schedule": {"cron": "0 9 * * *", "jitter_s": NaN}, "target": {}}',
    b'{"id": "j", "schedule": {"cron": "0 9 * * *", "jitter_s": 1e999}, "target": {}}',
    b'{"id": "j", "schedule": {"cron": "0 9 * * *", "jitter_s": -Infinity}, "target": {}}',
    b'{"id": "j", "schedule": "0 9 * * *", "target": {"shell": "\xff"}}',
    b'{"id": 1' + b"0" * 5000 + b"}",
])
async def test_json_that_no_response_could_render_is_refused(client: httpx.AsyncClient,
                                                             raw: bytes) -> None:
    assert_invalid(await _send(client, "/v1/jobs", raw), "body")
    await reads_answer(client)


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/cluster/members"])
async def test_an_empty_body_is_a_400(client: httpx.AsyncClient, path: str) -> None:
    assert_invalid(await _send(client, path, b""), "body")


async def test_a_backfill_over_centuries_is_refused_before_any_instant_is_listed(
        client: httpx.AsyncClient) -> None:
    """A yearly Europe/Berlin job over 1970-9999: listing it took 15 s of CPU on the
    event loop (its zone's transitions, year by year). The span is refused first."""
    yearly = {"id": "yearly", "schedule": {"cron": "0 0 1 1 *", "timezone": "Europe/Berlin"},
              "target": {"shell": "true"}}
    assert (await client.post("/v1/jobs", json=yearly)).status_code == 201
    response = await client.post("/v1/jobs/yearly/backfill", json={
        "start": "1970-01-01T00:00:00Z", "end": "9999-12-31T23:59:59.999Z"})
    assert_invalid(response, "end")
    assert "ten years" in response.json()["error"]["message"]
    occs = (await client.get("/v1/occurrences", params={"job_id": "yearly"})).json()
    assert occs["occurrences"] == []
    # Ten years is served: the bound is on the span, not on what the job is.
    ok = await client.post("/v1/jobs/yearly/backfill", json={
        "start": "2010-01-01T00:00:00Z", "end": "2019-12-31T23:00:00Z"})
    assert ok.status_code == 202, ok.text
    assert ok.json()["count"] == 10


async def test_digests_share_one_computation_until_the_state_moves(tmp_path: Path) -> None:
    node = InProcessNode(tmp_path / "d")
    try:
        async with api_client(node) as http:
            assert node.app is not None
            answers = await asyncio.gather(*(http.get("/v1/digest") for _ in range(20)))
            assert {r.status_code for r in answers} == {200}
            assert len({(r.json()["last_applied_index"], r.json()["digest"])
                        for r in answers}) == 1
            gate = node.app.state.heavy_reads
            assert gate.computations == 1
            again = (await http.get("/v1/digest")).json()
            assert gate.computations == 1  # same index: the digest kept is the answer
            assert (await http.post("/v1/jobs", json=job_body())).status_code == 201
            moved = (await http.get("/v1/digest")).json()
            assert gate.computations == 2
            assert moved["last_applied_index"] > again["last_applied_index"]
            assert moved["digest"] != again["digest"]
    finally:
        node.close()


async def test_herd_requests_with_varied_parameters_are_validated_and_bounded(
        tmp_path: Path) -> None:
    node = InProcessNode(tmp_path / "h")
    try:
        async with api_client(node) as http:
            assert (await http.post("/v1/jobs", json=job_body())).status_code == 201
            for params, field in [({"hours": "169"}, "hours"), ({"hours": "0"}, "hours"),
                                  ({"bucket_s": "59"}, "bucket_s"),
                                  ({"bucket_s": "86401"}, "bucket_s"),
                                  ({"hours": "9" * 40}, "hours"), ({"hours": "-1"}, "hours")]:
                assert_invalid(await http.get("/v1/schedule/herd", params=params), field)
            varied = [{"hours": str(h), "bucket_s": "3600"} for h in range(1, 11)]
            answers = await asyncio.gather(*(http.get("/v1/schedule/herd", params=p)
                                             for p in varied * 3))
            assert {r.status_code for r in answers} == {200}
            assert node.app is not None
            gate = node.app.state.heavy_reads
            assert gate.computations == len(varied)  # each parameter set once, one at a time
            await http.get("/v1/schedule/herd", params=varied[0])
            assert gate.computations == len(varied)  # cached
    finally:
        node.close()


async def test_a_job_stored_with_a_lone_surrogate_reads_back_replaced(tmp_path: Path) -> None:
    """Committed before bodies were checked: `"\\ud800"` in a shell target. Reads answer,
    with U+FFFD in its place, and the job shown is accepted back."""
    node = InProcessNode(tmp_path / "old")
    spec = parse_job(job_body("lone")).to_spec()
    spec["target"] = {"shell": "echo \ud800"}
    node.machine.apply_bytes(1, c.encode(c.PutJob("old-entry", 1_767_225_600_000, spec,
                                                  create=True)))
    try:
        async with api_client(node) as http:
            await reads_answer(http, "lone")
            shown = (await http.get("/v1/jobs/lone")).json()
            assert shown["target"] == {"shell": "echo \ufffd"}
            keep = {k: shown[k] for k in ("schedule", "target")}
            assert (await http.put("/v1/jobs/lone", json=keep)).status_code == 200
    finally:
        node.close()


async def test_an_outbox_cursor_beyond_the_row_ids_is_refused(client: httpx.AsyncClient) -> None:
    # 19 digits over SQLite's INTEGER range: the bound parameter overflowed (a 500).
    response = await client.get("/v1/outbox", params={"cursor": "9999999999999999999|x"})
    assert_invalid(response, "cursor")
    assert (await client.get("/v1/outbox", params={"cursor": "12|x"})).status_code == 200


@pytest.mark.parametrize("worker_id", ["", "x" * 129, "w\n1", "w\u00e9", "w\u200b"])
async def test_a_worker_id_outside_printable_ascii_is_refused(client: httpx.AsyncClient,
                                                             worker_id: str) -> None:
    body = {"worker_id": worker_id, "attempts": [{"attempt_id": "a", "fencing_token": 1}]}
    assert_invalid(await client.post("/v1/heartbeats", json=body), "worker_id")


async def test_a_fencing_token_beyond_sqlite_integers_is_refused(
        client: httpx.AsyncClient) -> None:
    body = {"worker_id": "w", "attempts": [{"attempt_id": "a", "fencing_token": 2**63}]}
    assert_invalid(await client.post("/v1/heartbeats", json=body), "attempts.0.fencing_token")


async def test_integral_floats_are_integers_in_worker_and_tenant_bodies(
        client: httpx.AsyncClient) -> None:
    # JSON Schema counts 5.0 as an integer; these were refused.
    body = {"worker_id": "w", "attempts": [{"attempt_id": "a", "fencing_token": 7.0}]}
    response = await client.post("/v1/heartbeats", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["rejected"] == "not_found"
    done = {"worker_id": "w", "completions": [{"attempt_id": "a", "fencing_token": 7.0,
                                               "outcome": "failed", "exit_code": 2.0}]}
    assert (await client.post("/v1/completions", json=done)).status_code == 200
    tenant = await client.put("/v1/tenants/acme", json={"max_jobs": 5.0})
    assert tenant.status_code == 200, tenant.text
    assert tenant.json()["max_jobs"] == 5
    assert_invalid(await client.put("/v1/tenants/acme", json={"max_jobs": 5.5}), "max_jobs")
