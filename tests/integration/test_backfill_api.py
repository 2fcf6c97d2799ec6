"""POST /v1/jobs/{id}/backfill through the real app, codec and state machine, with real
tokens: a quota refusal leaves nothing committed, and an error after some chunks were
committed says exactly what was (issue 40, part 6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from raftcron.core import commands as c
from raftcron.core.model import parse_job
from raftcron.core.timefmt import ms_to_iso
from tests.integration.inprocess import InProcessNode, api_client

T0 = 1_767_225_600_000
MIN = 60_000
START = T0 - 30 * 86_400_000  # a month before T0: every instant is in the past


def iso(ms: int) -> str:
    return ms_to_iso(ms) or ""


def span(first: int, n: int) -> dict[str, str]:
    """The body of a backfill of n instants of a per-minute job from instant `first`."""
    return {"start": iso(START + first * MIN), "end": iso(START + (first + n - 1) * MIN)}


class Env:
    def __init__(self, root: Path) -> None:
        self.node = InProcessNode(root)
        self.tokens = self.node.require_tokens(root)
        self.apply(c.BeginEpoch(1, "n1", T0))
        self.proposed: list[c.Command] = []
        # Something another client commits right after a given backfill chunk is applied.
        self.after_chunk: dict[int, c.Command] = {}
        inner = self.node.proposer.propose

        async def propose(cmd: c.Command, timeout: float = 8.0) -> dict[str, Any]:
            result = await inner(cmd, timeout)
            if isinstance(cmd, c.Backfill):
                self.proposed.append(cmd)
                racing = self.after_chunk.get(len(self.proposed))
                if racing is not None:
                    assert self.apply(racing)["ok"]
            return result

        self.node.proposer.propose = propose  # type: ignore[method-assign]

    def apply(self, cmd: c.Command) -> dict[str, Any]:
        return self.node.machine.apply(self.node.machine.last_applied + 1, cmd)

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def job(self, job_id: str, tenant: str) -> None:
        spec = parse_job({"id": job_id, "tenant": tenant, "schedule": "* * * * *",
                          "target": {"shell": "true"}}).to_spec()
        assert self.apply(c.PutJob(f"put-{job_id}", T0, spec, True))["ok"]

    def rows(self, job_id: str, status: str | None = None) -> int:
        sql = "SELECT count(*) FROM occurrences WHERE job_id = ? AND kind = 'backfill'"
        args: tuple[str, ...] = (job_id,)
        if status is not None:
            sql, args = sql + " AND status = ?", (job_id, status)
        return int(self.node.writer.execute(sql, args).fetchone()[0])


@pytest.fixture
async def env(tmp_path: Path) -> Any:
    e = Env(tmp_path)
    e.job("billing", "acme")
    e.job("spare", "acme")
    e.job("theirs", "other")
    async with api_client(e.node) as client:
        e.client = client  # type: ignore[attr-defined]
        yield e
    e.node.close()


async def post(env: Env, who: str, job_id: str, body: dict[str, str], key: str
               ) -> httpx.Response:
    client: httpx.AsyncClient = env.client  # type: ignore[attr-defined]
    return await client.post(f"/v1/jobs/{job_id}/backfill", json=body,
                             headers={**env.auth(who), "Idempotency-Key": key})


async def test_repeated_with_new_keys_it_creates_nothing_and_says_so(env: Env) -> None:
    first = await post(env, "acme-bot", "billing", span(0, 1500), "k1")
    assert first.status_code == 202, first.text
    assert (first.json()["created"], first.json()["existing"]) == (1500, 0)
    for key in ("k2", "k3"):
        again = await post(env, "acme-bot", "billing", span(0, 1500), key)
        assert again.status_code == 202, again.text
        assert (again.json()["created"], again.json()["existing"], again.json()["count"]) == (
            0, 1500, 1500)
        assert again.json()["occurrence_ids"] == first.json()["occurrence_ids"]
    assert env.rows("billing") == 1500


async def test_a_backfill_over_the_pending_quota_is_refused_before_anything_is_sent(
        env: Env) -> None:
    client: httpx.AsyncClient = env.client  # type: ignore[attr-defined]
    put = await client.put("/v1/tenants/acme", json={"max_pending_runs": 1500},
                           headers=env.auth("ops"))
    assert put.status_code == 200, put.text
    assert put.json()["max_pending_runs"] == 1500
    assert put.json()["quotas_in_effect"]["max_jobs"] == 100_000  # its default
    assert (await post(env, "acme-bot", "billing", span(0, 1000), "k1")).status_code == 202
    sent = len(env.proposed)
    # 2,500 instants, 1,000 of them covered: 1,500 new beside 1,000 pending is 2,500.
    over = await post(env, "acme-bot", "billing", span(0, 2500), "k2")
    assert over.status_code == 429, over.text
    assert over.headers["Retry-After"]
    assert over.json()["error"] == {
        "code": "rate_limited", "field": "tenant", "quota": "max_pending_runs",
        "limit": 1500, "used": 1000, "requested": 1500,
        "message": "tenant 'acme' has 1,000 of the 1,500 runs waiting to start its "
                   "max_pending_runs quota allows: 1,500 more do not fit"}
    assert len(env.proposed) == sent  # nothing was proposed, so nothing committed
    assert env.rows("billing") == 1000
    shown = (await client.get("/v1/tenants/acme", headers=env.auth("acme-bot"))).json()
    assert shown["usage"] == {"jobs": 2, "schedules": 2, "pending_runs": 1000}


async def test_a_delete_between_chunks_is_a_404_that_lists_what_was_committed(
        env: Env) -> None:
    env.after_chunk[1] = c.DeleteJob("racing-delete", T0, "billing")
    resp = await post(env, "acme-bot", "billing", span(0, 2500), "k1")
    assert resp.status_code == 404, resp.text
    error = resp.json()["error"]
    assert error["code"] == "not_found"
    committed = error["committed"]
    assert (committed["count"], committed["created"]) == (1000, 1000)
    assert committed["statuses"] == {"cancelled": 1000}  # the delete cancelled them
    assert error["not_committed_from"] == iso(START + 1000 * MIN)
    assert "1,000 of the backfill's 2,500 instants were committed" in error["message"]
    assert env.rows("billing") == env.rows("billing", "cancelled") == 1000
    stored = {row[0] for row in env.node.writer.execute(
        "SELECT id FROM occurrences WHERE job_id = 'billing'")}
    assert set(committed["occurrence_ids"]) == stored


async def test_a_quota_filled_between_chunks_is_a_429_that_lists_what_was_committed(
        env: Env) -> None:
    env.apply(c.PutTenant("quota", T0, "acme", max_pending_runs=2000))
    racing = c.Backfill("racing", T0, "spare", "r",
                        [START + i * MIN for i in range(900)])
    env.after_chunk[1] = racing
    resp = await post(env, "acme-bot", "billing", span(0, 2000), "k1")
    assert resp.status_code == 429, resp.text
    error = resp.json()["error"]
    assert (error["quota"], error["used"], error["requested"]) == ("max_pending_runs",
                                                                   1900, 1000)
    assert error["committed"]["statuses"] == {"pending": 1000}
    assert env.rows("billing") == 1000


async def test_another_tenants_token_can_neither_backfill_nor_use_the_quota(
        env: Env) -> None:
    env.apply(c.PutTenant("q1", T0, "acme", max_pending_runs=100))
    env.apply(c.PutTenant("q2", T0, "other", max_pending_runs=100))
    denied = await post(env, "other-bot", "billing", span(0, 50), "k1")
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
    assert env.rows("billing") == 0
    # Its own backfills count against its own quota only.
    assert (await post(env, "other-bot", "theirs", span(0, 100), "k1")).status_code == 202
    full = await post(env, "other-bot", "theirs", span(100, 1), "k2")
    assert full.status_code == 429 and full.json()["error"]["used"] == 100
    mine = await post(env, "acme-bot", "billing", span(0, 100), "k1")
    assert mine.status_code == 202 and mine.json()["created"] == 100
