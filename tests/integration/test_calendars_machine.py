"""The state machine on real SQLite: calendars, matched schedules in claims, bulk pause."""

from __future__ import annotations

import re
import sqlite3

import pytest

from raftcron.core import commands as c
from raftcron.core import identity
from raftcron.core.calendar import parse_calendar
from raftcron.core.model import parse_job
from raftcron.state.db import open_writer, schema_sql
from raftcron.state.digest import digest
from tests.integration.test_machine import T0, Node


def cal_spec(name: str = "holidays", tenant: str = "default", **kw: object) -> dict:
    return parse_calendar({"tenant": tenant, "timezone": "UTC",
                           "exclude": [{"date": "2026-12-25"}], **kw}, name).to_spec()


def multi_spec(job_id: str = "m", **kw: object) -> dict:
    return parse_job({"id": job_id, "target": {"shell": "true"}, "schedules": [
        {"cron": "0 * * * *", "name": "hourly"}, {"cron": "0 */2 * * *", "name": "two"}],
        **kw}).to_spec()


@pytest.fixture
def node(tmp_path) -> Node:
    n = Node(tmp_path / "state.db")
    n.begin(1)
    return n


def put_cal(n: Node, **kw: object) -> dict:
    return n.apply(c.PutCalendar(n.rid(), T0, cal_spec(**kw)))


def test_a_claim_records_which_schedules_named_the_instant(node: Node) -> None:
    assert node.apply(c.PutJob(node.rid(), T0, multi_spec(), True))["ok"]
    at = T0 + 2 * 3_600_000
    r = node.claim([["m", 1, at, at, "fire", ["hourly", "two"]],
                    ["m", 1, at + 3_600_000, at + 3_600_000, "fire", ["hourly"]]], now=at)
    assert r["ok"] and r["fired"] == 2 and r["rejected_items"] == []
    occ = node.occurrence(identity.scheduled_occurrence_id("m", at))
    assert occ["schedules"] == '["hourly","two"]'
    # The same instant again is "already claimed", never a second row (invariant 1).
    again = node.claim([["m", 1, at, at, "fire", ["hourly"]]], now=at)
    assert again["rejected_items"] == [["m", at, "already_claimed"]]


def test_matched_names_must_be_the_jobs_own_schedules(node: Node) -> None:
    assert node.apply(c.PutJob(node.rid(), T0, multi_spec(), True))["ok"]
    at = T0 + 3_600_000
    r = node.claim([["m", 1, at, at, "fire", ["nightly"]]], now=at)
    assert r["rejected_items"] == [["m", at, "invalid_decision"]]
    bad = node.claim([["m", 1, at, at, "fire", "hourly"]], now=at)
    assert bad["rejected_items"] == [["m", at, "invalid_item"]]


def test_a_calendar_skip_is_recorded_for_a_job_that_lists_the_calendar(node: Node) -> None:
    assert put_cal(node)["ok"]
    node.create("j", calendars=["holidays"])
    at = T0 + 60_000
    r = node.claim([["j", 1, at, at, "calendar:holidays"]], now=at)
    assert r["ok"] and r["skipped"] == 1
    occ = node.occurrence(identity.scheduled_occurrence_id("j", at))
    assert (occ["status"], occ["reason"]) == ("skipped", "calendar:holidays")
    assert node.q("SELECT count(*) FROM attempts")[0][0] == 0


def test_a_calendar_skip_naming_a_calendar_the_job_does_not_list_is_refused(node: Node) -> None:
    assert put_cal(node)["ok"]
    node.create("j")
    at = T0 + 60_000
    r = node.claim([["j", 1, at, at, "calendar:holidays"]], now=at)
    assert r["rejected_items"] == [["j", at, "invalid_decision"]]


def test_a_job_may_name_only_existing_calendars_of_its_own_tenant(node: Node) -> None:
    assert put_cal(node, name="theirs", tenant="other")["ok"]
    absent = node.apply(c.PutJob(node.rid(), T0, parse_job({
        "id": "j", "schedule": "* * * * *", "target": {"shell": "true"},
        "calendars": ["missing"]}).to_spec(), True))
    assert (absent["rejected"], absent["field"]) == ("not_found", "calendars.0")
    foreign = node.apply(c.PutJob(node.rid(), T0, parse_job({
        "id": "j", "schedule": "* * * * *", "target": {"shell": "true"},
        "calendars": ["theirs"]}).to_spec(), True))
    assert foreign["rejected"] == "not_found"
    node.create("j")
    edit = node.apply(c.PutJob(node.rid(), T0, parse_job({
        "id": "j", "schedule": "* * * * *", "target": {"shell": "true"},
        "calendars": ["theirs"]}).to_spec(), False))
    assert edit["rejected"] == "not_found"


