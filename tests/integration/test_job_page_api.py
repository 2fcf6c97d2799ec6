"""GET /v1/status/jobs/{id} and GET /v1/status/fire-lag through the real app, codec and
state machine, with real bearer tokens of two tenants."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftcron.api import status
from raftcron.core import commands as c
from raftcron.core import identity
from raftcron.core.model import parse_job
from tests.integration.inprocess import InProcessNode, api_fixture


class Node:
    """One in-process node with a job of each of two tenants, and tokens."""

    def __init__(self, root: Path) -> None:
        self.node = InProcessNode(root)
        self.tokens = self.node.require_tokens(root)
        self.now = int(time.time() * 1000)
        self.apply(c.BeginEpoch(1, "n1", self.now - 3_600_000))
        for job_id, tenant, schedule in (
                ("invoices", "acme", {"cron": "30 2 * * *", "timezone": "Europe/Berlin"}),
                ("payroll", "other", {"cron": "* * * * * *"})):
            spec = parse_job({"id": job_id, "tenant": tenant, "schedule": schedule,
                              "target": {"shell": "true"}}).to_spec()
            assert self.apply(c.PutJob(f"put-{job_id}", self.now - 3_600_000, spec,
                                        True))["ok"]

    def apply(self, cmd: c.Command) -> dict[str, Any]:
        return self.node.machine.apply(self.node.machine.last_applied + 1, cmd)

    def rid(self) -> str:
        """A request id of its own for each command."""
        return f"req-{self.node.machine.last_applied + 1}"

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def fire_and_lease(self, job_id: str, dispatch_ms: int, lag_ms: int | None) -> None:
        """Claim the instant `dispatch_ms` of `job_id`; lease it `lag_ms` later (if given)."""
        assert self.apply(c.Claim(1, dispatch_ms, [[job_id, 1, dispatch_ms, dispatch_ms,
                                                    "fire"]]))["ok"]
        if lag_ms is not None:
            occ = identity.scheduled_occurrence_id(job_id, dispatch_ms)
            result = self.apply(c.Lease(1, dispatch_ms + lag_ms, "w1",
                                        [identity.attempt_id(occ, 1)]))
            assert result["ok"], result


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


api = api_fixture("node")


def assert_invalid(response: httpx.Response, field: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["field"] == field and error["message"], error


async def test_next_fire_times_are_marked_where_they_cross_a_dst_transition(
        api: httpx.AsyncClient, node: Node) -> None:
    # Europe/Berlin goes from +01:00 to +02:00 on 2026-03-29 (02:30 does not exist that
    # day: the default gap policy fires when the gap ends, 03:00 local, 01:00 UTC).
    r = await api.get("/v1/status/jobs/invoices", headers=node.auth("acme-bot"),
                      params={"after": "2026-03-26T12:00:00Z", "fires": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"] == "invoices" and body["tenant"] == "acme"
    assert "Europe/Berlin" in body["describe"]
    fires = body["upcoming"]
    assert [f["utc_offset"] for f in fires] == ["+01:00", "+01:00", "+02:00", "+02:00",
                                                "+02:00"]
    assert [f["dst_change"] for f in fires] == [None, None, "+01:00 → +02:00", None, None]
    assert fires[0]["utc"] == "2026-03-27T01:30:00Z"
    assert (fires[2]["utc"], fires[2]["local"]) == ("2026-03-29T01:00:00Z",
                                                    "2026-03-29T03:00:00+02:00")


async def test_the_job_page_is_scoped_to_the_callers_tenants(
        api: httpx.AsyncClient, node: Node) -> None:
    for who in ("ops", "reader", "acme-bot"):
        r = await api.get("/v1/status/jobs/invoices", headers=node.auth(who))
        assert r.status_code == 200, (who, r.text)
    r = await api.get("/v1/status/jobs/invoices", headers=node.auth("other-bot"))
    assert r.status_code == 404 and r.json()["error"]["field"] == "id"
    assert "invoices" not in (await api.get("/v1/status/jobs/nope",
                                            headers=node.auth("other-bot"))).text
    assert (await api.get("/v1/status/jobs/invoices")).status_code == 401
    # A worker token reads no jobs (the middleware refuses before the route).
    assert (await api.get("/v1/status/jobs/invoices",
                          headers=node.auth("runner"))).status_code == 403


@pytest.mark.parametrize(("params", "field"), [
    ({"fires": "0"}, "fires"), ({"fires": "51"}, "fires"), ({"fires": "x"}, "fires"),
    ({"fires": "-1"}, "fires"), ({"after": "yesterday"}, "after"),
    ({"after": "2026-03-08T07:00:00"}, "after"),
    # the fuzzer's: the last instant ids can spell, and one past it (year 10000 in UTC)
    ({"after": "9999-12-31T23:59:59.999Z"}, "after"),
    ({"after": "9999-12-31T00:00:00-23:59"}, "after"), ({"after": "1969-12-31T23:59:59Z"}, "after"),
])
async def test_bad_job_page_parameters_are_400_naming_the_field(
        api: httpx.AsyncClient, node: Node, params: dict[str, str], field: str) -> None:
    assert_invalid(await api.get("/v1/status/jobs/invoices", headers=node.auth("ops"),
                                 params=params), field)


async def test_a_bad_job_id_is_400(api: httpx.AsyncClient, node: Node) -> None:
    assert_invalid(await api.get("/v1/status/jobs/bad%20id", headers=node.auth("ops")), "id")


async def test_fire_lag_gives_p50_p99_per_minute_from_the_recorded_leases(
        api: httpx.AsyncClient, node: Node) -> None:
    minute = (node.now // 60_000 - 5) * 60_000
    for second, lag in ((0, 100), (1, 200), (2, 300), (3, 5000), (4, None)):
        node.fire_and_lease("payroll", minute + second * 1000, lag)
    node.fire_and_lease("invoices", minute + 10_000, 60_000)

    r = await api.get("/v1/status/fire-lag", headers=node.auth("other-bot"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["minutes"] == 60 and len(body["buckets"]) == 60
    assert body["truncated"] is False
    hit = [b for b in body["buckets"] if b["due"]]
    assert hit == [{"minute": hit[0]["minute"], "due": 5, "leased": 4, "waiting": 1,
                    "p50_ms": 200, "p99_ms": 5000, "max_ms": 5000}]
    assert hit[0]["minute"] == time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                             time.gmtime(minute / 1000))
    assert body["worst"] == hit[0]

    # The other tenant's token sees only its own job's lease, the admin both.
    acme = (await api.get("/v1/status/fire-lag", headers=node.auth("acme-bot"))).json()
    assert [(b["due"], b["p99_ms"]) for b in acme["buckets"] if b["due"]] == [(1, 60_000)]
    every = (await api.get("/v1/status/fire-lag", headers=node.auth("ops"))).json()
    assert [(b["due"], b["p99_ms"]) for b in every["buckets"] if b["due"]] == [(6, 60_000)]


async def test_fire_lag_is_empty_without_leases_and_refuses_bad_minutes(
        api: httpx.AsyncClient, node: Node) -> None:
    body = (await api.get("/v1/status/fire-lag", headers=node.auth("reader"),
                          params={"minutes": 5})).json()
    assert len(body["buckets"]) == 5 and body["worst"] is None
    assert all(b["due"] == 0 and b["p50_ms"] is None for b in body["buckets"])
    for bad in ("0", "181", "1.5", "x", ""):
        assert_invalid(await api.get("/v1/status/fire-lag", headers=node.auth("ops"),
                                     params={"minutes": bad}), "minutes")


async def test_backfill_preview_lists_what_the_backfill_creates_and_writes_nothing(
        api: httpx.AsyncClient, node: Node) -> None:
    params = {"start": "2026-03-27T00:00:00Z", "end": "2026-03-30T00:00:00Z"}
    r = await api.get("/v1/status/jobs/invoices/backfill-preview", headers=node.auth("acme-bot"),
                      params=params)
    assert r.status_code == 200, r.text
    preview = r.json()
    assert preview["count"] == 3 and preview["shown"] == 3
    assert preview["instants"] == ["2026-03-27T01:30:00Z", "2026-03-28T01:30:00Z",
                                   "2026-03-29T01:00:00Z"]
    assert node.node.writer.execute(
        "SELECT count(*) FROM occurrences WHERE kind = 'backfill'").fetchone()[0] == 0
    done = await api.post("/v1/jobs/invoices/backfill", headers=node.auth("acme-bot"),
                          json=params)
    assert done.status_code == 202, done.text
    assert done.json()["count"] == preview["count"]
    # A long range: the count is exact, the list is capped.
    many = (await api.get("/v1/status/jobs/payroll/backfill-preview", headers=node.auth("ops"),
                          params={"start": "2026-01-01T00:00:00Z",
                                  "end": "2026-01-01T00:10:00Z"})).json()
    assert many["count"] == 601 and many["shown"] == 50 and len(many["instants"]) == 50


async def test_backfill_preview_is_scoped_and_refuses_bad_ranges(
        api: httpx.AsyncClient, node: Node) -> None:
    good = {"start": "2026-03-27T00:00:00Z", "end": "2026-03-30T00:00:00Z"}
    path = "/v1/status/jobs/invoices/backfill-preview"
    r = await api.get(path, headers=node.auth("other-bot"), params=good)
    assert r.status_code == 404 and "invoices" in r.json()["error"]["message"]
    for params, field in (({"end": good["end"]}, "start"), ({"start": good["start"]}, "end"),
                          ({**good, "start": "soon"}, "start"),
                          ({**good, "end": "2026-03-26T00:00:00Z"}, "end"),
                          ({"start": "2000-01-01T00:00:00Z", "end": good["end"]}, "end")):
        assert_invalid(await api.get(path, headers=node.auth("ops"), params=params), field)
    # More instants than a backfill may create: refused like the backfill itself.
    assert_invalid(await api.get("/v1/status/jobs/payroll/backfill-preview",
                                 headers=node.auth("ops"),
                                 params={"start": "2026-01-01T00:00:00Z",
                                         "end": "2027-01-01T00:00:00Z"}), "end")


async def test_a_proposed_schedule_previews_its_fire_times_and_changes_nothing(
        api: httpx.AsyncClient, node: Node) -> None:
    params = {"after": "2026-03-26T12:00:00Z", "fires": 3, "cron": "0 10 * * *",
              "timezone": "America/New_York"}
    r = await api.get("/v1/status/jobs/invoices", headers=node.auth("acme-bot"), params=params)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [f["utc"] for f in body["upcoming"]][:1] == ["2026-03-27T01:30:00Z"]
    proposed = body["proposed"]
    assert proposed["schedule"]["cron"] == "0 10 * * *"
    assert proposed["schedule"]["timezone"] == "America/New_York"
    assert "America/New_York" in proposed["describe"]
    assert [f["utc"] for f in proposed["upcoming"]] == [
        "2026-03-26T14:00:00Z", "2026-03-27T14:00:00Z", "2026-03-28T14:00:00Z"]
    stored = (await api.get("/v1/jobs/invoices", headers=node.auth("ops"))).json()
    assert stored["schedule"]["cron"] == "30 2 * * *" and stored["version"] == 1
    assert "proposed" not in (await api.get("/v1/status/jobs/invoices",
                                            headers=node.auth("ops"))).json()


@pytest.mark.parametrize(("params", "field"), [
    ({"cron": "61 * * * *"}, "cron"), ({"cron": ""}, "cron"), ({"cron": "x" * 300}, "cron"),
    ({"timezone": "Mars/Olympus"}, "timezone"), ({"dst_gap": "maybe"}, "dst_gap"),
    ({"dst_fold": "twice"}, "dst_fold"),
])
async def test_a_bad_proposed_schedule_is_400_naming_the_parameter(
        api: httpx.AsyncClient, node: Node, params: dict[str, str], field: str) -> None:
    assert_invalid(await api.get("/v1/status/jobs/invoices", headers=node.auth("ops"),
                                 params=params), field)


async def test_another_tenant_cannot_preview_a_schedule_of_a_job_it_cannot_see(
        api: httpx.AsyncClient, node: Node) -> None:
    r = await api.get("/v1/status/jobs/invoices", headers=node.auth("other-bot"),
                      params={"cron": "0 10 * * *"})
    assert r.status_code == 404


async def test_a_job_starting_at_the_end_of_the_calendar_has_no_fire_time_shown(
        api: httpx.AsyncClient, node: Node) -> None:
    spec = parse_job({"id": "last", "tenant": "acme", "target": {"shell": "true"},
                      "schedule": {"cron": "* * * * *", "timezone": "Pacific/Kiritimati",
                                   "start_at": "9999-12-31T12:00:00Z"}}).to_spec()
    assert node.apply(c.PutJob("put-last", node.now, spec, True))["ok"]
    r = await api.get("/v1/status/jobs/last", headers=node.auth("ops"))
    assert r.status_code == 200, r.text
    assert r.json()["upcoming"] == []
    r = await api.get("/v1/status/jobs/last", headers=node.auth("ops"),
                      params={"after": "9998-12-31T23:59:59Z", "cron": "0 0 1 1 *"})
    assert r.status_code == 200, r.text
    assert r.json()["proposed"]["upcoming"] == []


@pytest.mark.parametrize(("path", "target"), [
    ("/jobs/invoices", "/#/jobs/invoices"),
    ("/jobs/a%2Fb%20c", "/#/jobs/a%2Fb%20c"),  # the id is quoted whole
    ("/jobs//evil.example/x", "/#/jobs/%2Fevil.example%2Fx"),  # never another host
])
async def test_a_job_pages_address_redirects_to_the_page_without_a_token(
        api: httpx.AsyncClient, path: str, target: str) -> None:
    """`/jobs/{id}` is shareable: it sends the browser to the page's own route for the job
    (no token needed, as for the page: the data behind it still asks for one)."""
    resp = await api.get(path, follow_redirects=False)
    assert resp.status_code == 302, resp.text
    assert resp.headers["location"] == target
    assert (await api.post(path)).status_code in (401, 405)
    assert (await api.get("/v1/jobs/invoices")).status_code == 401, "data still needs a token"


def _ids(resp: httpx.Response) -> list[str]:
    assert resp.status_code == 200, resp.text
    return [j["id"] for j in resp.json()["jobs"]]


async def test_the_overview_finds_a_job_beyond_the_first_200_by_q(
        node: Node, api: httpx.AsyncClient) -> None:
    """250 more jobs: the plain list stops at 200 by id; `q` searches the whole fleet in
    id, tenant, queue, schedule and state, and still only within the caller's tenants."""
    for i in range(250):
        spec = parse_job({"id": f"fleet-{i:03d}", "tenant": "acme", "schedule": "0 3 * * *",
                          "queue": "nightly" if i == 249 else "default",
                          "target": {"shell": "true"}}).to_spec()
        assert node.apply(c.PutJob(f"fleet-{i}", node.now, spec, True))["ok"]
    admin = node.auth("ops")
    plain = await api.get("/v1/status/jobs", headers=admin)
    assert plain.json()["truncated"] is True and "fleet-249" not in _ids(plain)
    assert _ids(await api.get("/v1/status/jobs", params={"q": "FLEET-249"},
                              headers=admin)) == ["fleet-249"]
    assert _ids(await api.get("/v1/status/jobs", params={"q": "nightly fleet"},
                              headers=admin)) == ["fleet-249"]
    assert _ids(await api.get("/v1/status/jobs", params={"q": "berlin"},
                              headers=admin)) == ["invoices"]
    found = await api.get("/v1/status/jobs", params={"q": "fleet-24"}, headers=admin)
    assert _ids(found) == [f"fleet-{i}" for i in range(240, 250)]
    assert found.json()["truncated"] is False
    # LIKE's wildcards are plain characters in q.
    assert _ids(await api.get("/v1/status/jobs", params={"q": "fleet_%"},
                              headers=admin)) == []
    # Another tenant's job is not found by name, nor counted.
    acme = node.auth("acme-bot")
    assert _ids(await api.get("/v1/status/jobs", params={"q": "payroll"}, headers=acme)) == []
    assert _ids(await api.get("/v1/status/jobs", params={"q": "payroll"},
                              headers=node.auth("reader"))) == ["payroll"]


