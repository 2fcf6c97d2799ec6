"""The overview's filter box on a fleet larger than the list (200 jobs): typing asks the
server (`GET /v1/status/jobs?q=`), so a job beyond the first 200 by name is found, in real
Chromium against a real three-node cluster."""

from __future__ import annotations

from typing import Any

import pytest

from raftcron.testing import LocalCluster
from tests.browser.test_status_page import open_page

pytestmark = pytest.mark.system


def test_the_filter_finds_a_job_beyond_the_first_200(cluster: LocalCluster,
                                                     browser: Any) -> None:
    c = cluster
    leader = c.wait_leader()
    follower = next(n for n in c.ids if n != leader)
    jobs = [{"id": f"fleet-{i:03d}", "schedule": "0 3 * * *", "target": {"shell": "true"},
             "queue": "nightly" if i == 249 else "default"} for i in range(250)]
    resp = c.post(leader, "/v1/jobs:batchCreate", {"jobs": jobs})
    assert resp.status_code in (200, 201), resp.text

    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        open_page(page, c.urls[follower] + "/", c.admin_token)
        page.locator("#jobs-count", has_text="type to search all").wait_for(timeout=15_000)
        assert page.locator('#jobs a.job-link', has_text="fleet-249").count() == 0
        page.locator("#job-filter").fill("nightly")
        page.locator('#jobs a.job-link', has_text="fleet-249").wait_for(timeout=15_000)
        page.locator("#jobs-count", has_text="searched all jobs").wait_for(timeout=10_000)
        assert page.locator("#jobs tbody tr").count() == 1
        # Cleared, the first 200 come back.
        page.locator("#job-filter").fill("")
        page.locator("#jobs-count", has_text="type to search all").wait_for(timeout=15_000)
        assert page.locator('#jobs a.job-link', has_text="fleet-249").count() == 0
        assert not errors, errors
    finally:
        page.close()
