"""Queue backlog on real SQLite: the gauges /metrics reads, the status endpoint, and the
`backlog` alert duty (commands applied directly, no Raft)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from raftcron.api.metrics import NodeMetrics, StateCollector
from raftcron.core import commands as c
from raftcron.core import identity
from raftcron.leader.backlog import BacklogAlerts, plan
from raftcron.leader.ticker import LostEpoch
from raftcron.state.backlog import QueueBacklog, backlog_queries, combine, queue_backlog
from raftcron.state.db import ThreadReader, open_reader
from tests.integration.inprocess import InProcessNode, api_client
from tests.integration.test_machine import MIN, T0, Node

SEC = 1000
AT = T0 + MIN  # the first instant of the every-minute jobs


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path / "state.db")
    n.begin(1)
    return n


def attempt_of(job_id: str, at: int = AT) -> str:
    return identity.attempt_id(identity.scheduled_occurrence_id(job_id, at), 1)


def backlog_node(node: Node) -> Node:
    """Two due runs on `default` (since AT), none on `idle`, one leased on `busy`."""
    node.create("a", now=T0)
    node.create("b", now=T0)
    node.create("idle", now=T0, queue="idle")
    node.create("busy", now=T0, queue="busy")
    node.fire("a", AT)
    node.fire("b", AT)
    node.fire("busy", AT)
    assert node.lease([attempt_of("busy")], AT + SEC)["leases"]
    return node


class Proposer:
    """Applies what the duty proposes to the node, as the committed command would be."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.proposed: list[c.Command] = []

    async def propose_leader(self, cmd: c.Command) -> dict[str, Any]:
        self.proposed.append(cmd)
        return self.node.apply(cmd)


def duty(node: Node, now: list[int], bound_s: float = 60,
         open_reader_fn: Any = None) -> tuple[BacklogAlerts, Proposer]:
    proposer = Proposer(node)
    alerts = BacklogAlerts(node.epoch, proposer,  # type: ignore[arg-type]
                           open_reader_fn or (lambda: open_reader(node.path)), bound_s,
                           clock=lambda: now[0])
    return alerts, proposer


async def check(alerts: BacklogAlerts, node: Node) -> None:
    reader = ThreadReader(alerts.open_reader, "test-backlog")
    try:
        await alerts.check_once(reader)
    finally:
        reader.close()


def test_queue_backlog_counts_due_runs_per_queue(node: Node) -> None:
    backlog_node(node)
    conn = open_reader(node.path)
    try:
        got = {q.queue: (q.depth, q.oldest_age_s(AT + 90 * SEC)) for q in
               queue_backlog(conn, AT + 90 * SEC)}
        before = {q.queue: q.depth for q in queue_backlog(conn, AT - 1)}
    finally:
        conn.close()
    assert got == {"default": (2, 90.0), "idle": (0, 0.0), "busy": (0, 0.0)}
    assert before == {"default": 0, "idle": 0, "busy": 0}  # not due yet


def test_metrics_expose_depth_and_oldest_due_age_per_queue(node: Node) -> None:
    backlog_node(node)

    class Stand:  # the two parts of Node the collector reads from
        metrics = NodeMetrics()

        def open_reader(self) -> sqlite3.Connection:
            return open_reader(node.path)

    registry = CollectorRegistry()
    registry.register(StateCollector(Stand(), {}, None))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    lines = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
             if line.startswith("raftcron_queue_")}
    assert lines['raftcron_queue_depth{queue="default"}'] == 2
    assert lines['raftcron_queue_depth{queue="idle"}'] == 0
    assert lines['raftcron_queue_depth{queue="busy"}'] == 0
    # AT is in 2026-01-01; read at the real clock now, so the wait is long and positive.
    assert lines['raftcron_queue_oldest_due_age_seconds{queue="default"}'] > 3600
    assert lines['raftcron_queue_oldest_due_age_seconds{queue="idle"}'] == 0
    assert 'raftcron_open_alerts{kind="backlog"} 0.0' in text


async def test_status_queues_endpoint(tmp_path: Path) -> None:
    node = InProcessNode(tmp_path)
    try:
        async with api_client(node) as client:
            body = {"id": "j", "schedule": {"cron": "* * * * * *"},
                    "target": {"shell": "true"}, "queue": "q1"}
            assert (await client.post("/v1/jobs", json=body)).status_code in (200, 201)
            got = (await client.get("/v1/status/queues")).json()
    finally:
        node.close()
    assert got == {"queues": [{"queue": "q1", "depth": 0, "oldest_due_age_s": 0.0,
                               "oldest_due": None}]}


