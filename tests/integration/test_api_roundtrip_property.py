"""Property: every job body the API accepts can be read back by everyone, and round-trips.

Bodies are drawn near the edges: instants from 1970 to 9999 written with offsets up to
±23:59 (inside and just outside the accepted range), leap seconds, zones with extreme
offsets, numbers around their bounds, unicode and lone surrogates in strings. For each:
the create answers 201 or a 4xx naming a field, never a 5xx; after a 201, GET /v1/jobs,
/v1/jobs/{id} and /v1/status/jobs answer 200, the job shows the same definition, and the
shown definition PUT back is accepted and leaves the job unchanged.
"""

from __future__ import annotations

import asyncio
import json
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftcron.core.errors import ValidationError
from raftcron.core.model import parse_job
from raftcron.core.timefmt import parse_iso_ms
from tests.integration.inprocess import InProcessNode, api_client

EXAMPLES = int(os.environ.get("RAFTCRON_ROUNDTRIP_EXAMPLES", "120"))
DEFINITION = ("id", "tenant", "schedule", "misfire_policy", "misfire_grace_s",
              "catch_up_max", "overlap_policy", "max_runtime_s", "max_attempts",
              "retry_backoff_s", "heartbeat_timeout_s", "deadline_s", "target", "queue",
              "paused", "notify")

CRONS = ["0 9 * * 1-5", "*/10 * * * * *", "H * * * *", "H(0-29)/10 H 1 * *", "0 0 L * *",
         "0 0 LW * *", "0 12 15W * *", "0 3 * * 5L", "0 3 * * 1#2", "@yearly", "@hourly",
         "30 2 * * *", "0 0 29 2 *", "59 23 31 12 *", "0 0 1 1 *"]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Pacific/Kiritimati", "Etc/GMT+12",
         "Australia/Lord_Howe", "America/Santiago", "Asia/Kolkata", "Pacific/Apia"]


@st.composite
def instants(draw: st.DrawFn) -> str:
    """An ISO text near the edges of what can be named: any offset up to ±23:59."""
    kind = draw(st.sampled_from(["any", "low", "high", "leap", "odd"]))
    if kind == "leap":
        return f"{draw(st.integers(1972, 2016))}-12-31T23:59:60Z"
    if kind == "odd":
        return draw(st.sampled_from(["9999-12-31T23:59:59-23:59", "0000-01-01T00:00:00Z",
                                     "0001-01-01T00:00:00+23:59", "2026-03-08T02:30:00",
                                     "2026-03-08T07:00:00+24:00", "10000-01-01T00:00:00Z",
                                     "2026-13-01T00:00:00Z", "", "2026-03-08"]))
    # A local wall time and an offset, written out: near 1970-01-01 and 9999-12-31 the
    # offset decides whether the instant is inside the accepted range or just outside.
    minutes = draw(st.integers(-(23 * 60 + 59), 23 * 60 + 59))
    sign = "-" if minutes < 0 else "+"
    offset = f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    if kind == "low":
        wall = datetime(1970, 1, 1) + timedelta(minutes=draw(st.integers(0, 3000)))
    elif kind == "high":
        wall = datetime(9999, 12, 31, 23, 59, 59) - timedelta(minutes=draw(
            st.integers(0, 3000)))
    else:
        wall = datetime(1970, 1, 1) + timedelta(seconds=draw(st.integers(0, 253_402_300_799)))
    if draw(st.booleans()):
        wall = wall.replace(microsecond=draw(st.integers(0, 999_999)))
    return wall.isoformat() + draw(st.sampled_from([offset, "Z"]) if minutes == 0
                                   else st.just(offset))


texts = st.one_of(st.text(max_size=40), st.sampled_from(["true", "échec ✓", "\ud800x",
                                                         "a\x00b", " ", "x" * 20_000]))
ints = st.one_of(st.integers(-2, 10_001), st.sampled_from([0, 2, 3600, 86_400, 604_800,
                                                           604_801, 10**20]))


