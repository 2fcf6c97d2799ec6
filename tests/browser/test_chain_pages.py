"""A chain on the status page, in real Chromium against a real three-node cluster: the
overview says what a chained job follows, the upstream's page names its followers, the
chained job's page names its upstream and, per run, the run that started it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.browser.test_status_page import open_page
from tests.system.helpers import add_job

pytestmark = pytest.mark.system


def test_both_job_pages_show_the_chain(cluster: LocalCluster, browser: Any,
                                       screenshots: Path) -> None:
    c = cluster
    leader = c.wait_leader()
    add_job(c, leader, "extract", cron="0 0 1 1 *")
    resp = c.post(leader, "/v1/jobs", {"id": "load", "after": {"job": "extract"},
                                       "target": {"shell": "true"}})
    assert resp.status_code == 201, resp.text
    c.start_worker("w1")
    assert c.post(leader, "/v1/jobs/extract/trigger", {},
                  headers={"Idempotency-Key": "chain-page"}).status_code == 202
    [run] = wait_until(lambda: c.get(leader, "/v1/occurrences", params={
        "job_id": "load", "status": "succeeded"})["occurrences"], 30,
        message="the chained run to succeed")
    upstream = run["upstream"]["occurrence_id"]

    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        open_page(page, c.urls[leader] + "/", c.admin_token)
        row = page.locator("tr", has=page.get_by_role("link", name="load", exact=True))
        row.get_by_text("after each success of extract").wait_for(timeout=15_000)

        page.get_by_role("link", name="load", exact=True).first.click()
        page.wait_for_url("**/#/jobs/load")
        after = page.locator('[data-chain="after"]')
        after.wait_for(timeout=15_000)
        assert "extract" in after.inner_text() and "on success" in after.inner_text()
        definition = page.locator("#job-definition").inner_text()
        assert "Runs after" in definition and "Time zone" not in definition, definition
        started_by = page.locator(f'[data-upstream="{upstream}"]')
        started_by.wait_for(timeout=15_000)
        assert started_by.inner_text() == "after extract succeeded"
        page.screenshot(path=str(screenshots / "chained-job-page.png"), full_page=False)

        # From the run to the upstream's page, which names its follower.
        started_by.get_by_role("link", name="extract").click()
        page.wait_for_url("**/#/jobs/extract")
        followers = page.locator('[data-chain="followed-by"]')
        followers.wait_for(timeout=15_000)
        assert followers.inner_text() == "load (on success)"
        assert errors == []
    finally:
        page.close()
