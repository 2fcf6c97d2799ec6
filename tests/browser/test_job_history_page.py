"""The job page's History of edits, in real Chromium against a real three-node cluster:
an edit made on the page, a pause, and an edit made elsewhere each appear with who, when
and the fields they changed, before → after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.browser.test_status_page import open_page
from tests.system.helpers import add_job

pytestmark = pytest.mark.system

HOSTILE = "printf '<b>bold</b><img src=x onerror=window.pwned=1>'"


def change(page: Any, kind: str) -> Any:
    """The entry of the newest change of `kind`, once shown."""
    entry = page.locator(f'#job-changes li.change[data-kind="{kind}"]').first
    entry.wait_for(timeout=15_000)
    return entry


def field(entry: Any, name: str) -> tuple[str, str]:
    item = entry.locator(f'li[data-field="{name}"]')
    return item.locator("code.before").inner_text(), item.locator("code.after").inner_text()


def test_an_edit_on_the_job_page_shows_in_its_history_of_edits(
        cluster: LocalCluster, browser: Any, screenshots: Path) -> None:
    c = cluster
    leader = c.wait_leader()
    follower = next(n for n in c.ids if n != leader)
    add_job(c, leader, "invoices", schedule={"cron": "0 9 * * 1-5",
                                             "timezone": "Europe/Berlin"})
    admin = c.get(leader, "/v1/jobs/invoices/history")["versions"][0]["by"]

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        open_page(page, c.urls[follower] + "/#/jobs/invoices", c.admin_token)
        created = change(page, "create")
        assert f"Version 1 created by {admin}" in created.inner_text()

        # Edit the schedule on the page (preview, then save).
        page.get_by_label("Cron").fill("0 10 * * 1-5")
        page.get_by_role("button", name="Preview schedule").click()
        page.locator("#edit-save:not([disabled])").wait_for(timeout=10_000)
        page.get_by_role("button", name="Save schedule").click()
        edited = change(page, "edit")
        assert f"Version 2 edited by {admin}" in edited.inner_text()
        assert field(edited, "schedule.cron") == ("0 9 * * 1-5", "0 10 * * 1-5")
        assert edited.locator("li[data-field]").count() == 1  # nothing else moved

        # A pause from the page, and an edit through the API on another node.
        page.get_by_role("button", name="Pause invoices").click()
        paused = change(page, "pause")
        assert field(paused, "paused") == ("false", "true")
        current = c.get(leader, "/v1/jobs/invoices")
        body = {k: current[k] for k in ("id", "tenant", "schedule", "queue")}
        body.update(target={"shell": HOSTILE}, overlap_policy="forbid", paused=True)
        r = c.http.put(f"{c.urls[leader]}/v1/jobs/invoices", json=body,
                       headers={"If-Match": f'"{current["version"]}"'})
        assert r.status_code == 200, r.text
        page.locator('#job-changes li.change[data-kind="edit"] >> text=Version 3').wait_for(
            timeout=15_000)
        newest = page.locator("#job-changes li.change").first
        assert field(newest, "overlap_policy") == ("allow", "forbid")
        # Text only: markup in a definition is shown as characters, never rendered or run.
        assert field(newest, "target.shell")[1] == HOSTILE
        assert page.locator("#job-changes b, #job-changes img").count() == 0
        assert page.evaluate("window.pwned") is None

        kinds = page.locator("#job-changes li.change").evaluate_all(
            "items => items.map(i => i.dataset.kind)")
        assert kinds == ["edit", "pause", "edit", "create"]
        page.locator("#h-changes").scroll_into_view_if_needed()
        page.screenshot(path=str(screenshots / "job-page-history.png"), full_page=False)
        assert not errors, errors
    finally:
        page.close()


def test_the_history_of_edits_pages_to_earlier_edits(cluster: LocalCluster,
                                                     browser: Any) -> None:
    c = cluster
    leader = c.wait_leader()
    add_job(c, leader, "nightly", cron="0 2 * * *")
    for _ in range(12):  # 24 changes beyond the create: more than one page of 20
        for action in ("pause", "resume"):
            assert c.post(leader, f"/v1/jobs/nightly/{action}").status_code == 200
    wait_until(lambda: len(c.get(leader, "/v1/jobs/nightly/history",
                                 params={"limit": 100})["versions"]) == 25, 15,
               message="every change recorded")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        open_page(page, c.urls[leader] + "/#/jobs/nightly", c.admin_token)
        page.locator("#job-changes li.change").nth(19).wait_for(timeout=15_000)
        assert page.locator("#job-changes li.change").count() == 20
        assert page.locator('#job-changes li.change[data-kind="create"]').count() == 0
        page.get_by_role("button", name="Show earlier edits").click()
        change(page, "create")
        assert page.locator("#job-changes li.change").count() == 25
        page.get_by_role("button", name="Show earlier edits").wait_for(state="hidden",
                                                                       timeout=10_000)
    finally:
        page.close()


def test_a_schedule_saved_on_the_page_keeps_the_rest_of_the_job(
        cluster: LocalCluster, browser: Any) -> None:
    """Saving a schedule from the page changes the schedule only: a paused job stays
    paused, and its calendars, labels and concurrency group stay."""
    c = cluster
    leader = c.wait_leader()
    r = c.http.put(f"{c.urls[leader]}/v1/calendars/holidays",
                   json={"exclude": [{"date": "2026-12-25"}]})
    assert r.status_code in (200, 201), r.text
    r = c.http.put(f"{c.urls[leader]}/v1/concurrency-groups/db", json={"limit": 2})
    assert r.status_code in (200, 201), r.text
    add_job(c, leader, "ledger", schedule={"cron": "0 9 * * *"}, paused=True,
            calendars=["holidays"], labels={"team": "billing"}, concurrency_group="db")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        open_page(page, c.urls[leader] + "/#/jobs/ledger", c.admin_token)
        # The page fills the editor with the job's schedule once it has loaded the job.
        page.wait_for_function("document.querySelector('#edit-cron').value === '0 9 * * *'",
                               timeout=15_000)
        page.get_by_label("Cron").fill("0 11 * * *")
        page.get_by_role("button", name="Preview schedule").click()
        page.locator("#edit-save:not([disabled])").wait_for(timeout=10_000)
        page.get_by_role("button", name="Save schedule").click()
        wait_until(lambda: c.get(leader, "/v1/jobs/ledger")["version"] == 2, 15,
                   message="the saved schedule")
        job = c.get(leader, "/v1/jobs/ledger")
        assert job["schedule"]["cron"] == "0 11 * * *"
        assert job["paused"] is True and job["calendars"] == ["holidays"]
        assert job["labels"] == {"team": "billing"} and job["concurrency_group"] == "db"
    finally:
        page.close()