@st.composite
def job_bodies(draw: st.DrawFn) -> dict[str, Any]:
    schedule: dict[str, Any] = {"cron": draw(st.sampled_from(CRONS)),
                                "timezone": draw(st.sampled_from(ZONES))}
    for key in ("start_at", "end_at"):
        if draw(st.booleans()):
            schedule[key] = draw(instants())
    if draw(st.booleans()):
        schedule["jitter_s"] = draw(ints)
    if draw(st.booleans()):
        schedule["dst_gap"] = draw(st.sampled_from(["auto", "shift", "skip", "later"]))
    if draw(st.booleans()):
        target: dict[str, Any] = {"shell": draw(texts)}
    else:
        target = {"http": {"url": draw(st.sampled_from(["https://example.org/h", "ftp://x",
                                                         "http://h:1/é?q=1"])),
                           "headers": draw(st.dictionaries(st.text(max_size=8), texts,
                                                           max_size=2)),
                           "body": draw(st.one_of(st.none(), texts))}}
    body: dict[str, Any] = {"id": draw(st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True)),
                            "schedule": schedule, "target": target}
    for key in ("misfire_grace_s", "catch_up_max", "max_runtime_s", "max_attempts",
                "retry_backoff_s", "heartbeat_timeout_s", "deadline_s"):
        if draw(st.integers(0, 3)) == 0:  # null: unset where optional, refused elsewhere
            nullable = key in ("max_runtime_s", "deadline_s")
            body[key] = draw(st.one_of(ints, st.none()) if nullable or draw(
                st.integers(0, 7)) == 0 else ints)
    if draw(st.booleans()):
        body["overlap_policy"] = draw(st.sampled_from(["allow", "forbid", "replace",
                                                       "buffer_one", "never"]))
    if draw(st.booleans()):
        body["paused"] = draw(st.booleans())
    if draw(st.booleans()):
        body["notify"] = draw(st.lists(st.sampled_from(["https://hooks.example/a",
                                                        "mailto:x"]), max_size=2))
    return body


def definition(job: dict[str, Any]) -> dict[str, Any]:
    return {k: job[k] for k in DEFINITION}


async def check(node: InProcessNode, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()  # ASCII: a lone surrogate travels as \ud800
    async with api_client(node) as http:
        created = await http.post("/v1/jobs", content=raw,
                                  headers={"Content-Type": "application/json"})
        assert created.status_code < 500, created.text
        for path in ("/v1/jobs", "/v1/status/jobs"):
            assert (await http.get(path)).status_code == 200, path
        if created.status_code != 201:
            assert created.status_code in (400, 409, 413), created.text
            assert created.json()["error"]["message"]
            return
        job_id = body["id"]
        try:
            shown = (await http.get(f"/v1/jobs/{job_id}"))
            assert shown.status_code == 200, shown.text
            job = shown.json()
            listed = (await http.get("/v1/jobs", params={"limit": 500})).json()["jobs"]
            assert [definition(j) for j in listed if j["id"] == job_id] == [definition(job)]
            # The same definition the API would make of the body, with the same instants.
            assert definition(job) == definition(parse_job(body).to_api() | {"paused":
                                                                           job["paused"]})
            for key in ("start_at", "end_at"):
                if body["schedule"].get(key) is not None:
                    assert parse_iso_ms(job["schedule"][key], key) == parse_iso_ms(
                        body["schedule"][key], key)
            # What is shown is accepted back and changes nothing.
            again = await http.put(f"/v1/jobs/{job_id}", json=definition(job))
            assert again.status_code == 200, again.text
            assert definition(again.json()) == definition(job)
        finally:
            assert (await http.delete(f"/v1/jobs/{job_id}")).status_code == 200


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Any:
    n = InProcessNode(Path(tmp_path_factory.mktemp("roundtrip")))
    yield n
    n.close()


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=job_bodies())
def test_every_accepted_job_reads_back_for_everyone_and_round_trips(
        node: InProcessNode, body: dict[str, Any]) -> None:
    asyncio.run(check(node, body))


def test_the_generator_reaches_both_sides() -> None:
    """The property is not vacuous: the drawn bodies include accepted and refused ones."""
    seen = {"ok": 0, "refused": 0}

    # Derandomized: a draw of 200 gave 9 accepted bodies once, so a random seed made this
    # guard flaky; a fixed draw keeps it a statement about the generator.
    @settings(max_examples=200, deadline=None, database=None, derandomize=True)
    @given(body=job_bodies())
    def classify(body: dict[str, Any]) -> None:
        try:
            parse_job(body)
            seen["ok"] += 1
        except ValidationError:
            seen["refused"] += 1

    classify()
    assert seen["ok"] >= 10 and seen["refused"] >= 10, seen
