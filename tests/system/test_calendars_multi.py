"""Several schedules, calendars and bulk pause on a real three-node cluster.

Real node processes, sockets and SQLite files: a job with two schedules that share
instants fires each instant of their union once, recording which schedules named it,
across a leader failover; the instants inside a calendar's window are recorded skipped
with `calendar:<name>`; tenants cannot read, use or delete each other's calendars; bulk
pause stays within the caller's tenants and records who did it.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import serving_cluster, sleep_until_past, ts
from tests.system.test_auth import As, job

pytestmark = pytest.mark.system


def iso(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def cl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with serving_cluster(Path(tmp_path_factory.mktemp("multi"))) as c:
        yield c


@pytest.fixture(scope="module")
def tokens(cl: LocalCluster) -> dict[str, str]:
    return {"acme": cl.create_token("tenant:acme", name="acme-bot"),
            "other": cl.create_token("tenant:other", name="other-bot"),
            "read": cl.create_token("read", name="reader")}


@pytest.fixture
def as_(cl: LocalCluster) -> Iterator[Any]:
    made: list[As] = []

    def make(token: str | None, nid: str | None = None) -> As:
        made.append(As(cl, token, nid))
        return made[-1]

    yield make
    for a in made:
        a.close()


def expect(resp: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, (resp.request.method, resp.request.url, resp.text)
    body = resp.json()
    if field is not None:
        assert body["error"]["field"] == field, body
    return body


def test_the_union_fires_once_per_instant_and_a_calendar_window_is_skipped(
        cl: LocalCluster) -> None:
    admin = As(cl, cl.admin_token)
    try:
        # Aligned to a multiple of six seconds, so both schedules name its first instant.
        begin = math.ceil(time.time() / 6) * 6 + 6
        window = (begin + 6, begin + 10)  # excluded: [begin+6, begin+10)
        expect(admin("PUT", "/v1/calendars/quiet", {"exclude": [
            {"start": iso(window[0]), "end": iso(window[1])}]}), 201)
        expect(admin("POST", "/v1/jobs", {
            "id": "two-schedules", "target": {"shell": "true"}, "calendars": ["quiet"],
            "misfire_grace_s": 3600, "misfire_policy": "catch_up", "catch_up_max": 100,
            "schedules": [{"cron": "*/2 * * * * *", "name": "even"},
                          {"cron": "*/3 * * * * *", "name": "three"}]}), 201)
        detail = expect(admin("GET", "/v1/jobs/two-schedules"), 200)
        assert [s["name"] for s in detail["schedules"]] == ["even", "three"]
        assert detail["calendars"] == ["quiet"]
        # Kill the leader inside the calendar's window: the new leader loads the calendar
        # before it claims, and goes on with the union where the old one stopped.
        sleep_until_past(window[0] + 1)
        old = cl.leader()
        assert old is not None
        cl.kill(old)
        new = cl.wait_leader(timeout=30, among=[n for n in cl.ids if n != old])
        end = begin + 24
        sleep_until_past(end + 3)
        occs = [o for o in cl.occurrences(new, "two-schedules") if o["kind"] == "scheduled"]
    finally:
        admin.close()
    seen = Counter(ts(o["scheduled_for"]) for o in occs)
    assert all(n == 1 for n in seen.values()), f"an instant claimed twice: {seen}"
    union = sorted(t for t in range(begin, end + 1) if t % 2 == 0 or t % 3 == 0)
    got = sorted(t for t in seen if begin <= t <= end)
    assert got == union, f"instants of the union missing or extra: {set(union) ^ set(got)}"
    by_t = {ts(o["scheduled_for"]): o for o in occs}
    for t in union:
        o = by_t[t]
        names = [n for n, step in (("even", 2), ("three", 3)) if t % step == 0]
        assert o["schedules"] == names, (t, o)
        if window[0] <= t < window[1]:
            assert (o["status"], o["reason"]) == ("skipped", "calendar:quiet"), o
        else:
            assert o["reason"] != "calendar:quiet", o
    assert any(window[0] <= t < window[1] for t in union)  # the window held instants
    cl.start(old)
    cl.wait_serving()
    cl.wait_converged(timeout=60)


def test_calendars_are_tenant_scoped(cl: LocalCluster, tokens: dict[str, str],
                                     as_: Any) -> None:
    acme, other, reader = as_(tokens["acme"]), as_(tokens["other"], cl.ids[1]), \
        as_(tokens["read"], cl.ids[2])
    cal = {"tenant": "acme", "timezone": "Europe/Berlin",
           "exclude": [{"date": "2026-12-25"}, {"cron": "* * 24-26 12 *"}]}
    expect(acme("PUT", "/v1/calendars/acme-holidays", cal), 201)
    expect(acme("PUT", "/v1/calendars/acme-holidays", cal), 200)  # replaced
    # Another tenant: cannot read, list, use, take over or delete it.
    expect(other("GET", "/v1/calendars/acme-holidays"), 404, "name")
    assert other("GET", "/v1/calendars").json()["calendars"] == []
    expect(other("POST", "/v1/jobs", job("other-job", "other",
                                        calendars=["acme-holidays"])), 404, "calendars.0")
    expect(other("PUT", "/v1/calendars/acme-holidays", {**cal, "tenant": "other"}), 409)
    expect(other("PUT", "/v1/calendars/x", {**cal, "tenant": "acme"}), 403, "tenant")
    expect(other("DELETE", "/v1/calendars/acme-holidays"), 404)
    # A read token reads and writes nothing.
    assert expect(reader("GET", "/v1/calendars/acme-holidays"), 200)["tenant"] == "acme"
    expect(reader("PUT", "/v1/calendars/r", {"exclude": []}), 403)
    expect(reader("DELETE", "/v1/calendars/acme-holidays"), 403)
    # Its own job may list it; then it cannot be deleted, and the refusal names the job.
    expect(acme("POST", "/v1/jobs", job("acme-billing", "acme",
                                       calendars=["acme-holidays"])), 201)
    refused = expect(acme("DELETE", "/v1/calendars/acme-holidays"), 409, "name")
    assert "acme-billing" in refused["error"]["message"]
    shown = expect(acme("GET", "/v1/calendars/acme-holidays"), 200)
    assert shown["jobs"] == ["acme-billing"] and shown["job_count"] == 1
    expect(acme("DELETE", "/v1/jobs/acme-billing"), 200)
    expect(acme("DELETE", "/v1/calendars/acme-holidays"), 200)
    expect(acme("GET", "/v1/calendars/acme-holidays"), 404)


def test_bad_calendars_and_schedules_are_400s_naming_the_field(
        cl: LocalCluster, tokens: dict[str, str], as_: Any) -> None:
    acme = as_(tokens["acme"])
    expect(acme("PUT", "/v1/calendars/bad", {"tenant": "acme", "exclude": [
        {"date": "2026-02-30"}]}), 400, "exclude.0.date")
    expect(acme("PUT", "/v1/calendars/bad", {"tenant": "acme", "exclude": [
        {"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}]}), 400,
        "exclude.0.end")
    many = [{"cron": f"{i} 9 * * *"} for i in range(17)]
    body = {"id": "too-many", "tenant": "acme", "target": {"shell": "true"}}
    expect(acme("POST", "/v1/jobs", {**body, "schedules": many}), 400, "schedules")
    expect(acme("POST", "/v1/jobs", {**body, "schedules": [
        {"cron": "0 9 * * *"}, {"cron": "0 9 31 2 *"}]}), 400, "schedules.1.cron")


def test_bulk_pause_stays_in_the_callers_tenants_and_records_who(
        cl: LocalCluster, tokens: dict[str, str], as_: Any) -> None:
    acme, other, reader = as_(tokens["acme"]), as_(tokens["other"]), as_(tokens["read"])
    billing = {"team": "billing"}
    for jid, tenant, client in (("acme-inv", "acme", acme), ("acme-pay", "acme", acme),
                                ("other-inv", "other", other)):
        expect(client("POST", "/v1/jobs", job(jid, tenant, labels=billing)), 201)
    expect(acme("POST", "/v1/jobs", job("acme-ops", "acme", labels={"team": "ops"})), 201)
    freeze = {"label": "team=billing", "note": "month-end freeze"}
    expect(reader("POST", "/v1/jobs:pause", freeze), 403)
    expect(other("POST", "/v1/jobs:pause", {"tenant": "acme", "note": "x"}), 403, "tenant")
    expect(acme("POST", "/v1/jobs:pause", {"label": "team", "note": "x"}), 400, "label")
    expect(acme("POST", "/v1/jobs:pause", {"label": "team=billing"}), 400, "note")
    expect(acme("POST", "/v1/jobs:pause", {"queue": "q", "tenant": "acme", "note": "x"}), 400)
    key = {"Idempotency-Key": "freeze-1"}
    done = expect(acme("POST", "/v1/jobs:pause", freeze, headers=key), 200)
    assert done["job_ids"] == ["acme-inv", "acme-pay"] and done["changed"] == 2
    # The same key for another request is refused, not replayed.
    expect(acme("POST", "/v1/jobs:pause", {**freeze, "note": "other"}, headers=key), 422)
    # Replayed: the stored answer, nothing paused twice.
    assert expect(acme("POST", "/v1/jobs:pause", freeze, headers=key), 200)["changed"] == 2

    def paused(jid: str, client: As) -> bool:
        return expect(client("GET", f"/v1/jobs/{jid}?consistent=true"), 200)["paused"]

    assert paused("acme-inv", acme) and paused("acme-pay", acme)
    assert not paused("acme-ops", acme) and not paused("other-inv", other)
    note = expect(acme("GET", "/v1/jobs/acme-inv"), 200)["pause_note"]
    assert note["action"] == "paused" and note["note"] == "month-end freeze"
    assert note["by"].startswith("acme-bot")
    back = expect(acme("POST", "/v1/jobs:resume", {"tenant": "acme", "note": "books closed"}),
                  200)
    assert sorted(back["job_ids"]) == ["acme-inv", "acme-pay"]
    wait_until(lambda: not paused("acme-inv", acme), 10)


# --- the command line ------------------------------------------------------------------------

def test_the_cli_puts_calendars_adds_multi_schedule_jobs_and_pauses_by_label(
        cl: LocalCluster) -> None:
    from tests.system.test_cli import one_line, raftcron

    server = ["--server", cl.urls[cl.ids[0]]]
    token = cl.admin_token
    put = raftcron("calendar", "put", "cli-hol", "--tz", "Europe/Berlin", "--date",
                   "2026-12-25", "--cron", "* * 24-26 12 *", "--window",
                   "2026-12-31T18:00:00+01:00/2027-01-01T06:00:00+01:00", "--json", *server,
                   token=token)
    assert put.returncode == 0, put.stderr
    assert len(json.loads(put.stdout)["exclude"]) == 3
    add = raftcron("job", "add", "cli-multi", "--cron", "0 9 * * 1-5", "--cron", "0 12 * * 6",
                   "--tz", "Europe/Berlin", "--shell", "true", "--calendar", "cli-hol",
                   "--label", "team=billing", "--json", *server, token=token)
    assert add.returncode == 0, add.stderr
    shown = json.loads(add.stdout)
    assert [s["cron"] for s in shown["schedules"]] == ["0 9 * * 1-5", "0 12 * * 6"]
    assert shown["calendars"] == ["cli-hol"] and shown["labels"] == {"team": "billing"}
    listed = raftcron("job", "list", *server, token=token)
    assert "0 9 * * 1-5 | 0 12 * * 6" in listed.stdout, listed.stdout
    pause = raftcron("job", "pause-all", "--label", "team=billing", "--note", "freeze",
                     "--json", *server, token=token)
    assert pause.returncode == 0, pause.stderr
    assert "cli-multi" in json.loads(pause.stdout)["job_ids"]
    # Refusals: the server's (exit 1, one line) and bad arguments (exit 2, one line).
    busy = raftcron("calendar", "rm", "cli-hol", *server, token=token)
    assert busy.returncode == 1 and "cli-multi" in one_line(busy.stderr)
    bad = raftcron("calendar", "put", "x", "--window", "2026-12-31", *server, token=token)
    assert bad.returncode == 2 and "--window" in one_line(bad.stderr)
    both = raftcron("job", "pause-all", "--tenant", "a", "--queue", "b", "--note", "n",
                    *server, token=token)
    assert both.returncode == 2 and "exactly one" in one_line(both.stderr)
    invalid = raftcron("calendar", "put", "x", "--date", "2026-02-30", *server, token=token)
    assert invalid.returncode == 1 and "exclude.0.date" in one_line(invalid.stderr)
