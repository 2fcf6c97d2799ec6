"""A tenant cannot grow the replicated state without limit (issue 40, part 3), on three
real nodes with real SQLite files and real tokens.

- The same backfill sent again with new Idempotency-Keys creates nothing new: the
  instant decides, on every node's database.
- Jobs, schedules and pending runs have per-tenant quotas: a refusal is 409 or 429 with a
  JSON body naming the quota, its limit, what is used and what was asked for, and leaves
  nothing behind.
- Another tenant's token can neither backfill a tenant's job nor use up its quota.

The jobs are paused: their cron instants are recorded as skipped, so the only pending
runs are the backfills' (no worker runs here).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import serving_cluster

pytestmark = pytest.mark.system

MIN = 60


@pytest.fixture(scope="module")
def cl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with serving_cluster(Path(tmp_path_factory.mktemp("backfill-quotas"))) as c:
        yield c


def call(c: LocalCluster, token: str, method: str, path: str, body: Any = None,
         nid: str = "n1", key: str | None = None) -> httpx.Response:
    headers = c.auth_headers(token)
    if key is not None:
        headers["Idempotency-Key"] = key
    resp = httpx.request(method, c.urls[nid] + path, json=body, timeout=30, headers=headers)
    assert resp.status_code < 500, resp.text
    return resp


def job(job_id: str, tenant: str, **extra: Any) -> dict[str, Any]:
    """A per-minute job, paused: only backfills make pending runs of it."""
    return {"id": job_id, "tenant": tenant, "schedule": {"cron": "* * * * *"},
            "paused": True, "target": {"shell": "true"}, **extra}


def minutes(first: int, n: int) -> dict[str, str]:
    """A backfill body of n instants of a per-minute job, from minute `first` of 2025."""
    def at(k: int) -> str:
        return f"2025-01-{1 + k // 1440:02d}T{k % 1440 // 60:02d}:{k % 60:02d}:00Z"
    return {"start": at(first), "end": at(first + n - 1)}


def rows_on(c: LocalCluster, nid: str, sql: str, *args: Any) -> int:
    with sqlite3.connect(f"file:{c.root / nid / 'state.db'}?mode=ro", uri=True) as db:
        return int(db.execute(sql, args).fetchone()[0])


def on_every_node(c: LocalCluster, sql: str, *args: Any) -> int:
    """The count `sql` gives on every node's own database, once all agree."""
    def agreed() -> tuple[int] | None:
        counts = {rows_on(c, nid, sql, *args) for nid in c.ids}
        return (counts.pop(),) if len(counts) == 1 else None
    found: tuple[int] = wait_until(agreed, 20, message=f"every node agreeing on {sql}")
    return found[0]


BACKFILL_ROWS = "SELECT count(*) FROM occurrences WHERE job_id = ? AND kind = 'backfill'"
PENDING = "SELECT count(*) FROM attempts WHERE tenant = ? AND status = 'pending'"


def test_the_same_backfill_with_new_keys_creates_nothing_new(cl: LocalCluster) -> None:
    token = cl.create_token("tenant:acme", name="acme-bot")
    assert call(cl, token, "POST", "/v1/jobs", job("nightly", "acme")).status_code == 201
    body = minutes(0, 2500)  # three chunks of the API's 1,000
    first = call(cl, token, "POST", "/v1/jobs/nightly/backfill", body, nid="n2", key="k1")
    assert first.status_code == 202, first.text
    assert (first.json()["count"], first.json()["created"]) == (2500, 2500)
    for i, nid in enumerate(["n1", "n2", "n3", "n1"], start=2):
        again = call(cl, token, "POST", "/v1/jobs/nightly/backfill", body, nid=nid,
                     key=f"k{i}")
        assert again.status_code == 202, again.text
        out = again.json()
        assert (out["request_key"], out["created"]) == (f"k{i}", 0), "made its runs again"
        assert out["occurrence_ids"] == first.json()["occurrence_ids"]
        assert out["existing"] == 2500
    # The first key again: its own runs, replayed.
    same = call(cl, token, "POST", "/v1/jobs/nightly/backfill", body, nid="n3", key="k1")
    assert (same.json()["created"], same.json()["existing"]) == (0, 2500)
    assert same.json()["occurrence_ids"] == first.json()["occurrence_ids"]
    # No key (derived from the range): the same again.
    plain = call(cl, token, "POST", "/v1/jobs/nightly/backfill", body)
    assert (plain.json()["created"], plain.json()["existing"]) == (0, 2500)
    # A wider range creates only the instants it adds.
    wider = call(cl, token, "POST", "/v1/jobs/nightly/backfill", minutes(0, 2600), key="k9")
    assert (wider.json()["created"], wider.json()["existing"]) == (100, 2500)
    assert on_every_node(cl, BACKFILL_ROWS, "nightly") == 2600
    assert on_every_node(cl, PENDING, "acme") == 2600


