"""Deadline planning and the alert/outbox state on real SQLite; outbox delivery to HTTP
receivers on loopback (no Raft: commands are applied directly)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftcron.core import commands as c
from raftcron.core import delivery, identity
from raftcron.core.calendar import Calendar, parse_calendar
from raftcron.leader.deadlines import Deadlines
from raftcron.leader.outbox import OutboxDelivery, backoff_s, webhook_body, webhook_headers
from raftcron.state.db import ThreadReader, open_reader
from tests.integration.test_machine import MIN, T0, Node
from tests.system.test_operability import Receiver

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


def test_an_unclaimed_instant_a_calendar_excludes_is_not_missed(node: Node) -> None:
    """The ticker did not run (an outage) through three instants; the job's calendar
    excludes the middle one, which was never due: only the other two are missed."""
    at = T0 + MIN
    cal = parse_calendar({"timezone": "UTC", "exclude": [
        {"start": "2026-01-01T00:02:00Z", "end": "2026-01-01T00:02:30Z"}]}, "maint")
    assert node.apply(c.PutCalendar(node.rid(), T0, cal.to_spec()))["ok"]
    node.create("cal", now=T0, deadline_s=10, calendars=["maint"])
    node.create("plain", now=T0, deadline_s=10)
    cmds = plan(node, deadlines(node), at + 2 * MIN + 11 * SEC)
    missed = sorted((x.job_id, x.scheduled_for_ms) for x in cmds  # type: ignore[attr-defined]
                    if x.TYPE == "raise_alert")
    assert missed == [("cal", at), ("cal", at + 2 * MIN),
                      ("plain", at), ("plain", at + MIN), ("plain", at + 2 * MIN)]


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


CLUSTER_KEY = "cluster-webhook-key-for-tests-0123456789abcdef"


def verify(key: str | bytes, request: dict[str, Any]) -> bool:
    key = key.encode() if isinstance(key, str) else key
    expected = "sha256=" + hmac.new(key, request["body"], hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, request["headers"]["x-raftcron-signature"])


@pytest.fixture
def healthy() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def dead() -> Iterator[Receiver]:
    r = Receiver()
    r.status = 503
    yield r
    r.close()


class Rig:
    """A leader's outbox duty over a real state database, POSTing to loopback receivers,
    with a clock the test moves."""

    def __init__(self, node: Node, webhooks: tuple[str, ...], secret: bytes | None = None,
                 **kw: Any) -> None:
        self.node = node
        self.now = T0
        self.out = OutboxDelivery(node.epoch, FakeProposer(node),  # type: ignore[arg-type]
                                  lambda: open_reader(node.path), webhooks, secret,
                                  clock=lambda: self.now, **kw)
        self.reader = ThreadReader(lambda: open_reader(node.path), "test-outbox")
        self.client = httpx.AsyncClient()

    async def round(self) -> bool:
        """One round of the duty, then its deliveries finished and their outcomes
        committed: what the running duty does over one round and the start of the next."""
        busy = await self.out.round(self.reader, self.client)
        await self.out.settle()
        return busy

    async def close(self) -> None:
        await self.client.aclose()
        self.reader.close()


@pytest.fixture
async def rig_factory(node: Node) -> AsyncIterator[Any]:
    rigs: list[Rig] = []

    def make(*args: Any, **kw: Any) -> Rig:
        rigs.append(Rig(node, *args, **kw))
        return rigs[-1]

    node.apply(c.SetWebhookKey("init", T0, "cluster", CLUSTER_KEY))
    yield make
    for r in rigs:
        await r.close()


def raise_alert(node: Node, alert_id: str, now: int = T0, job_id: str | None = None) -> None:
    assert node.apply(c.RaiseAlert(node.epoch, now, alert_id, "deadline", job_id=job_id,
                                   reason="missed"))["raised"]


def alert_ids(receiver: Receiver) -> list[str]:
    return [json.loads(r["body"])["data"]["alert_id"] for r in receiver.hooks()]


async def test_one_dead_receiver_with_150_rows_does_not_hold_back_an_alert(
        node: Node, healthy: Receiver, dead: Receiver) -> None:
    """Before: the leader took the 100 oldest pending rows; rows for a dead notify URL stayed
    pending (in backoff) forever, so a later operator alert was never sent."""
    node.create("j", now=T0, notify=[f"{dead.url}/hook"])
    for i in range(150):
        raise_alert(node, f"job-{i}", job_id="j")
    node.apply(c.SetWebhookKey("init", T0, "cluster", CLUSTER_KEY))
    out = OutboxDelivery(node.epoch, FakeProposer(node),  # type: ignore[arg-type]
                         lambda: open_reader(node.path), (f"{healthy.url}/hook",), None)
    task = asyncio.create_task(out.run())
    try:
        def all_tried() -> bool:
            return len({json.loads(r["body"])["id"] for r in dead.hooks()}) == 150
        await until(all_tried, "every row tried once at the dead receiver", 120)
        raise_alert(node, "operator", now=T0 + 1)
        out.notify()
        await until(lambda: "operator" in alert_ids(healthy), "the operator alert delivered",
                    60)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert node.one("SELECT count(*) FROM outbox_deliveries WHERE receiver = ? AND "
                    "status = 'pending'", f"{dead.url}/hook")[0] == 150


async def test_a_receiver_in_backoff_delays_only_itself_within_one_round(
        node: Node, rig_factory: Any, healthy: Receiver, dead: Receiver) -> None:
    node.create("j", now=T0, notify=[f"{dead.url}/hook"])
    for i in range(150):
        raise_alert(node, f"job-{i}", job_id="j")
    rig = rig_factory((f"{healthy.url}/hook",))
    while await rig.round():  # drain: every row tried once at both receivers
        pass
    assert len(dead.hooks()) == 150 and len(healthy.hooks()) == 150
    # Delivered to the healthy receiver, failing for the dead one: only it is retried.
    assert node.one("SELECT count(*) FROM outbox WHERE status = 'pending'")[0] == 150
    raise_alert(node, "operator", now=T0 + 1)
    await rig.round()
    assert alert_ids(healthy)[150:] == ["operator"], "one round, and nothing sent twice"
    assert len(dead.hooks()) == 150, "the dead receiver is in backoff"
    rig.now += 1_000  # its backoff (1 s) is over: retried, and only there
    await rig.round()
    assert len(dead.hooks()) == 150 + 16 and len(healthy.hooks()) == 151
    retried = dead.hooks()[150]
    first = next(r for r in dead.hooks() if r["headers"]["idempotency-key"]
                 == retried["headers"]["idempotency-key"])
    assert retried["body"] == first["body"], "a retry sends the same bytes"
    doc = json.loads(first["body"])
    assert first["headers"]["idempotency-key"] == f"{doc['id']}-{T0}"


async def test_give_up_makes_the_delivery_dead_raises_an_alert_and_admin_retry_revives(
        node: Node, rig_factory: Any, healthy: Receiver, dead: Receiver) -> None:
    node.create("j", now=T0, notify=[f"{dead.url}/hook?token=s3cret"])
    raise_alert(node, "job-0", job_id="j")
    rig = rig_factory((f"{healthy.url}/hook",), give_up_s=3600)
    await rig.round()
    receiver = f"{dead.url}/hook?token=s3cret"
    assert node.one("SELECT status, attempts FROM outbox_deliveries WHERE receiver = ?",
                    receiver) == ("pending", 1)
    rig.now += 3600 * SEC  # past the bound: the next failure gives up
    await rig.round()
    assert node.one("SELECT status, attempts FROM outbox_deliveries WHERE receiver = ?",
                    receiver) == ("dead", 2)
    assert node.one("SELECT status FROM outbox WHERE id = 1")[0] == "delivered"
    alert_id = "webhook_dead:" + hashlib.sha256(receiver.encode()).hexdigest()[:16]
    assert node.one("SELECT kind, status FROM alerts WHERE id = ?", alert_id) == (
        "webhook", "open")
    await rig.round()  # the alert itself goes to the other (cluster) receivers
    hook = healthy.hooks()[-1]
    doc = json.loads(hook["body"])
    assert doc["data"]["alert_id"] == alert_id and verify(CLUSTER_KEY, hook)
    assert "s3cret" not in hook["body"].decode(), "the receiver's URL is redacted"
    sent_to_dead = len(dead.hooks())
    rig.now += 10 * 3600 * SEC
    await rig.round()
    assert len(dead.hooks()) == sent_to_dead, "a dead delivery is never tried again"

    dead.status = 200
    r = node.apply(c.RetryOutbox("retry-1", rig.now, 1))
    assert r == {"ok": True, "outbox_id": 1, "retried": 1}
    assert node.one("SELECT status, attempts FROM outbox_deliveries WHERE receiver = ?",
                    receiver) == ("pending", 0)
    await rig.round()
    assert len(dead.hooks()) == sent_to_dead + 1
    assert node.one("SELECT status FROM outbox WHERE id = 1")[0] == "delivered"
    assert node.one("SELECT status FROM alerts WHERE id = ?", alert_id)[0] == "resolved"
    again = node.apply(c.RetryOutbox("retry-2", rig.now, 1))
    assert again["rejected"] == "invalid_state", "nothing dead left to retry"
    assert node.apply(c.RetryOutbox("retry-3", rig.now, 99))["rejected"] == "not_found"


async def test_give_up_after_max_attempts(node: Node, rig_factory: Any,
                                          dead: Receiver) -> None:
    raise_alert(node, "a")
    rig = rig_factory((f"{dead.url}/hook",), max_attempts=2)
    await rig.round()
    rig.now += 1_000
    await rig.round()
    assert node.one("SELECT status, attempts FROM outbox_deliveries WHERE outbox_id = 1"
                    ) == ("dead", 2)


async def test_tenant_notify_webhooks_are_signed_with_the_tenant_key(
        node: Node, rig_factory: Any, healthy: Receiver) -> None:
    node.create("j", now=T0, tenant="acme", notify=[f"{healthy.url}/hook/acme"])
    raise_alert(node, "a1", job_id="j")
    rig = rig_factory((f"{healthy.url}/hook/ops",))
    await rig.round()
    by_path = {r["path"]: r for r in healthy.hooks()}
    ops, acme = by_path["/hook/ops"], by_path["/hook/acme"]
    assert ops["body"] == acme["body"]
    assert verify(CLUSTER_KEY, ops) and not verify(CLUSTER_KEY, acme)
    derived = delivery.derive_tenant_key(CLUSTER_KEY, "acme")
    assert verify(derived, acme) and derived != delivery.derive_tenant_key(CLUSTER_KEY, "b")
    rotated = "rotated-acme-key-0123456789-abcdefghijkl"
    assert node.apply(c.SetWebhookKey("rot", T0, "tenant:acme", rotated, replace=True))["ok"]
    raise_alert(node, "a2", job_id="j")
    await rig.round()
    acme2 = [r for r in healthy.hooks() if r["path"] == "/hook/acme"][-1]
    assert verify(rotated, acme2) and not verify(derived, acme2)


async def test_a_secret_file_signs_cluster_receivers_but_not_tenant_ones(
        node: Node, rig_factory: Any, healthy: Receiver) -> None:
    node.create("j", now=T0, tenant="acme", notify=[f"{healthy.url}/hook/acme"])
    raise_alert(node, "a1", job_id="j")
    await rig_factory((f"{healthy.url}/hook/ops",), b"file-key").round()
    by_path = {r["path"]: r for r in healthy.hooks()}
    assert verify(b"file-key", by_path["/hook/ops"])
    assert verify(delivery.derive_tenant_key(CLUSTER_KEY, "acme"), by_path["/hook/acme"])


async def test_nothing_is_sent_before_the_cluster_key_is_committed(
        tmp_path: Path, healthy: Receiver) -> None:
    """Fail closed: no key, no delivery (never unsigned, never the Raft secret)."""
    node = Node(tmp_path / "nokey.db")
    node.begin(1)
    raise_alert(node, "a1")
    rig = Rig(node, (f"{healthy.url}/hook",))
    try:
        await rig.round()
        assert healthy.hooks() == []
        assert node.one("SELECT status, attempts FROM outbox_deliveries") == ("pending", 0)
        node.apply(c.SetWebhookKey("init", T0, "cluster", CLUSTER_KEY))
        await rig.round()
        assert verify(CLUSTER_KEY, healthy.hooks()[0])
    finally:
        await rig.close()


def test_the_first_committed_cluster_key_wins_and_a_rotation_replaces(tmp_path: Path) -> None:
    """Several nodes starting at once each propose a random key: the first committed one
    stays on every node; the results hold no key (they are stored for replays)."""
    nodes = [Node(tmp_path / f"n{i}.db") for i in range(2)]
    first, second = "first-key-" + "a" * 32, "second-key-" + "b" * 32
    for n in nodes:
        r1 = n.apply(c.SetWebhookKey("n1-init", T0, "cluster", first))
        r2 = n.apply(c.SetWebhookKey("n2-init", T0 + 1, "cluster", second))
        assert (r1["stored"], r2["stored"]) == (True, False)
        assert first not in json.dumps(r1) and n.one(
            "SELECT key FROM webhook_keys WHERE owner = 'cluster'")[0] == first
        rot = n.apply(c.SetWebhookKey("rot", T0 + 2, "tenant:acme", second, replace=True))
        assert rot["stored"] and n.apply(c.SetWebhookKey(
            "rot2", T0 + 3, "tenant:acme", first, replace=True))["stored"]
        assert n.one("SELECT key FROM webhook_keys WHERE owner = 'tenant:acme'")[0] == first
        assert n.apply(c.SetWebhookKey("bad", T0, "tenant:a/b", first))["field"] == "owner"
        assert n.apply(c.SetWebhookKey("short", T0, "tenant:a", "k"))["field"] == "key"
    assert nodes[0].digest() == nodes[1].digest()


def test_a_second_route_of_a_row_is_a_no_op(node: Node) -> None:
    raise_alert(node, "a")
    routes = [[1, [["http://a/h", "cluster"]]]]
    assert node.apply(c.RouteOutbox(node.epoch, T0, routes))["routed"] == 1
    assert node.apply(c.RouteOutbox(node.epoch, T0 + 5, [[1, [["http://b/h", "cluster"]]]])
                      )["routed"] == 0
    assert node.q("SELECT receiver, next_ms FROM outbox_deliveries") == [("http://a/h", T0)]
    assert node.apply(c.RouteOutbox(node.epoch - 1, T0, routes))["rejected"] == "stale_epoch"


async def test_rows_pending_before_the_upgrade_are_delivered(
        tmp_path: Path, healthy: Receiver) -> None:
    """A database written before per-receiver delivery: pending rows (with the old
    row-level attempt count) and no delivery tables."""
    path = tmp_path / "old.db"
    old = Node(path)
    old.begin(1)
    raise_alert(old, "a0")
    old.apply(c.AckOutbox(old.epoch, T0, 1, False, "HTTP 500"))  # an old-format entry
    raise_alert(old, "a1")
    old.conn.execute("DROP TABLE outbox_deliveries")
    old.conn.execute("DROP TABLE webhook_keys")
    old.conn.close()
    node = Node(path)  # opening runs the schema: the new tables appear
    node.index, node.epoch = old.index, old.epoch
    assert node.one("SELECT count(*) FROM outbox WHERE status = 'pending'")[0] == 2
    node.apply(c.SetWebhookKey("init", T0, "cluster", CLUSTER_KEY))
    rig = Rig(node, (f"{healthy.url}/hook",))
    try:
        await rig.round()
    finally:
        await rig.close()
    assert sorted(alert_ids(healthy)) == ["a0", "a1"]
    assert node.one("SELECT count(*) FROM outbox WHERE status = 'pending'")[0] == 0


async def until(predicate: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    """Wait for a condition (not a timing assertion: the bound only stops a hung test)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.05)


