"""GET /v1/jobs/{id}/history through the real app, codec and state machine, with real
bearer tokens: admin, two tenants, a read token and a worker token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.inprocess import InProcessNode, api_fixture

JOB = {"id": "invoices", "tenant": "acme",
       "schedule": {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
       "target": {"http": {"url": "https://billing.example/run",
                           "headers": {"Authorization": "Bearer s3cret"}}},
       "queue": "billing"}


class Env:
    def __init__(self, root: Path) -> None:
        self.node = InProcessNode(root)
        self.tokens = self.node.require_tokens(root)

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


api = api_fixture("env")


async def edit(api: httpx.AsyncClient, env: Env, who: str, version: int,
               **fields: Any) -> None:
    body = {**JOB, **fields}
    r = await api.put("/v1/jobs/invoices", json=body, headers={
        **env.auth(who), "If-Match": f'"{version}"'})
    assert r.status_code == 200, r.text


async def history(api: httpx.AsyncClient, env: Env, who: str, any_id: bool = False,
                  **params: Any) -> httpx.Response:
    """GET /v1/jobs/invoices/history, or with `any_id` /v1/job-history/invoices (which
    answers for a deleted job too)."""
    path = "/v1/job-history/invoices" if any_id else "/v1/jobs/invoices/history"
    return await api.get(path, params=params, headers=env.auth(who))


async def make_history(api: httpx.AsyncClient, env: Env) -> None:
    r = await api.post("/v1/jobs", json=JOB, headers=env.auth("acme-bot"))
    assert r.status_code == 201, r.text
    await edit(api, env, "ops", 1, schedule={"cron": "0 10 * * 1-5",
                                             "timezone": "Europe/London"},
               overlap_policy="forbid")
    assert (await api.post("/v1/jobs/invoices/pause",
                           headers=env.auth("acme-bot"))).status_code == 200
    r = await api.post("/v1/jobs:resume", json={"tenant": "acme", "note": "after the freeze"},
                       headers=env.auth("ops"))
    assert r.status_code == 200 and r.json()["changed"] == 1, r.text


def assert_invalid(r: httpx.Response, field: str) -> None:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid" and error["field"] == field and error["message"], error


async def test_history_says_who_changed_what_and_when(api: httpx.AsyncClient, env: Env) -> None:
    await make_history(api, env)
    r = await history(api, env, "acme-bot")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["job_id"] == "invoices" and body["exists"] is True
    versions = body["versions"]
    # `by` is the token's identity: its name and key id (never the token).
    assert all(v["by"].startswith(("ops#", "acme-bot#")) for v in versions), versions
    assert [(v["seq"], v["version"], v["kind"], v["by"].split("#")[0]) for v in versions] == [
        (4, 2, "bulk_resume", "ops"), (3, 2, "pause", "acme-bot"), (2, 2, "edit", "ops"),
        (1, 1, "create", "acme-bot")]
    assert versions[0]["note"] == "after the freeze"
    assert all(v["at"].endswith("Z") for v in versions)
    edit_entry = versions[2]
    assert edit_entry["changes"] == [
        {"field": "overlap_policy", "before": "allow", "after": "forbid"},
        {"field": "schedule.cron", "before": "0 9 * * 1-5", "after": "0 10 * * 1-5"},
        {"field": "schedule.timezone", "before": "Europe/Berlin", "after": "Europe/London"},
    ]
    assert edit_entry["job"]["schedule"]["cron"] == "0 10 * * 1-5"
    assert versions[1]["changes"] == [{"field": "paused", "before": False, "after": True}]
    assert versions[0]["changes"] == [{"field": "paused", "before": True, "after": False}]
    assert versions[3]["changes"] is None  # a create has nothing before it


async def test_secrets_in_the_history_are_shown_to_admin_only(
        api: httpx.AsyncClient, env: Env) -> None:
    r = await api.post("/v1/jobs", json=JOB, headers=env.auth("ops"))
    assert r.status_code == 201, r.text
    rotated = {"http": {**JOB["target"]["http"], "headers": {"Authorization": "Bearer n3w"}}}
    await edit(api, env, "ops", 1, target=rotated)
    for who in ("acme-bot", "reader"):
        shown = (await history(api, env, who)).json()["versions"]
        assert "s3cret" not in str(shown) and "n3w" not in str(shown)
        # The changed secret is named, its values never shown.
        assert shown[0]["changes"] == [{"field": "target.http.headers.Authorization",
                                        "before": "***", "after": "***"}]
    admin = (await history(api, env, "ops")).json()["versions"]
    assert admin[0]["changes"][0]["after"] == "Bearer n3w"


async def test_another_tenant_gets_404_and_a_read_token_reads_it(
        api: httpx.AsyncClient, env: Env) -> None:
    await make_history(api, env)
    r = await history(api, env, "other-bot")
    assert r.status_code == 404, r.text
    assert r.json()["error"]["field"] == "id"
    # The same answer as for a job that does not exist at all.
    missing = await api.get("/v1/jobs/no-such-job/history", headers=env.auth("other-bot"))
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert (await history(api, env, "other-bot", before=3)).status_code == 404
    assert (await history(api, env, "other-bot", any_id=True)).status_code == 404
    for any_id in (False, True):
        read = await history(api, env, "reader", any_id)
        assert read.status_code == 200 and len(read.json()["versions"]) == 4
        # A worker token may not read jobs at all.
        assert (await history(api, env, "runner", any_id)).status_code == 403


async def test_a_deleted_jobs_history_stays_readable_by_its_tenant_only(
        api: httpx.AsyncClient, env: Env) -> None:
    await make_history(api, env)
    assert (await history(api, env, "acme-bot", any_id=True)).json() == (
        await history(api, env, "acme-bot")).json()
    r = await api.delete("/v1/jobs/invoices", headers=env.auth("acme-bot"))
    assert r.status_code == 200, r.text
    # Everything under /v1/jobs/invoices is gone with the job ...
    assert (await api.get("/v1/jobs/invoices", headers=env.auth("acme-bot"))).status_code == 404
    assert (await history(api, env, "acme-bot")).status_code == 404
    # ... and /v1/job-history/invoices says who deleted it and what it was.
    body = (await history(api, env, "acme-bot", any_id=True)).json()
    assert body["exists"] is False
    last = body["versions"][0]
    assert (last["kind"], last["by"].split("#")[0], last["changes"]) == (
        "delete", "acme-bot", [])
    assert last["job"]["schedule"]["cron"] == "0 10 * * 1-5"
    assert (await history(api, env, "other-bot", any_id=True)).status_code == 404
    assert (await history(api, env, "other-bot", any_id=True, before=3)).status_code == 404
    assert (await history(api, env, "reader", any_id=True)).status_code == 200
    # Another tenant re-creating the id does not see the earlier life's rows, and the
    # first tenant no longer reaches the job.
    again = {**JOB, "tenant": "other"}
    assert (await api.post("/v1/jobs", json=again,
                           headers=env.auth("other-bot"))).status_code == 201
    for any_id in (False, True):
        theirs = (await history(api, env, "other-bot", any_id)).json()["versions"]
        assert [(v["seq"], v["kind"]) for v in theirs] == [(6, "create")]
        assert (await history(api, env, "acme-bot", any_id)).status_code == 404


async def test_pages_go_back_with_before(api: httpx.AsyncClient, env: Env) -> None:
    await make_history(api, env)
    first = (await history(api, env, "ops", limit=3)).json()
    assert [v["seq"] for v in first["versions"]] == [4, 3, 2]
    assert first["next_before"] == 2
    # The page's oldest entry still has its changes (read from the one before it).
    assert first["versions"][-1]["changes"]
    second = (await history(api, env, "ops", limit=3, before=2)).json()
    assert [v["seq"] for v in second["versions"]] == [1]
    assert second["next_before"] is None


@pytest.mark.parametrize(("params", "field"), [
    ({"limit": "0"}, "limit"), ({"limit": "501"}, "limit"), ({"limit": "x"}, "limit"),
    ({"before": "0"}, "before"), ({"before": "-1"}, "before"), ({"before": "a"}, "before"),
    ({"before": str(2**63)}, "before"), ({"consistent": "maybe"}, "consistent"),
])
async def test_bad_parameters_are_400_naming_the_field(
        api: httpx.AsyncClient, env: Env, params: dict[str, str], field: str) -> None:
    await make_history(api, env)
    for any_id in (False, True):
        assert_invalid(await history(api, env, "ops", any_id, **params), field)


async def test_a_bad_job_id_is_400(api: httpx.AsyncClient, env: Env) -> None:
    for path in ("/v1/jobs/bad%20id/history", "/v1/job-history/bad%20id"):
        assert_invalid(await api.get(path, headers=env.auth("ops")), "id")
