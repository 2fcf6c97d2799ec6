"""`POST /v1/heartbeats` with `before_start: true`, through the real app, codec and state
machine: the check just before a run leased ahead starts is a barrier and a read, and only
the runs that need a write (a paused job's skip, an unacknowledged lease, one near its
expiry) are committed. Its
answers are the committed heartbeat's; who may ask is unchanged."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftcron.auth import create_token
from raftcron.core import commands as c
from raftcron.core import identity
from raftcron.core.model import parse_job
from tests.integration.inprocess import InProcessNode, InProcessProposer, api_fixture

# Near the real clock: the node stamps the check with it, and a lease within 5 s of its
# expiry by that stamp is committed, not read. The instant is 5-6 minutes ahead of the
# import: a parallel run may reach these tests a minute or more after collecting them, and
# the instant must still be ahead then.
T0 = (int(time.time()) // 60) * 60_000 + 300_000
AT = T0 + 60_000
LEASED = AT - 1_500  # leased 1.5 s ahead of the instant
JOBS = ("invoices", "payroll", "reports")


class RecordingProposer(InProcessProposer):
    """Applies as a one-node cluster would, and keeps every command it committed. `before_
    barrier` are commands committed just ahead of the next barrier: writes a client was
    told succeeded that this node had not applied when the check came in."""

    def __init__(self, machine: Any) -> None:
        super().__init__(machine)
        self.committed: list[c.Command] = []
        self.before_barrier: list[c.Command] = []

    async def propose(self, cmd: c.Command, timeout: float = 8.0) -> dict[str, Any]:
        if isinstance(cmd, c.Barrier):
            for earlier in self.before_barrier:
                await super().propose(earlier)
            self.before_barrier = []
        self.committed.append(cmd)
        return await super().propose(cmd)


class Cluster:
    """One in-process node with three runs leased 1.5 s ahead of their instant to `w1`
    (acknowledged unless said otherwise)."""

    def __init__(self, root: Path, acknowledged: tuple[str, ...] = JOBS) -> None:
        self.node = InProcessNode(root)
        self.tokens = self.node.require_tokens(root)
        self.tokens["other-queue"] = create_token(self.node.config.tokens_file or "",
                                                  ["worker:elsewhere"], "other-queue")
        self.apply(c.BeginEpoch(1, "n1", T0))
        for job_id in JOBS:
            spec = parse_job({"id": job_id, "schedule": "* * * * *",
                              "target": {"shell": "true"}}).to_spec()
            assert self.apply(c.PutJob(f"put-{job_id}", T0, spec, True))["ok"]
        assert self.apply(c.Claim(1, AT - 5_000, [[j, 1, AT, AT, "fire"] for j in JOBS]))["ok"]
        leased = self.apply(c.Lease(1, LEASED, "w1", [self.att(j) for j in JOBS], True, 2_000))
        self.tokens_of = {lease["attempt_id"]: lease["fencing_token"]
                          for lease in leased["leases"]}
        assert len(self.tokens_of) == len(JOBS)
        if acknowledged:
            assert self.apply(c.Heartbeat(LEASED + 10, "w1", self.pairs(*acknowledged)))["ok"]
        self.proposer = RecordingProposer(self.node.machine)
        self.node.proposer = self.proposer

    @staticmethod
    def occ(job: str) -> str:
        return identity.scheduled_occurrence_id(job, AT)

    def att(self, job: str) -> str:
        return identity.attempt_id(self.occ(job), 1)

    def pairs(self, *jobs: str) -> list[list[Any]]:
        return [[self.att(j), self.tokens_of[self.att(j)]] for j in jobs]

    def apply(self, cmd: c.Command) -> dict[str, Any]:
        return self.node.machine.apply(self.node.machine.last_applied + 1, cmd)

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def row(self, job: str) -> dict[str, Any]:
        cur = self.node.writer.execute(
            "SELECT a.status, a.heartbeat_ms, a.lease_expires_ms, a.acked_ms, o.status "
            "FROM attempts a JOIN occurrences o ON o.id = a.occurrence_id WHERE a.id = ?",
            (self.att(job),))
        status, hb, expires, acked, occ = cur.fetchone()
        return {"status": status, "heartbeat_ms": hb, "lease_expires_ms": expires,
                "acked_ms": acked, "occurrence": occ}

    def heartbeats_committed(self) -> list[c.Heartbeat]:
        return [cmd for cmd in self.proposer.committed if isinstance(cmd, c.Heartbeat)]


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


api = api_fixture("cluster")


async def check(api: httpx.AsyncClient, cluster: Cluster, pairs: list[list[Any]],
                who: str = "runner", worker_id: str = "w1") -> httpx.Response:
    return await api.post("/v1/heartbeats", headers=cluster.auth(who), json={
        "worker_id": worker_id, "before_start": True,
        "attempts": [{"attempt_id": a, "fencing_token": t} for a, t in pairs]})


async def test_live_leases_are_answered_from_a_barrier_and_a_read_with_nothing_written(
        api, cluster):
    before = {j: cluster.row(j) for j in JOBS}
    resp = await check(api, cluster, cluster.pairs(*JOBS))
    assert resp.status_code == 200, resp.text
    assert [(r["attempt_id"], r["ok"], r["cancel"]) for r in resp.json()["results"]] == [
        (cluster.att(j), True, False) for j in JOBS]
    assert [type(cmd) for cmd in cluster.proposer.committed] == [c.Barrier]
    assert {j: cluster.row(j) for j in JOBS} == before


async def test_the_read_comes_after_the_barrier_so_an_acknowledged_pause_is_seen(
        api, cluster):
    # The pause was committed (its client told so) ahead of the barrier, and this node had
    # not applied it when the check arrived: a read before the barrier would miss it.
    cluster.proposer.before_barrier.append(c.PauseJob("pause-payroll", AT - 900, "payroll"))
    resp = await check(api, cluster, cluster.pairs(*JOBS))
    assert resp.status_code == 200, resp.text
    results = {r["attempt_id"]: r for r in resp.json()["results"]}
    assert results[cluster.att("payroll")]["ok"] is False
    assert results[cluster.att("payroll")]["rejected"] == "lease_expired"
    assert "paused" in results[cluster.att("payroll")]["message"]
    assert results[cluster.att("invoices")]["ok"] is True
    assert cluster.row("payroll")["occurrence"] == "skipped"
    assert cluster.row("invoices")["status"] == "running"


async def test_only_the_paused_jobs_run_is_committed_and_it_is_skipped(api, cluster):
    cluster.apply(c.PauseJob("pause-reports", AT - 900, "reports"))
    resp = await check(api, cluster, cluster.pairs(*JOBS))
    assert resp.status_code == 200, resp.text
    assert [r["ok"] for r in resp.json()["results"]] == [True, True, False]
    (hb,) = cluster.heartbeats_committed()
    assert hb.before_start is True and hb.attempts == cluster.pairs("reports")
    assert cluster.row("reports")["occurrence"] == "skipped"
    assert cluster.row("reports")["status"] == "cancelled"


async def test_a_cancelled_run_is_answered_cancel_without_a_commit(api, cluster):
    assert cluster.apply(c.CancelOccurrence("cancel-1", AT - 900, cluster.occ("invoices"),
                                            "ops", "wrong month"))["ok"]
    # Paused as well: a cancel wins, as in the committed heartbeat (no skip is recorded).
    cluster.apply(c.PauseJob("pause-invoices", AT - 800, "invoices"))
    resp = await check(api, cluster, cluster.pairs("invoices"))
    assert resp.json()["results"] == [{"attempt_id": cluster.att("invoices"), "ok": True,
                                       "cancel": True}]
    assert cluster.heartbeats_committed() == []


async def test_an_unacknowledged_lease_is_committed_and_so_acknowledged(tmp_path):
    cluster = Cluster(tmp_path, acknowledged=("invoices",))
    from tests.integration.inprocess import api_client
    async with api_client(cluster.node) as client:
        resp = await check(client, cluster, cluster.pairs(*JOBS))
    assert [r["ok"] for r in resp.json()["results"]] == [True, True, True]
    (hb,) = cluster.heartbeats_committed()
    assert hb.attempts == cluster.pairs("payroll", "reports")
    assert cluster.row("payroll")["acked_ms"] is not None
    cluster.node.close()


async def test_a_stale_token_another_worker_and_an_ended_lease_are_refused_as_before(
        api, cluster):
    stale = [[cluster.att("invoices"), cluster.tokens_of[cluster.att("invoices")] + 1000]]
    assert (await check(api, cluster, stale)).json()["results"][0]["rejected"] == "stale_token"
    other = await check(api, cluster, cluster.pairs("payroll"), worker_id="w2")
    assert other.json()["results"][0]["rejected"] == "foreign_lease"
    assert cluster.apply(c.Release(AT - 700, "w1", cluster.pairs("reports")))["ok"]
    ended = await check(api, cluster, cluster.pairs("reports"))
    assert ended.json()["results"][0]["rejected"] == "stale_token"
    missing = await check(api, cluster, [["a" * 32, 1]])
    assert missing.status_code == 200 and missing.json()["results"][0]["ok"] is False
    assert cluster.heartbeats_committed() == []


@pytest.mark.parametrize("who", ["other-queue", "reader", "acme-bot"])
async def test_a_token_for_another_queue_a_read_or_a_tenant_token_is_forbidden(
        api, cluster, who):
    resp = await check(api, cluster, cluster.pairs(*JOBS), who=who)
    assert resp.status_code == 403, resp.text
    assert resp.json()["error"]["code"] == "forbidden"
    assert cluster.proposer.committed == []


async def test_the_read_answers_are_the_committed_heartbeats_answers(api, cluster):
    """Whatever the state, the read and the commit agree (they share the apply's verdict):
    live, cancelled, released (stale token), timed out, a wrong token, another worker, an
    attempt that does not exist, the same pair twice."""
    assert cluster.apply(c.CancelOccurrence("cancel-1", AT - 900, cluster.occ("invoices"),
                                            "ops", ""))["ok"]
    assert cluster.apply(c.Release(AT - 700, "w1", cluster.pairs("reports")))["ok"]
    cases = [*cluster.pairs(*JOBS), *cluster.pairs("payroll"),
             [cluster.att("payroll"), cluster.tokens_of[cluster.att("payroll")] + 7],
             ["b" * 32, 3]]
    read = (await check(api, cluster, cases)).json()["results"]
    assert cluster.heartbeats_committed() == []
    other = (await check(api, cluster, cluster.pairs("payroll"), worker_id="w2")).json()
    # Timed out: the run must stop, and a run not started yet must not start.
    cluster.node.writer.execute("UPDATE attempts SET status = 'timed_out' WHERE id = ?",
                                (cluster.att("payroll"),))
    timed_out = (await check(api, cluster, cluster.pairs("payroll"))).json()["results"]
    assert timed_out == [{"attempt_id": cluster.att("payroll"), "ok": True, "cancel": True}]
    assert cluster.heartbeats_committed() == []
    cluster.node.writer.execute("UPDATE attempts SET status = 'running' WHERE id = ?",
                                (cluster.att("payroll"),))
    committed = cluster.apply(c.Heartbeat(AT - 100, "w1", cases, None, True))["results"]
    assert read == committed
    assert other["results"] == cluster.apply(
        c.Heartbeat(AT - 100, "w2", cluster.pairs("payroll"), None, True))["results"]
    cluster.node.writer.execute("UPDATE attempts SET status = 'timed_out' WHERE id = ?",
                                (cluster.att("payroll"),))
    assert timed_out == cluster.apply(
        c.Heartbeat(AT - 100, "w1", cluster.pairs("payroll"), None, True))["results"]


async def test_a_lease_near_or_past_its_expiry_is_extended_by_a_commit(api, cluster):
    # Past its expiry and not swept yet: the committed heartbeat revives it, as it always
    # has; a read would let the run start on a lease the next sweep ends.
    now = int(time.time() * 1000)
    for job, expires in (("payroll", now - 1_000), ("reports", now + 2_000)):
        cluster.node.writer.execute(
            "UPDATE attempts SET heartbeat_ms = ?, lease_expires_ms = ? WHERE id = ?",
            (expires - 30_000, expires, cluster.att(job)))
    resp = await check(api, cluster, cluster.pairs(*JOBS))
    assert [r["ok"] for r in resp.json()["results"]] == [True, True, True]
    (hb,) = cluster.heartbeats_committed()
    assert hb.attempts == cluster.pairs("payroll", "reports")
    assert cluster.row("payroll")["lease_expires_ms"] > int(time.time() * 1000) + 5_000


async def test_below_the_level_of_dispatch_ahead_the_check_is_refused(tmp_path):
    from tests.integration.inprocess import api_client
    cluster = Cluster(tmp_path)
    cluster.node.protocol_level = 1
    async with api_client(cluster.node) as client:
        resp = await check(client, cluster, cluster.pairs(*JOBS))
    assert resp.status_code == 409, resp.text
    assert resp.json()["error"]["code"] == "cluster_not_upgraded"
    assert cluster.proposer.committed == []
    cluster.node.close()
