"""The readers of fire times through the real app: job detail, job page, overview, herd and
backfill preview read the union of a job's schedules and mark calendar exclusions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from raftcron.core import commands as c
from raftcron.core.calendar import parse_calendar
from raftcron.core.model import parse_job
from tests.integration.inprocess import InProcessNode, api_fixture

T = "2030-01-07T00:00:00Z"  # a Monday, later than any test's clock


@pytest.fixture
def node(tmp_path: Path) -> InProcessNode:
    n = InProcessNode(tmp_path)

    def apply(cmd: c.Command) -> dict[str, Any]:
        return n.machine.apply(n.machine.last_applied + 1, cmd)

    apply(c.BeginEpoch(1, "n1", 1))
    cal = parse_calendar({"timezone": "UTC", "exclude": [{"date": "2030-01-07"}]}, "mondays")
    assert apply(c.PutCalendar("cal", 1, cal.to_spec()))["ok"]
    spec = parse_job({"id": "multi", "target": {"shell": "true"}, "calendars": ["mondays"],
                      "schedules": [{"cron": "0 0 */2 * *", "name": "odd-days"},
                                    {"cron": "0 0 * * 1,3", "name": "mon-wed"}]}).to_spec()
    assert apply(c.PutJob("put", 1, spec, True))["ok"]
    return n


api = api_fixture("node", attr=None)


async def test_the_job_page_lists_the_union_with_names_and_exclusions(
        api: httpx.AsyncClient) -> None:
    page = (await api.get("/v1/status/jobs/multi", params={"after": "2030-01-06T12:00:00Z",
                                                           "fires": 4})).json()
    got = [(f["utc"][:10], f["schedules"], f["excluded_by"]) for f in page["upcoming"]]
    # Jan 7 (Mon, 7th): both; 9th (Wed, odd): both; 11th: odd; 13th: odd.
    assert got == [("2030-01-07", ["odd-days", "mon-wed"], "mondays"),
                   ("2030-01-09", ["odd-days", "mon-wed"], None),
                   ("2030-01-11", ["odd-days"], None), ("2030-01-13", ["odd-days"], None)]
    assert "; and " in page["describe"]


async def test_the_backfill_preview_reads_the_union_less_the_calendar(
        api: httpx.AsyncClient) -> None:
    r = (await api.get("/v1/status/jobs/multi/backfill-preview", params={
        "start": "2030-01-06T00:00:00Z", "end": "2030-01-10T00:00:00Z"})).json()
    # Union in range: 7th (excluded), 9th; the 6th is neither odd nor Mon/Wed.
    assert r["instants"] == ["2030-01-09T00:00:00Z"] and r["excluded"] == {"mondays": 1}


async def test_overview_and_detail_show_every_schedule(api: httpx.AsyncClient) -> None:
    detail = (await api.get("/v1/jobs/multi")).json()
    assert [s["name"] for s in detail["schedules"]] == ["odd-days", "mon-wed"]
    assert all(f["schedules"] for f in detail["next_fire_times"])
    overview = (await api.get("/v1/status/jobs")).json()["jobs"][0]
    assert overview["schedule"]["cron"] == "0 0 */2 * *"
    assert len(overview["schedules"]) == 2 and overview["calendars"] == ["mondays"]
    herd = await api.get("/v1/schedule/herd", params={"hours": 24 * 7, "bucket_s": 86_400})
    assert herd.status_code == 200 and herd.json()["jobs"] == 1
    cals = (await api.get("/v1/calendars")).json()["calendars"]
    assert cals[0]["exclude"] == [{"date": "2030-01-07"}]