def test_quota_refusals_are_409_or_429_naming_the_quota(cl: LocalCluster) -> None:
    admin, token = cl.admin_token, cl.create_token("tenant:quota", name="quota-bot")
    put = call(cl, admin, "PUT", "/v1/tenants/quota",
               {"max_jobs": 2, "max_schedules": 3, "max_pending_runs": 1000})
    assert put.status_code == 200, put.text
    assert {k: put.json()[k] for k in ("max_jobs", "max_schedules", "max_pending_runs")} == {
        "max_jobs": 2, "max_schedules": 3, "max_pending_runs": 1000}
    assert call(cl, token, "POST", "/v1/jobs", job("q1", "quota")).status_code == 201
    three = [{"cron": f"{m} * * * *", "name": f"at{m}"} for m in (5, 10, 15)]
    spec = {k: v for k, v in job("q2", "quota").items() if k != "schedule"}
    many = call(cl, token, "POST", "/v1/jobs", {**spec, "schedules": three}, nid="n3")
    assert many.status_code == 409, many.text
    assert many.json()["error"] == {
        "code": "quota_exceeded", "field": "schedules", "quota": "max_schedules",
        "limit": 3, "used": 1, "requested": 3,
        "message": "tenant 'quota' has 1 of the 3 schedules its max_schedules quota "
                   "allows: 3 more do not fit"}
    assert call(cl, token, "POST", "/v1/jobs",
                {**spec, "schedules": three[:2]}).status_code == 201
    more = call(cl, token, "POST", "/v1/jobs", job("q3", "quota"), nid="n2")
    assert more.status_code == 409, more.text
    err = more.json()["error"]
    assert (err["code"], err["quota"], err["limit"], err["used"]) == (
        "quota_exceeded", "max_jobs", 2, 2)
    assert "max_jobs" in err["message"]
    batch = call(cl, token, "POST", "/v1/jobs:batchCreate", {"jobs": [job("q4", "quota")]})
    assert batch.status_code == 200 and batch.json()["created"] == 0, batch.text
    refused = batch.json()["results"][0]["error"]
    assert (refused["code"], refused["quota"], refused["limit"]) == ("quota_exceeded",
                                                                     "max_jobs", 2)

    ok = call(cl, token, "POST", "/v1/jobs/q1/backfill", minutes(0, 900), key="a")
    assert ok.status_code == 202 and ok.json()["created"] == 900
    over = call(cl, token, "POST", "/v1/jobs/q1/backfill", minutes(900, 200), key="b",
                nid="n2")
    assert over.status_code == 429, over.text
    assert int(over.headers["Retry-After"]) >= 1
    assert over.json()["error"] == {
        "code": "rate_limited", "field": "tenant", "quota": "max_pending_runs",
        "limit": 1000, "used": 900, "requested": 200,
        "message": "tenant 'quota' has 900 of the 1,000 runs waiting to start its "
                   "max_pending_runs quota allows: 200 more do not fit"}
    assert on_every_node(cl, BACKFILL_ROWS, "q1") == 900
    # A manual trigger needs room too, and what fits still goes in.
    fits = call(cl, token, "POST", "/v1/jobs/q1/backfill", minutes(900, 100), key="c")
    assert fits.status_code == 202 and fits.json()["created"] == 100
    full = call(cl, token, "POST", "/v1/jobs/q1/trigger", {}, key="t1", nid="n3")
    assert full.status_code == 429 and full.json()["error"]["quota"] == "max_pending_runs"
    shown = call(cl, token, "GET", "/v1/tenants/quota").json()
    assert shown["usage"] == {"jobs": 2, "schedules": 3, "pending_runs": 1000}
    assert on_every_node(cl, PENDING, "quota") == 1000


def test_another_tenants_token_cannot_backfill_or_use_up_the_quota(cl: LocalCluster) -> None:
    admin = cl.admin_token
    red, blue = (cl.create_token(f"tenant:{t}", name=f"{t}-bot") for t in ("red", "blue"))
    for tenant in ("red", "blue"):
        assert call(cl, admin, "PUT", f"/v1/tenants/{tenant}",
                    {"max_pending_runs": 500}).status_code == 200
    assert call(cl, red, "POST", "/v1/jobs", job("red-job", "red")).status_code == 201
    assert call(cl, blue, "POST", "/v1/jobs", job("blue-job", "blue")).status_code == 201
    for nid in cl.ids:  # through every node, forwarded or not
        denied = call(cl, blue, "POST", "/v1/jobs/red-job/backfill", minutes(0, 400),
                      nid=nid, key=f"steal-{nid}")
        assert denied.status_code == 403, denied.text
        assert denied.json()["error"]["code"] == "forbidden"
    assert on_every_node(cl, PENDING, "red") == 0
    # Blue fills its own quota ...
    assert call(cl, blue, "POST", "/v1/jobs/blue-job/backfill", minutes(0, 500),
                key="b1").status_code == 202
    over = call(cl, blue, "POST", "/v1/jobs/blue-job/backfill", minutes(500, 1), key="b2")
    assert over.status_code == 429 and over.json()["error"]["used"] == 500
    # ... which is not red's: red's whole quota is still there.
    mine = call(cl, red, "POST", "/v1/jobs/red-job/backfill", minutes(0, 500), key="r1")
    assert mine.status_code == 202 and mine.json()["created"] == 500
    assert call(cl, red, "GET", "/v1/tenants/red").json()["usage"]["pending_runs"] == 500
    assert call(cl, blue, "GET", "/v1/tenants/red").status_code == 404
    assert on_every_node(cl, PENDING, "red") == on_every_node(cl, PENDING, "blue") == 500
