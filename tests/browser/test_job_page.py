"""The job page, the alert actions and the charts of the status page, in real Chromium
against a real three-node cluster (real processes, sockets and SQLite files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.browser.test_status_page import open_page
from tests.system.helpers import add_job

pytestmark = pytest.mark.system

HOSTILE = "<script>window.pwned=1</script><b>bold</b> from greet"


def occurrences(c: LocalCluster, nid: str, **params: str) -> list[dict[str, Any]]:
    return c.get(nid, "/v1/occurrences", params=params)["occurrences"]


def test_job_page_expands_a_run_to_its_attempt_and_output(cluster: LocalCluster, browser: Any,
                                                          screenshots: Path) -> None:
    c = cluster
    leader = c.wait_leader()
    follower = next(n for n in c.ids if n != leader)
    # Job output is text: markup in it must show as characters, never run or render.
    add_job(c, leader, "greet", cron="*/2 * * * * *",
            target={"shell": f"printf '%s\\n' '{HOSTILE}'"},
            schedule={"cron": "*/2 * * * * *", "timezone": "Europe/Berlin"})
    add_job(c, leader, "monthly", schedule={"cron": "0 9 1 * *", "timezone": "Europe/Berlin"})
    c.start_worker("w1")
    done = wait_until(lambda: occurrences(c, leader, job_id="greet", status="succeeded"), 30,
                      message="a succeeded run of greet")[0]
    detail = c.get(leader, f"/v1/occurrences/{done['id']}")
    attempt = detail["attempt_list"][0]

    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        # From the overview, by the job's name, on a follower.
        open_page(page, c.urls[follower] + "/", c.admin_token)
        # The fire-lag chart counts the leases the leader committed (read on a follower).
        page.locator("#lag-summary", has_text="fires leased; worst minute").wait_for(
            timeout=15_000)
        assert page.locator("#lag .p99").count() >= 1
        page.get_by_role("link", name="greet").first.click()
        page.wait_for_url("**/#/jobs/greet")
        page.locator("#job-definition dd", has_text="Europe/Berlin").first.wait_for(
            timeout=15_000)
        definition = page.locator("#job-definition").inner_text()
        for expected in ("Time zone", "DST", "gap: auto", "Misfire", "run_once", "Overlap",
                         "Queue", "default", "Tenant", "Version"):
            assert expected in definition, (expected, definition)

        row = page.locator(f'tr[data-occurrence="{done["id"]}"]')
        row.wait_for(timeout=15_000)
        row.get_by_role("button").click()
        output = page.locator(".attempts-row pre.output").first
        output.wait_for(timeout=10_000)
        assert output.inner_text().strip() == HOSTILE
        assert page.locator(".attempts-row pre.output b").count() == 0
        assert page.evaluate("window.pwned") is None
        attempt_box = page.locator(".attempts-row .attempt").first.inner_text()
        assert "w1" in attempt_box and str(attempt["fencing_token"]) in attempt_box
        assert "Exit code\n0" in attempt_box or "Exit code\t0" in attempt_box, attempt_box
        assert page.get_by_role("button", name="Hide attempts of").first.get_attribute(
            "aria-expanded") == "true"
        page.evaluate("document.querySelector('.attempts-row pre.output')"
                      ".scrollIntoView({block: 'center'})")
        page.screenshot(path=str(screenshots / "job-page.png"), full_page=False)

        # Filter by kind: no manual run yet; "Run now" makes one, and it shows.
        page.get_by_label("Kind").select_option("manual")
        page.get_by_text("no occurrence matches").wait_for(timeout=10_000)
        page.once("dialog", lambda d: d.accept())
        page.get_by_role("button", name="Run now greet").click()
        manual = wait_until(lambda: occurrences(c, leader, job_id="greet", kind="manual"), 10,
                            message="manual run")
        page.locator(f'tr[data-occurrence="{manual[0]["id"]}"]').wait_for(timeout=10_000)
        assert page.locator("#history tbody tr[data-occurrence]").count() == 1

        # Paging: 20 a page; "Older" shows the next ones, "Newest" comes back.
        page.get_by_label("Kind").select_option("")
        wait_until(lambda: len(occurrences(c, leader, job_id="greet")) > 21, 40,
                   message="more than one page of runs")
        page.locator("#history-page", has_text="page 1").wait_for(timeout=10_000)
        assert page.get_by_role("button", name="Newest").is_disabled()
        page.locator("#history-older:not([disabled])").wait_for(timeout=10_000)
        first_page = page.locator("#history tbody tr[data-occurrence]").first.get_attribute(
            "data-occurrence")
        page.get_by_role("button", name="Older").click()
        page.locator("#history-page", has_text="page 2").wait_for(timeout=10_000)
        assert page.locator(f'#history tr[data-occurrence="{first_page}"]').count() == 0
        page.get_by_role("button", name="Newest").click()
        page.locator("#history-page", has_text="page 1").wait_for(timeout=10_000)

        # Pause from the job page.
        page.get_by_role("button", name="Pause greet").click()
        wait_until(lambda: c.get(leader, "/v1/jobs/greet")["paused"], 10, message="paused")
        page.get_by_role("button", name="Resume greet").wait_for(timeout=10_000)

        # A monthly job in Berlin: within ten fire times the zone changes its offset.
        page.goto(c.urls[follower] + "/#/jobs/monthly")
        page.locator("#job-upcoming li").nth(9).wait_for(timeout=10_000)
        assert all("09:00:00+0" in t for t in page.locator("#job-upcoming li").all_inner_texts())
        marked = page.locator("#job-upcoming li.dst")
        assert marked.count() >= 1
        assert "after a DST change: UTC +0" in marked.first.inner_text()

        # Backfill: the preview lists the instants, the backfill creates exactly those.
        page.get_by_label("From").fill("2026-01-01T00:00:00")
        page.get_by_label("to", exact=True).fill("2026-03-31T23:59:59")
        page.get_by_role("button", name="Preview backfill").click()
        page.get_by_text("3 instants in 2026-01-01").wait_for(timeout=10_000)
        assert page.locator("#backfill-result li").all_inner_texts() == [
            "2026-01-01 08:00:00 UTC", "2026-02-01 08:00:00 UTC", "2026-03-01 08:00:00 UTC"]
        page.once("dialog", lambda d: d.accept())
        page.get_by_role("button", name="Backfill these instants").click()
        backfilled = wait_until(lambda: occurrences(c, leader, job_id="monthly", kind="backfill"),
                                10, message="backfill")
        assert sorted(o["scheduled_for"] for o in backfilled) == [
            "2026-01-01T08:00:00Z", "2026-02-01T08:00:00Z", "2026-03-01T08:00:00Z"]
        # The range in the job's own zone: 09:00 on April 1st is its instant in Berlin
        # (07:00 UTC, summer time), and no instant at all read as UTC.
        page.get_by_label("From").fill("2026-04-01T09:00:00")
        page.get_by_label("to", exact=True).fill("2026-04-01T09:00:00")
        page.get_by_role("button", name="Preview backfill").click()
        page.get_by_text("0 instants in").wait_for(timeout=10_000)
        page.get_by_label("in", exact=True).select_option("Europe/Berlin")
        page.get_by_role("button", name="Preview backfill").click()
        page.get_by_text("1 instant in").wait_for(timeout=10_000)
        assert page.locator("#backfill-result li").all_inner_texts() == [
            "2026-04-01 07:00:00 UTC"]
        # Edit the schedule: the preview shows both lists; saving needs that preview.
        page.get_by_label("Cron").fill("0 10 1 * *")
        page.get_by_role("button", name="Save schedule").wait_for(timeout=5_000)
        assert page.get_by_role("button", name="Save schedule").is_disabled()
        page.get_by_role("button", name="Preview schedule").click()
        proposed = page.locator("#edit-result .compare > div").nth(1)
        proposed.get_by_text("Proposed: at 10:00 on day 1 of the month").wait_for(timeout=10_000)
        assert all("10:00:00+0" in t for t in proposed.locator("li").all_inner_texts())
        assert all("09:00:00+0" in t for t in page.locator(
            "#edit-result .compare > div").nth(0).locator("li").all_inner_texts())
        page.get_by_role("button", name="Save schedule").click()
        saved = wait_until(lambda: (j := c.get(leader, "/v1/jobs/monthly"))["version"] == 2
                           and j, 10, message="schedule saved")
        assert saved["schedule"] == {**saved["schedule"], "cron": "0 10 1 * *",
                                     "timezone": "Europe/Berlin"}
        assert saved["target"] == {"shell": "true"} and saved["paused"] is False
        page.locator("#job-upcoming li", has_text="10:00:00+0").first.wait_for(timeout=10_000)
        page.screenshot(path=str(screenshots / "job-page-dst-backfill.png"), full_page=True)
        # A bad cron is refused in the preview, with the field named, and nothing is saved.
        page.get_by_label("Cron").fill("61 * * * *")
        page.get_by_role("button", name="Preview schedule").click()
        page.get_by_text("Preview refused: cron").wait_for(timeout=10_000)
        assert page.get_by_role("button", name="Save schedule").is_disabled()

        # A job that does not exist (or that the token may not see) says so.
        page.goto(c.urls[follower] + "/#/jobs/nope")
        page.get_by_text("No job nope").wait_for(timeout=10_000)
        assert not errors, errors
    finally:
        page.close()


def alert_by_id(c: LocalCluster, nid: str, alert_id: str) -> dict[str, Any]:
    found = [a for a in c.get(nid, "/v1/alerts", params={"status": "all"})["alerts"]
             if a["id"] == alert_id]
    assert len(found) == 1, found
    return found[0]


def test_overview_fits_one_screen_for_50_jobs_and_alerts_are_acked_and_resolved(
        cluster: LocalCluster, browser: Any, screenshots: Path) -> None:
    c = cluster
    leader = c.wait_leader()
    jobs = [{"id": f"job-{i:02d}", "schedule": {"cron": f"{i} * * * *"},
             "target": {"shell": "true"}} for i in range(1, 50)]
    assert c.post(leader, "/v1/jobs:batchCreate", {"jobs": jobs}).status_code == 200
    add_job(c, leader, "stuck", cron="* * * * * *", deadline_s=1, queue="unstaffed",
            tenant="acme")
    alert = wait_until(lambda: c.get(leader, "/v1/alerts")["alerts"], 20,
                       message="an alert")[-1]
    assert c.post(leader, "/v1/jobs/stuck/pause").status_code == 200
    reader = c.create_token("read", name="page-reader")
    other = c.create_token("tenant:other", name="other-tenant")

    page = browser.new_page(viewport={"width": 1920, "height": 1080})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        # Another tenant's token sees neither the job nor its alert.
        open_page(page, c.urls[leader] + "/", other)
        page.get_by_text("no jobs yet").wait_for(timeout=15_000)
        assert "stuck" not in page.locator("#alerts").inner_text()

        # A read token sees the alert; acknowledging it is refused, and nothing changes.
        open_page(page, c.urls[leader] + "/", reader)
        page.get_by_role("button", name=f"Acknowledge alert {alert['id']}").click()
        page.get_by_label(f"Note for acknowledge {alert['id']}").fill("looking")
        page.get_by_role("button", name="Acknowledge", exact=True).click()
        page.get_by_text("not allowed to do that (403 forbidden)").wait_for(timeout=10_000)
        assert alert_by_id(c, leader, alert["id"])["acknowledged"] is None

        open_page(page, c.urls[leader] + "/", c.admin_token)
        # 50 rows, all on one 1920x1080 screen without scrolling, health and alerts on top.
        rows = page.locator("#jobs tbody tr")
        page.locator("#jobs tbody tr th", has_text="job-49").wait_for(timeout=15_000)
        assert rows.count() == 50
        page.screenshot(path=str(screenshots / "overview-50-jobs.png"))
        last = rows.nth(49).bounding_box()
        assert last is not None and last["y"] + last["height"] <= 1080, last
        assert page.locator("#health").bounding_box()["y"] < 200
        assert page.locator("#alerts").bounding_box()["y"] < 300

        # Sorting by a column header, both ways; the filter box narrows the rows.
        page.get_by_role("button", name="Job", exact=True).click()
        assert rows.first.locator("th").inner_text().startswith("stuck")
        page.get_by_role("button", name="Job", exact=True).click()
        assert rows.first.locator("th").inner_text().startswith("job-01")
        assert page.locator("#jobs th[aria-sort=ascending]").inner_text().startswith("Job")
        page.get_by_label("Filter").fill("job-4")
        assert [t.split()[0] for t in rows.locator("th").all_inner_texts()] == [
            f"job-{i}" for i in range(40, 50)]
        assert "(10 of 50 shown)" in page.locator("#jobs-count").inner_text()
        page.get_by_label("Filter").fill("acme")
        assert rows.count() == 1 and "stuck" in rows.first.inner_text()
        page.get_by_label("Filter").fill("")

        # Acknowledge with a note, then resolve with a note: who and both notes are kept.
        page.get_by_role("button", name=f"Acknowledge alert {alert['id']}").click()
        note = page.get_by_label(f"Note for acknowledge {alert['id']}")
        note.fill("on it: the unstaffed queue has no worker")
        note.press("Enter")
        acked = wait_until(lambda: alert_by_id(c, leader, alert["id"])["acknowledged"], 10,
                           message="acknowledged from the page")
        assert acked["note"] == "on it: the unstaffed queue has no worker"
        page.locator("#alerts", has_text="open, acknowledged").wait_for(timeout=10_000)
        assert "acknowledged by " in page.locator("#alerts").inner_text()
        page.get_by_role("button", name=f"Resolve alert {alert['id']}").click()
        page.get_by_label(f"Note for resolve {alert['id']}").fill("paused until staffed")
        page.get_by_role("button", name="Resolve", exact=True).click()
        wait_until(lambda: alert_by_id(c, leader, alert["id"])["status"] == "resolved", 10,
                   message="resolved from the page")
        history = alert_by_id(c, leader, alert["id"])["history"]
        people = [(h["event"], h["note"]) for h in history if "by" in h]
        assert people == [("acknowledged", "on it: the unstaffed queue has no worker"),
                          ("resolved", "paused until staffed")], history
        page.locator("#alerts", has_text="✓ resolved").wait_for(timeout=10_000)
        assert "paused until staffed" in page.locator("#alerts").inner_text()
        assert not errors, errors
    finally:
        page.close()


def test_herd_chart_shows_a_1000_job_spike_at_midnight_above_10_per_second_jobs(
        cluster: LocalCluster, browser: Any, screenshots: Path) -> None:
    c = cluster
    leader = c.wait_leader()
    nightly = [{"id": f"nightly-{i:04d}", "schedule": {"cron": "0 0 * * *"},
                "target": {"shell": "true"}} for i in range(1000)]
    assert c.post(leader, "/v1/jobs:batchCreate", {"jobs": nightly}).status_code == 200
    for i in range(10):
        add_job(c, leader, f"every-second-{i}", cron="* * * * * *", queue="nobody")

    page = browser.new_page(viewport={"width": 1920, "height": 1080})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        open_page(page, c.urls[leader] + "/", c.admin_token)
        summary = page.locator("#herd-summary", has_text="1,010 active jobs")
        summary.wait_for(timeout=30_000)
        text = summary.inner_text()
        assert "steady about 600 per minute" in text, text
        assert "peak 1,600 fires in the minute of 00:00 UTC" in text, text
        assert "1,000 above the steady level" in text, text
        assert page.locator("#herd-peak").inner_text() == "▼ 1,600 at 00:00"

        # Exactly one spike minute, midnight, drawn well above the steady band and wide
        # enough to see (a minute is under a pixel of this chart).
        spikes = page.locator("#herd .spike")
        assert spikes.count() == 1
        spike = spikes.first
        assert spike.get_attribute("data-minute").endswith("T00:00:00.000Z")
        assert spike.get_attribute("data-count") == "1600"
        # Measured in one step in the page: the live overview above the chart can change
        # height between two separate reads and move the chart in between.
        chart, bar, steady, hits = page.evaluate("""() => {
            const box = (e) => { const r = e.getBoundingClientRect();
                                 return {x: r.x, y: r.y, width: r.width, height: r.height}; };
            const chart = box(document.querySelector("#herd svg"));
            const bar = box(document.querySelector("#herd .spike"));
            const steady = box(document.querySelector("#herd .steady"));
            const x = bar.x + bar.width / 2, y = chart.y + chart.height * 0.3;
            const hits = [-1, 0, 1].map(
                (dx) => document.elementFromPoint(x + dx, y).getAttribute("class"));
            return [chart, bar, steady, hits];
        }""")
        bottom = chart["y"] + chart["height"]
        assert bar["height"] > 0.9 * chart["height"], (bar, chart)
        assert 0.25 * chart["height"] < bottom - steady["y"] < 0.5 * chart["height"], (
            steady, chart)
        # Three pixels wide, above the band: the spike itself.
        assert hits == ["spike"] * 3, hits
        label = page.get_by_role("img", name="Fires per 1 minute")
        assert "steady about 600 per minute, 1 spike minutes" in label.get_attribute("aria-label")
        assert "more exist" in page.locator("#jobs-count").inner_text()
        page.locator("#herd").screenshot(path=str(screenshots / "herd-chart.png"))
        page.screenshot(path=str(screenshots / "overview-herd.png"))
        assert not errors, errors
    finally:
        page.close()