async def test_q_never_searches_a_jobs_command_or_environment(
        node: Node, api: httpx.AsyncClient) -> None:
    """A search over the whole definition would tell a read token whether a secret in a
    target contains a word."""
    spec = parse_job({"id": "vault", "tenant": "acme", "schedule": "0 3 * * *",
                      "target": {"shell": "curl -H 'X-Key: hunter2' example.invalid"}}
                     ).to_spec()
    assert node.apply(c.PutJob("vault", node.now, spec, True))["ok"]
    admin = node.auth("ops")
    assert _ids(await api.get("/v1/status/jobs", params={"q": "vault"},
                              headers=admin)) == ["vault"]
    assert _ids(await api.get("/v1/status/jobs", params={"q": "hunter2"},
                              headers=admin)) == []


async def test_a_q_too_long_is_a_400_naming_it(api: httpx.AsyncClient, node: Node) -> None:
    resp = await api.get("/v1/status/jobs", params={"q": "x" * 201}, headers=node.auth("ops"))
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["field"] == "q"


async def test_q_follows_every_change_of_a_job(node: Node, api: httpx.AsyncClient) -> None:
    """The searched words are kept per job (state.job_search): an edit, a pause, a resume
    and a delete are found (or not) by the very next search, and a claim leaves them."""
    admin = node.auth("ops")

    async def found(q: str) -> list[str]:
        return _ids(await api.get("/v1/status/jobs", params={"q": q}, headers=admin))

    def put(create: bool, **fields: Any) -> None:
        spec = parse_job({"id": "mover", "tenant": "acme", "schedule": "0 3 * * *",
                          "target": {"shell": "true"}, **fields}).to_spec()
        assert node.apply(c.PutJob(node.rid(), node.now, spec, create))["ok"]

    put(True, labels={"team": "ledger"})
    assert await found("mover ledger active") == ["mover"]
    put(False, labels={"team": "payments"}, queue="batch")
    assert await found("mover ledger") == []
    assert await found("mover payments batch") == ["mover"]
    node.fire_and_lease("mover", node.now, None)  # a claim moves only the watermark
    assert await found("mover payments batch") == ["mover"]
    assert node.apply(c.PauseJob(node.rid(), node.now, "mover"))["ok"]
    assert await found("mover paused") == ["mover"]
    assert await found("mover active") == []
    assert node.apply(c.ResumeJob(node.rid(), node.now, "mover"))["ok"]
    assert await found("mover active") == ["mover"]
    assert node.apply(c.DeleteJob(node.rid(), node.now, "mover"))["ok"]
    assert await found("mover") == []


