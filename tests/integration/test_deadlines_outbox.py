"""Deadline planning and the alert/outbox state on real SQLite (no Raft, no HTTP)."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from raftcron.core import commands as c
from raftcron.core import identity
from raftcron.core.timefmt import parse_iso_ms
from raftcron.leader.deadlines import Deadlines
from raftcron.leader.outbox import OutboxDelivery, backoff_s, webhook_body, webhook_headers
from raftcron.state.db import open_reader
from tests.integration.test_machine import MIN, T0, Node

SEC = 1000


def occ(job_id: str, at: int) -> str:
    return identity.scheduled_occurrence_id(job_id, at)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path / "state.db")
    n.begin(1)
    return n


def plan(node: Node, dl: Deadlines, now: int) -> list[c.Command]:
    conn = open_reader(node.path)
    try:
        commands, cursors = dl._plan(conn, now)
    finally:
        conn.close()
    for cmd in commands:
        assert node.apply(cmd)["ok"]
    dl.cursor.update(cursors)
    return commands


def deadlines(node: Node) -> Deadlines:
    return Deadlines(node.epoch, proposer=None, open_reader=None)  # type: ignore[arg-type]


def test_pending_instant_past_its_deadline_raises_missed_once_then_resolves(node: Node) -> None:
    node.create("j", now=T0, deadline_s=30)
    at = T0 + MIN
    node.fire("j", at)
    dl = deadlines(node)
    assert plan(node, dl, at + 29 * SEC) == []
    cmds = plan(node, dl, at + 31 * SEC)
    assert [(x.TYPE, x.reason) for x in cmds] == [("raise_alert", "missed")]  # type: ignore[attr-defined]
    assert cmds[0].alert_id == f"deadline:{occ('j', at)}"  # type: ignore[attr-defined]
    assert plan(node, dl, at + 40 * SEC) == []
    assert plan(node, deadlines(node), at + 41 * SEC) == [], "a new leader re-raised it"
    lease = node.lease([identity.attempt_id(occ("j", at), 1)], at + 50 * SEC)["leases"][0]
    node.complete(lease["attempt_id"], lease["fencing_token"], at + 55 * SEC)
    cmds = plan(node, dl, at + 56 * SEC)
    assert [x.TYPE for x in cmds] == ["resolve_alert"]
    events = node.q("SELECT event, reason FROM alert_events ORDER BY id")
    assert events == [("raised", "missed"), ("resolved", None)]
    outbox = [json.loads(p) | {"event": e} for e, p in node.q(
        "SELECT event, payload FROM outbox ORDER BY id")]
    assert [o["event"] for o in outbox] == ["alert.raised", "alert.resolved"]
    assert outbox[0]["scheduled_for"] == "2026-01-01T00:01:00Z"


def test_late_success_is_raised_and_resolved(node: Node) -> None:
    node.create("j", now=T0, deadline_s=10)
    at = T0 + MIN
    node.fire("j", at)
    lease = node.lease([identity.attempt_id(occ("j", at), 1)], at + 5 * SEC)["leases"][0]
    node.complete(lease["attempt_id"], lease["fencing_token"], at + 20 * SEC)
    cmds = plan(node, deadlines(node), at + 21 * SEC)
    assert [x.TYPE for x in cmds] == ["raise_alert", "resolve_alert"]
    assert cmds[0].reason == "late"  # type: ignore[attr-defined]
    assert node.one("SELECT status FROM alerts")[0] == "resolved"


def test_running_failed_and_unclaimed_instants(node: Node) -> None:
    node.create("run", now=T0, deadline_s=10)
    node.create("fail", now=T0, deadline_s=10, max_attempts=1)
    node.create("gap", now=T0, deadline_s=10)
    at = T0 + MIN
    node.claim([["run", 1, at, at, "fire"], ["fail", 1, at, at, "fire"]], now=at)
    node.lease([identity.attempt_id(occ("run", at), 1)], at + SEC)
    lease = node.lease([identity.attempt_id(occ("fail", at), 1)], at + SEC)["leases"][0]
    node.complete(lease["attempt_id"], lease["fencing_token"], at + 2 * SEC, "failed", 1)
    cmds = plan(node, deadlines(node), at + 11 * SEC)
    got = {(x.job_id, x.reason) for x in cmds}  # type: ignore[attr-defined]
    assert got == {("run", "running_too_long"), ("fail", "failed"), ("gap", "missed")}
    gap = next(x for x in cmds if x.job_id == "gap")  # type: ignore[attr-defined]
    assert gap.occurrence_id == occ("gap", at)  # type: ignore[attr-defined]


def test_paused_and_overlap_skips_raise_nothing(node: Node) -> None:
    node.create("j", now=T0, deadline_s=10)
    at = T0 + MIN
    node.fire("j", at, decision="paused")
    assert plan(node, deadlines(node), at + 11 * SEC) == []


class FakeProposer:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.sent: list[c.Command] = []

    async def propose_leader(self, cmd: c.Command) -> dict[str, Any]:
        self.sent.append(cmd)
        return self.node.apply(cmd)


class FakeResponse:
    def __init__(self, status: int) -> None:
        self.status_code = status


class FakeClient:
    def __init__(self, status: int) -> None:
        self.status = status
        self.calls: list[tuple[str, bytes, dict[str, str]]] = []

    async def post(self, url: str, content: bytes, headers: dict[str, str],
                   timeout: float) -> FakeResponse:
        self.calls.append((url, content, headers))
        return FakeResponse(self.status)


async def test_outbox_signs_acks_and_backs_off(node: Node) -> None:
    node.create("j", now=T0, notify=["http://job.example/hook"])
    node.apply(c.RaiseAlert(node.epoch, T0, "a1", "deadline", job_id="j", reason="missed"))
    proposer = FakeProposer(node)
    out = OutboxDelivery(node.epoch, proposer, lambda: open_reader(node.path),  # type: ignore[arg-type]
                         ("http://ops.example/hook",), b"k3y")
    conn = open_reader(node.path)
    rows = out._pending(conn)
    assert rows[0].targets == ("http://ops.example/hook", "http://job.example/hook")
    failing = FakeClient(500)
    await out._deliver(failing, rows[0])  # type: ignore[arg-type]
    assert node.one("SELECT status, attempts FROM outbox")[0:2] == ("pending", 1)
    ok = FakeClient(204)
    await out._deliver(ok, out._pending(conn)[0])  # type: ignore[arg-type]
    conn.close()
    assert node.one("SELECT status FROM outbox")[0] == "delivered"
    (url, body, headers), _ = ok.calls
    assert body == failing.calls[0][1], "a retry must send the same bytes"
    doc = json.loads(body)
    created_ms = parse_iso_ms(doc["created_at"], "created_at")
    assert headers["Idempotency-Key"] == f"{doc['id']}-{created_ms}"
    assert headers["X-Raftcron-Signature"] == "sha256=" + hmac.new(
        b"k3y", body, hashlib.sha256).hexdigest()
    assert [backoff_s(n) for n in (0, 1, 2, 3, 30)] == [0, 1, 2, 4, 300]


def test_webhook_body_is_canonical() -> None:
    body = webhook_body(7, "alert.raised", {"b": 1, "a": "é"}, T0)
    assert body == (b'{"created_at":"2026-01-01T00:00:00Z","data":{"a":"\\u00e9","b":1},'
                    b'"event":"alert.raised","id":7}')
    assert webhook_headers(7, T0, "alert.raised", b"s", body)["Idempotency-Key"] == f"7-{T0}"


def test_outbox_ids_are_never_reused_after_retention_pruned_the_rows(node: Node) -> None:
    """Receivers deduplicate on the key: an id handed out again would drop a new event.
    SQLite's own rowids would restart at 1 once the rows are gone."""
    def raise_and_deliver(alert_id: str, now: int) -> int:
        node.apply(c.RaiseAlert(node.epoch, now, alert_id, "deadline", reason="missed"))
        row_id = node.one("SELECT max(id) FROM outbox")[0]
        node.apply(c.AckOutbox(node.epoch, now, row_id, True))
        return row_id

    first = [raise_and_deliver(f"a{i}", T0 + i) for i in range(3)]
    assert first == [1, 2, 3]
    r = node.apply(c.Prune("prune", T0 + 10 * MIN, before_ms=T0 + 5 * MIN))
    assert r["ok"] and node.one("SELECT count(*) FROM outbox")[0] == 0
    assert raise_and_deliver("a3", T0 + 11 * MIN) == 4