async def test_backlog_alert_raised_once_over_the_bound_and_resolved_when_drained(
        node: Node) -> None:
    backlog_node(node)
    now = [AT + 59 * SEC]
    alerts, proposer = duty(node, now)
    await check(alerts, node)
    assert proposer.proposed == []  # 59 s: within the bound
    now[0] = AT + 61 * SEC
    await check(alerts, node)
    assert [(x.TYPE, x.alert_id) for x in proposer.proposed] == [  # type: ignore[attr-defined]
        ("raise_alert", "backlog:default")]
    assert node.q("SELECT id, kind, status FROM alerts") == [
        ("backlog:default", "backlog", "open")]
    now[0] = AT + 70 * SEC
    await check(alerts, node)
    again, again_proposed = duty(node, now)  # a new leader's duty
    await check(again, node)
    assert len(proposer.proposed) == 1 and again_proposed.proposed == []
    # One run leased: the other still waits past the bound, the alert stays open.
    assert node.lease([attempt_of("a")], AT + 71 * SEC)["leases"]
    now[0] = AT + 72 * SEC
    await check(alerts, node)
    assert len(proposer.proposed) == 1
    assert node.lease([attempt_of("b")], AT + 73 * SEC)["leases"]
    now[0] = AT + 74 * SEC
    await check(alerts, node)
    assert [x.TYPE for x in proposer.proposed] == ["raise_alert", "resolve_alert"]
    assert node.q("SELECT status FROM alerts WHERE id = 'backlog:default'") == [("resolved",)]
    events = node.q("SELECT event FROM outbox ORDER BY id")
    assert [e for (e,) in events if e.startswith("alert.")] == ["alert.raised",
                                                                 "alert.resolved"]


async def test_an_untrusted_clock_neither_raises_nor_resolves(node: Node) -> None:
    backlog_node(node)
    now = [AT + 120 * SEC]
    alerts, proposer = duty(node, now)
    alerts.gate = lambda: False
    await check(alerts, node)
    assert proposer.proposed == []
    alerts.gate = lambda: True
    await check(alerts, node)
    assert [x.TYPE for x in proposer.proposed] == ["raise_alert"]
    for job in ("a", "b"):
        assert node.lease([attempt_of(job)], AT + 121 * SEC)["leases"]
    alerts.gate = lambda: False
    now[0] = AT + 122 * SEC
    await check(alerts, node)
    assert [x.TYPE for x in proposer.proposed] == ["raise_alert"]  # still open
    assert node.q("SELECT status FROM alerts") == [("open",)]


async def test_a_failed_read_changes_nothing(node: Node) -> None:
    backlog_node(node)
    now = [AT + 120 * SEC]
    alerts, proposer = duty(node, now)
    await check(alerts, node)
    for job in ("a", "b"):
        assert node.lease([attempt_of(job)], AT + 121 * SEC)["leases"]

    def broken() -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    failing, failing_proposed = duty(node, now, open_reader_fn=broken)
    await check(failing, node)
    assert failing_proposed.proposed == []
    assert node.q("SELECT status FROM alerts") == [("open",)]


async def test_a_deposed_leader_stops_on_a_stale_epoch(node: Node) -> None:
    backlog_node(node)
    alerts, _ = duty(node, [AT + 120 * SEC])
    node.begin(2)  # another leader's epoch committed meanwhile
    with pytest.raises(LostEpoch):
        await check(alerts, node)
    assert node.q("SELECT count(*) FROM alerts") == [(0,)]


def test_resolution_waits_until_the_queue_is_under_half_the_bound() -> None:
    open_ids = {"backlog:q"}
    now = AT + 100 * SEC

    def decide(waited_s: int) -> list[str]:
        return [x.TYPE for x in plan(1, now, 60, [QueueBacklog("q", 1, now - waited_s * SEC)],
                                     open_ids)]

    assert decide(40) == []  # under the bound, but not drained: no flapping
    assert decide(30) == ["resolve_alert"]
    assert [x.TYPE for x in plan(1, now, 60, [], open_ids)] == ["resolve_alert"]  # queue gone
    assert plan(1, now, 60, [QueueBacklog("q", 0, None)], set()) == []


def test_a_tenant_sees_only_its_own_runs_and_queues(node: Node) -> None:
    node.create("mine", now=T0, tenant="a", queue="shared")
    node.create("theirs", now=T0, tenant="b", queue="shared")
    node.create("private", now=T0, tenant="b", queue="b-only")
    for job in ("mine", "theirs", "private"):
        node.fire(job, AT)
    due_sql, queues_sql = backlog_queries("tenant IN (?)")
    conn = open_reader(node.path)
    try:
        seen = combine(conn.execute(due_sql, (AT + SEC, "a")).fetchall(),
                       conn.execute(queues_sql, ("a",)).fetchall())
    finally:
        conn.close()
    assert [(q.queue, q.depth) for q in seen] == [("shared", 1)]  # not b's run, nor b-only