async def test_q_with_more_words_than_one_statement_takes_pages_through_all_jobs(
        node: Node, api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past SQL_WORDS words the rest are matched between pages of ids: the answer must be
    what matching every word gives, across page ends and within the caller's tenants."""
    monkeypatch.setattr(status, "SQL_WORDS", 2)
    monkeypatch.setattr(status, "SEARCH_PAGE", 7)
    for i in range(60):
        spec = parse_job({"id": f"many-{i:02d}", "tenant": "acme" if i % 2 else "other",
                          "schedule": f"{i % 60} 3 * * *", "queue": f"q{i % 3}",
                          "labels": {"tier": "gold" if i % 5 == 0 else "tin"},
                          "target": {"shell": "true"}}).to_spec()
        assert node.apply(c.PutJob(node.rid(), node.now, spec, True))["ok"]
    every = [f"many-{i:02d}" for i in range(60)]
    q = "many 3 * q1 tin active utc"
    expected = [j for i, j in enumerate(every) if i % 3 == 1 and i % 5 != 0]
    assert _ids(await api.get("/v1/status/jobs", params={"q": q},
                              headers=node.auth("ops"))) == expected
    acme = [j for j in expected if int(j[-2:]) % 2]
    assert _ids(await api.get("/v1/status/jobs", params={"q": q},
                              headers=node.auth("acme-bot"))) == acme
    monkeypatch.setattr(status, "MAX_JOBS", 3)  # the first 3 of many, and "truncated"
    resp = await api.get("/v1/status/jobs", params={"q": "many tin q1 3 *"},
                         headers=node.auth("ops"))
    assert _ids(resp) == expected[:3] and resp.json()["truncated"] is True


def test_search_words_drop_repeats_and_words_inside_others() -> None:
    class Req:
        query_params = {"q": "Fleet  fleet-24 zz FLEET-2 z e 24 x"}

    assert status.search_words(Req()) == ["fleet-24", "zz", "x"]  # type: ignore[arg-type]