def test_a_database_from_before_the_outbox_counter_continues_after_its_rows(
        node: Node) -> None:
    node.apply(c.RaiseAlert(node.epoch, T0, "a0", "deadline", reason="missed"))
    node.conn.execute("DELETE FROM meta WHERE key = 'outbox_seq'")  # as written before
    node.conn.execute("UPDATE outbox SET id = 41")
    node.apply(c.RaiseAlert(node.epoch, T0 + 1, "a1", "deadline", reason="missed"))
    assert node.one("SELECT max(id) FROM outbox")[0] == 42


def test_a_counter_behind_the_table_does_not_reuse_an_id(node: Node) -> None:
    """Rows a version without the counter inserted (after a rollback) keep their ids: the
    next id follows the largest one, and apply does not hit the primary key."""
    node.apply(c.RaiseAlert(node.epoch, T0, "a0", "deadline", reason="missed"))
    node.conn.execute("UPDATE outbox SET id = 9")  # the counter still says 1
    r = node.apply(c.RaiseAlert(node.epoch, T0 + 1, "a1", "deadline", reason="missed"))
    assert r["ok"]
    assert [row[0] for row in node.q("SELECT id FROM outbox ORDER BY id")] == [9, 10]


async def test_notify_urls_outside_the_tenants_current_policy_are_not_posted(
        node: Node) -> None:
    node.create("j", now=T0, notify=["http://127.0.0.1:9/hook", "https://hooks.example.com/x"])
    node.apply(c.PutTenant("pol", T0, "default", queues=["default"]))  # set after the job
    node.apply(c.RaiseAlert(node.epoch, T0, "a1", "deadline", job_id="j", reason="missed"))
    out = OutboxDelivery(node.epoch, FakeProposer(node), lambda: open_reader(node.path),  # type: ignore[arg-type]
                         ("http://127.0.0.1:8/ops",), b"k3y")
    conn = open_reader(node.path)
    rows = out._pending(conn)
    conn.close()
    # Cluster-wide receivers are the operator's; the job's loopback URL is refused.
    assert rows[0].targets == ("http://127.0.0.1:8/ops", "https://hooks.example.com/x")
