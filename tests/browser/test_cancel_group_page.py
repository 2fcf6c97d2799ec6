"""The job page's Cancel button and concurrency-group view, in real Chromium against a
real three-node cluster and a real worker.

A group of limit 1 holds one run of `hold` (a `sleep`) while a second waits: the page
shows one holder and one waiter. A read token's Cancel is refused and changes nothing;
a dismissed or empty note sends nothing; the queued run is cancelled at once and the
running one is killed by its worker, each keeping who and the note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.browser.test_status_page import open_page
from tests.system.helpers import add_job

pytestmark = pytest.mark.system


def runs(c: LocalCluster, nid: str) -> dict[str, dict[str, Any]]:
    """The manual runs of `hold` by status (one each expected)."""
    occs = c.get(nid, "/v1/occurrences", params={"job_id": "hold", "kind": "manual"})
    return {o["status"]: o for o in occs["occurrences"]}


def cancel_button(page: Any, occ_id: str) -> Any:
    return page.locator(f'tr[data-occurrence="{occ_id}"] button.cancel-run')


def test_cancel_buttons_and_the_group_view(cluster: LocalCluster, browser: Any,
                                           screenshots: Path) -> None:
    c = cluster
    leader = c.wait_leader()
    follower = next(n for n in c.ids if n != leader)
    resp = c.http.put(c.urls[leader] + "/v1/concurrency-groups/db", json={"limit": 1},
                      headers=c.auth_headers())
    assert resp.status_code == 200, resp.text
    # Never due by its schedule: its two runs are the ones triggered below.
    add_job(c, leader, "hold", cron="0 0 1 1 *", concurrency_group="db",
            overlap_policy="allow", max_runtime_s=120, target={"shell": "sleep 60"})
    for key in ("first", "second"):
        resp = c.post(leader, "/v1/jobs/hold/trigger", {"override_overlap": True},
                      headers={**c.auth_headers(), "Idempotency-Key": key})
        assert resp.status_code in (200, 201, 202), resp.text
    c.start_worker("w1", concurrency=2)
    both = wait_until(lambda: (lambda r: r if {"running", "pending"} <= set(r) else None)(
        runs(c, leader)), 30, message="one run holding the group, one waiting")
    running, pending = both["running"], both["pending"]
    reader = c.create_token("read", name="reader")

    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        # A read token sees the buttons, but its cancel is refused and nothing changes.
        open_page(page, c.urls[follower] + "/#/jobs/hold", reader)
        cancel_button(page, pending["id"]).wait_for(timeout=15_000)
        page.once("dialog", lambda d: d.accept("not mine to cancel"))
        cancel_button(page, pending["id"]).click()
        page.locator("#action-result", has_text="failed").wait_for(timeout=10_000)
        assert runs(c, leader).get("pending", {}).get("id") == pending["id"]

        open_page(page, c.urls[follower] + "/#/jobs/hold", c.admin_token)
        # The group view: limit 1, the running run holds it, the queued one waits.
        section = page.locator("#job-group-section")
        section.wait_for(timeout=15_000)
        page.locator('[data-group="holders"] li').first.wait_for(timeout=15_000)
        assert page.locator('[data-group="holders"] li').count() == 1
        assert page.locator('[data-group="waiters"] li').count() == 1
        assert "1" in page.locator("#job-group").inner_text()
        page.screenshot(path=str(screenshots / "job-page-group.png"), full_page=False)

        # A dismissed prompt and an empty note send nothing.
        page.once("dialog", lambda d: d.dismiss())
        cancel_button(page, pending["id"]).click()
        page.locator("#action-result", has_text="not sent").wait_for(timeout=10_000)
        page.once("dialog", lambda d: d.accept("   "))
        cancel_button(page, pending["id"]).click()
        page.locator("#action-result", has_text="a note is required").wait_for(
            timeout=10_000)
        assert runs(c, leader).get("pending", {}).get("id") == pending["id"]

        # The queued run: cancelled at once, with who and the note.
        page.once("dialog", lambda d: d.accept("duplicate of the first"))
        cancel_button(page, pending["id"]).click()
        page.locator("#action-result", has_text="Cancelled the run").wait_for(timeout=10_000)
        occ = c.get(leader, f"/v1/occurrences/{pending['id']}")
        assert occ["status"] == "cancelled", occ
        assert occ["cancellation"]["note"] == "duplicate of the first", occ
        assert occ["cancellation"]["by"], occ
        # It never ran: an attempt it may have (a lease released while the group was full)
        # ends cancelled too, with no exit code.
        assert all(a["status"] == "cancelled" and a["exit_code"] is None
                   for a in occ["attempt_list"]), occ["attempt_list"]

        # The running one: its worker kills the process group at its next heartbeat.
        page.once("dialog", lambda d: d.accept("the report is not needed today"))
        cancel_button(page, running["id"]).click()
        page.locator("#action-result", has_text="is stopping").wait_for(timeout=10_000)
        done = wait_until(lambda: (lambda o: o if o["status"] == "cancelled" else None)(
            c.get(leader, f"/v1/occurrences/{running['id']}")), 40,
            message="the running run cancelled")
        assert done["cancellation"]["note"] == "the report is not needed today"
        # The page follows: no Cancel button is left, and the group holds nothing.
        page.locator(f'tr[data-occurrence="{running["id"]}"]',
                     has_text="cancelled").wait_for(timeout=20_000)
        assert page.locator("button.cancel-run").count() == 0
        wait_until(lambda: page.locator('[data-group="holders"] li').count() == 0, 20,
                   message="the group's slot freed on the page")
        assert not errors, errors
    finally:
        page.close()