def test_backoff_doubles_up_to_five_minutes() -> None:
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
    routes = out.fresh(conn)
    conn.close()
    # Cluster-wide receivers are the operator's; the job's loopback URL is refused.
    assert [url for url, _signer in routes[0][1]] == ["http://127.0.0.1:8/ops",
                                                      "https://hooks.example.com/x"]


def test_calendars_are_compiled_once_per_change_and_an_edit_is_honoured(
        node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs every second: an unchanged calendar is not compiled again on each
    pass, but an edited one is, and the very next pass judges by the edit."""
    compiled = []
    real = Calendar.compiled
    monkeypatch.setattr(Calendar, "compiled", lambda self: compiled.append(self.name)
                        or real(self))
    at = T0 + MIN

    def maint(start: str, end: str) -> dict[str, Any]:
        return parse_calendar({"timezone": "UTC", "exclude": [{"start": start, "end": end}]},
                              "maint").to_spec()

    assert node.apply(c.PutCalendar(node.rid(), T0, maint(
        "2026-01-01T00:02:00Z", "2026-01-01T00:02:30Z")))["ok"]
    node.create("cal", now=T0, deadline_s=10, calendars=["maint"])
    dl = deadlines(node)

    def missed(now: int) -> list[int]:
        return [x.scheduled_for_ms for x in plan(node, dl, now)  # type: ignore[attr-defined]
                if x.TYPE == "raise_alert"]

    assert missed(at + 11 * SEC) == [at]
    assert missed(at + MIN + 11 * SEC) == []  # excluded
    assert compiled == ["maint"]  # two passes, one compilation
    assert node.apply(c.PutCalendar(node.rid(), T0, maint(
        "2026-01-01T00:03:00Z", "2026-01-01T00:03:30Z")))["ok"]
    assert missed(at + 2 * MIN + 11 * SEC) == []  # excluded by the edited calendar
    assert missed(at + 3 * MIN + 11 * SEC) == [at + 3 * MIN]
    assert compiled == ["maint", "maint"]
