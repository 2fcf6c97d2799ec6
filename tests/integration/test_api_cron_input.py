"""Extreme cron expressions through the API: a 400 naming the field with a one-line reason
(the engine's, never croniter's text or a traceback), and the node keeps answering."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.integration.inprocess import InProcessNode, api_client

EXTREME_CRONS = {
    "": "expression is empty",
    " \t ": "expression is empty",
    "x" * 200_000: "expression longer than 256 characters",
    "0 0 30 2 *": "never fires",
    "5-1 * * * *": "minute range '5-1' is reversed",
    "*/61 * * * *": "minute step 61 out of range 1-60",
    "*/" + "9" * 5000 + " * * * *": "expression longer than 256 characters",
    "*/9999 * * * *": "bad minute item '*/9999'",
    "0005 * * * *": "bad minute item '0005'",
    "60 * * * *": "minute value 60 out of range 0-59",
    "０ ０ * * *": "bad minute item '０'",
    "\U0001f4a5 * * * *": "bad minute item '\U0001f4a5'",
    "@reboot": "unknown macro '@reboot'",
    "* * * * 1,5#6": "day-of-week occurrence in '5#6' out of range 1-5",
}


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    node = InProcessNode(tmp_path / "n1")
    try:
        async with api_client(node) as http:
            yield http
    finally:
        node.close()


def _job(cron: str) -> bytes:
    # ensure_ascii keeps a lone surrogate as the \\ud800 escape a JSON client would send.
    return json.dumps({"id": "j", "schedule": {"cron": cron},
                       "target": {"shell": "true"}}).encode()


@pytest.mark.parametrize("cron", list(EXTREME_CRONS), ids=lambda c: repr(c[:24]))
async def test_an_extreme_cron_is_a_400_naming_schedule_cron(client: httpx.AsyncClient,
                                                             cron: str) -> None:
    response = await client.post("/v1/jobs", content=_job(cron),
                                 headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["field"], error["message"]) == ("schedule.cron", EXTREME_CRONS[cron])
    assert (await client.get("/v1/jobs")).status_code == 200


async def test_a_cron_with_a_lone_surrogate_is_refused_with_the_body(
        client: httpx.AsyncClient) -> None:
    """The body reader refuses it before the schedule is looked at (no response could
    render it back)."""
    response = await client.post("/v1/jobs", content=_job("\ud800 * * * *"),
                                 headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["field"] == "body"


async def test_a_proposed_extreme_cron_on_the_job_page_names_the_query_parameter(
        client: httpx.AsyncClient) -> None:
    created = await client.post("/v1/jobs", json={"id": "j", "schedule": {"cron": "0 9 * * *"},
                                                  "target": {"shell": "true"}})
    assert created.status_code in (200, 201), created.text
    for cron, message in EXTREME_CRONS.items():
        if len(cron) > 5000:
            continue  # a URL this long is not a query a client sends
        response = await client.get("/v1/status/jobs/j", params={"cron": cron})
        assert response.status_code == 400, (cron, response.text)
        assert response.json()["error"] == {"code": "invalid", "field": "cron",
                                            "message": message}