def test_another_tenant_cannot_take_or_delete_a_calendar_name(node: Node) -> None:
    assert put_cal(node, tenant="acme")["ok"]
    taken = put_cal(node, tenant="other")
    assert taken["rejected"] == "already_exists"
    gone = node.apply(c.DeleteCalendar(node.rid(), T0, "holidays", tenants=["other"]))
    assert gone["rejected"] == "not_found"
    assert node.q("SELECT count(*) FROM calendars")[0][0] == 1


def test_deleting_a_calendar_a_job_lists_is_refused_naming_the_jobs(node: Node) -> None:
    assert put_cal(node)["ok"]
    node.create("a", calendars=["holidays"])
    node.create("b", calendars=["holidays"])
    r = node.apply(c.DeleteCalendar(node.rid(), T0, "holidays"))
    assert r["rejected"] == "conflict" and r["jobs"] == ["a", "b"]
    assert "a, b" in r["message"]
    node.apply(c.DeleteJob(node.rid(), T0, "a"))
    node.apply(c.DeleteJob(node.rid(), T0, "b"))
    assert node.apply(c.DeleteCalendar(node.rid(), T0, "holidays"))["deleted"]


def test_bulk_pause_by_label_stays_within_the_callers_tenants(node: Node) -> None:
    node.create("b1", tenant="billing", labels={"team": "billing"})
    node.create("b2", tenant="billing", labels={"team": "billing"}, queue="q2")
    node.create("o1", tenant="other", labels={"team": "billing"})
    node.create("x", tenant="billing", labels={"team": "ops"})
    r = node.apply(c.BulkPause(node.rid(), T0 + 5, {"label": ["team", "billing"]}, True,
                               "alice", "month-end freeze", tenants=["billing"]))
    assert r["ok"] and r["job_ids"] == ["b1", "b2"]
    paused = {row[0] for row in node.q("SELECT id FROM jobs WHERE paused = 1")}
    assert paused == {"b1", "b2"}
    assert node.job_spec("b1")["paused"] is True
    notes = node.q("SELECT job_id, action, who, note, at_ms FROM job_pause_notes ORDER BY 1")
    assert notes == [("b1", "paused", "alice", "month-end freeze", T0 + 5),
                     ("b2", "paused", "alice", "month-end freeze", T0 + 5)]
    resumed = node.apply(c.BulkPause(node.rid(), T0 + 6, {"queue": "q2"}, False, "bob",
                                     "done", tenants=None))
    assert resumed["job_ids"] == ["b2"]
    by_tenant = node.apply(c.BulkPause(node.rid(), T0 + 7, {"tenant": "other"}, True,
                                       "carol", "n", tenants=None))
    assert by_tenant["job_ids"] == ["o1"]


def test_a_database_from_before_these_tables_upgrades_and_digests_alike(tmp_path) -> None:
    """An old database (no calendars, pause notes or occurrence schedules column) opens,
    claims as before, and digests as it did until a new field is used."""
    path = str(tmp_path / "old.db")
    text = schema_sql()
    text = text[:text.index("-- Calendars (core.calendar)")]  # the tables added last
    text = re.sub(r",\n(\s*--[^\n]*\n)*\s*schedules\s+TEXT,\n(\s*--[^\n]*\n)*\s*upstream\s+TEXT,"
                  r"\n\s*upstream_outcome\s+TEXT\n", "\n", text)  # and the chains' columns
    text = re.sub(r",\n\s*max_schedules\s+INTEGER,\n\s*max_pending_runs\s+INTEGER\n", "\n",
                  text)  # the quotas added later still
    assert "schedules" not in text and "calendars" not in text
    open_writer(path, schema=text).close()
    conn = sqlite3.connect(path)
    before = digest(conn)
    conn.close()
    n = Node(path, level=None)  # opens and migrates
    assert digest(n.conn) == before
    n.begin(1)
    n.create("j")
    r = n.fire("j", T0 + 60_000)
    assert r["fired"] == 1
    assert n.occurrence(identity.scheduled_occurrence_id("j", T0 + 60_000))["schedules"] is None
