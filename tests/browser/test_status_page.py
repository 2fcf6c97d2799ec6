"""The status page in a real browser against a real three-node cluster."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job

pytestmark = pytest.mark.system


def open_page(page: Any, url: str, token: str) -> None:
    """Load the page and give it the token through its form, by keyboard."""
    page.goto(url)
    page.get_by_label("API token").fill(token)
    page.get_by_label("API token").press("Enter")


def job(c: LocalCluster, nid: str, job_id: str) -> dict[str, Any]:
    return c.get(nid, f"/v1/jobs/{job_id}")


def manual_runs(c: LocalCluster, nid: str, job_id: str) -> list[dict[str, Any]]:
    return c.get(nid, "/v1/occurrences", params={"job_id": job_id, "kind": "manual"})[
        "occurrences"]


def test_page_actions_live_updates_and_accessibility(cluster: LocalCluster, browser: Any,
                                                     screenshots: Path) -> None:
    c = cluster
    leader = c.wait_leader()
    follower = next(n for n in c.ids if n != leader)
    add_job(c, leader, "hourly", cron="0 * * * *", schedule={"cron": "0 * * * *",
                                                             "timezone": "Europe/Berlin"})
    add_job(c, leader, "every5s", cron="*/5 * * * * *")
    add_job(c, leader, "slow", cron="*/2 * * * * *", overlap_policy="forbid",
            target={"shell": "sleep 5"})
    add_job(c, leader, "stuck", cron="* * * * * *", deadline_s=1, queue="unstaffed")
    c.start_worker("w1")
    wait_until(lambda: c.get(leader, "/v1/alerts")["alerts"], 20, message="an alert")
    assert c.post(leader, "/v1/jobs/stuck/pause").status_code == 200

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        # Served by a follower: reads are local, actions are forwarded to the leader.
        open_page(page, c.urls[follower] + "/", c.admin_token)
        page.get_by_role("button", name="Pause hourly").wait_for(timeout=15_000)
        assert "hourly" in page.locator("#jobs").inner_text()
        assert "Europe/Berlin" in page.locator("#jobs").inner_text()
        page.locator("#cluster tbody tr").nth(2).wait_for(timeout=10_000)
        assert page.locator("#cluster tbody tr").count() == 3
        assert "leader" in page.locator("#cluster").inner_text()

        # Pause, then resume, by mouse; the API state changes each time.
        page.get_by_role("button", name="Pause hourly").click()
        wait_until(lambda: job(c, leader, "hourly")["paused"], 10, message="paused via page")
        page.get_by_role("button", name="Resume hourly").wait_for(timeout=10_000)
        assert "paused" in page.locator('[data-job-state="hourly"]').inner_text()
        page.get_by_role("button", name="Resume hourly").click()
        wait_until(lambda: not job(c, leader, "hourly")["paused"], 10, message="resumed")
        page.get_by_role("button", name="Pause hourly").wait_for(timeout=10_000)

        # Run now asks first: dismissing does nothing, accepting creates a manual run.
        seen: list[str] = []

        def dismiss(d: Any) -> None:
            seen.append(d.message)
            d.dismiss()

        page.once("dialog", dismiss)
        page.get_by_role("button", name="Run now hourly").click()
        page.wait_for_timeout(1500)
        assert seen == ["Run hourly now?"]
        assert manual_runs(c, leader, "hourly") == []

        def accept(d: Any) -> None:
            seen.append(d.message)
            d.accept()

        page.once("dialog", accept)
        page.get_by_role("button", name="Run now hourly").click()
        runs = wait_until(lambda: manual_runs(c, leader, "hourly"), 10, message="manual run")
        assert len(runs) == 1 and len(seen) == 2
        page.get_by_text(f"occurrence {runs[0]['id']}").wait_for(timeout=10_000)

        # Keyboard only: focus the button and press Enter; focus survives the live refresh.
        page.get_by_role("button", name="Pause every5s").focus()
        page.keyboard.press("Enter")
        wait_until(lambda: job(c, leader, "every5s")["paused"], 10, message="keyboard pause")
        page.get_by_role("button", name="Resume every5s").wait_for(timeout=10_000)
        page.wait_for_timeout(2500)
        focused = page.evaluate("document.activeElement && document.activeElement.dataset.key")
        assert focused == "toggle:every5s"
        page.keyboard.press("Enter")
        wait_until(lambda: not job(c, leader, "every5s")["paused"], 10,
                   message="keyboard resume")

        # Live updates without reload: each job's sparkline shows runs and skips, and says
        # so in words (its label).
        page.locator("#jobs .spark .occ.status-succeeded").first.wait_for(timeout=20_000)
        page.locator("#jobs .spark .occ.status-skipped").first.wait_for(timeout=20_000)
        slow = page.locator('#jobs .spark[role=img][aria-label*=" of slow,"]')
        wait_until(lambda: "skipped (overlap)" in (slow.get_attribute("aria-label") or ""), 20,
                   message="an overlap skip in the sparkline of slow")
        assert "⚠ open" in page.locator("#alerts").inner_text()
        assert "missed" in page.locator("#alerts").inner_text()
        page.locator("#running tbody tr td", has_text="slow").first.wait_for(timeout=15_000)
        assert "w1" in page.locator("#workers").inner_text()
        page.locator("#herd-summary", has_text="active jobs").wait_for(timeout=15_000)
        assert page.locator("#herd svg[role=img]").get_attribute("aria-label")
        assert "Ready" in page.locator("#health").inner_text()
        assert not errors, errors
        page.screenshot(path=str(screenshots / "status-page.png"), full_page=True)
        page.screenshot(path=str(screenshots / "status-page-top.png"))
    finally:
        page.close()


def test_page_works_against_every_node_and_shows_a_lost_node(cluster: LocalCluster,
                                                             browser: Any,
                                                             screenshots: Path) -> None:
    c = cluster
    leader = c.wait_leader()
    add_job(c, leader, "tick", cron="*/3 * * * * *")
    page = browser.new_page()
    try:
        for nid in c.ids:
            open_page(page, c.urls[nid] + "/", c.admin_token)
            page.get_by_role("button", name="Pause tick").wait_for(timeout=15_000)
            page.get_by_text(f"Served by {nid}").wait_for(timeout=10_000)
        victim = next(n for n in c.ids if n != leader)
        c.kill(victim)
        page.goto(c.urls[leader] + "/")  # same tab and origin: the token is kept
        page.get_by_text(f"unreachable over HTTP: {victim}").wait_for(timeout=15_000)
        # The victim's own row: its id heads the row (other rows may name it as leader).
        row = page.locator("#cluster tbody tr").filter(
            has=page.locator("th", has_text=re.compile(rf"^{victim}\b")))
        assert "✗ no" in row.inner_text()
        page.screenshot(path=str(screenshots / "status-page-node-down.png"), full_page=True)
    finally:
        page.close()


def test_page_asks_for_a_token_and_explains_401_and_403(cluster: LocalCluster, browser: Any,
                                                         screenshots: Path) -> None:
    c = cluster
    leader = c.wait_leader()
    add_job(c, leader, "guarded", cron="0 * * * *")
    reader = c.create_token("read", name="page-reader")
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(c.urls[leader] + "/")
        page.get_by_text("Enter an API token to see the cluster.").wait_for(timeout=10_000)
        assert page.locator("#jobs tbody tr").count() == 0

        # A wrong token: a clear 401 message, focus back in the token field.
        open_page(page, c.urls[leader] + "/", "rc_wrong")
        page.get_by_text("refused the token (401 unauthorized)").wait_for(timeout=10_000)
        assert page.evaluate("document.activeElement.id") == "token-input"

        # A read token, typed and submitted by keyboard: the page loads; actions are 403.
        page.get_by_label("API token").fill(reader)
        page.keyboard.press("Enter")
        page.get_by_role("button", name="Pause guarded").wait_for(timeout=15_000)
        assert page.locator("#auth-message").inner_text() == (
            "Using the token saved for this browser tab.")
        page.get_by_role("button", name="Pause guarded").click()
        page.get_by_text("not allowed to do that (403 forbidden)").wait_for(timeout=10_000)
        assert "page-reader" in page.locator("#auth-message").inner_text()
        assert job(c, leader, "guarded")["paused"] is False

        # Kept for the tab across a reload; "Forget token" drops it.
        page.reload()
        page.get_by_role("button", name="Pause guarded").wait_for(timeout=15_000)
        assert page.evaluate("sessionStorage.getItem('raftcron.token')") == reader
        page.get_by_role("button", name="Forget token").click()
        assert page.evaluate("sessionStorage.getItem('raftcron.token')") is None
        page.reload()
        page.get_by_text("Enter an API token to see the cluster.").wait_for(timeout=10_000)
        page.screenshot(path=str(screenshots / "status-page-token.png"))
        assert not errors, errors
    finally:
        page.close()
