"""Tenant policy in the state machine: decided at apply from committed state, on create,
edit and lease; old log entries and old databases keep their meaning."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from raftcron.core import commands as c
from raftcron.state.db import open_writer, schema_sql
from raftcron.state.digest import digest
from tests.integration.test_tenants import T0, Node

OLD_TENANTS_TABLE = """
CREATE TABLE tenants (
    name                 TEXT PRIMARY KEY,
    max_jobs             INTEGER,
    max_concurrent_runs  INTEGER,
    max_fires_per_minute INTEGER,
    updated_ms           INTEGER NOT NULL
) WITHOUT ROWID;
"""


def test_create_outside_the_policy_is_refused_naming_the_field(tmp_path: Path) -> None:
    n = Node(tmp_path / "a.db")
    n.apply(c.PutTenant("t1", T0, "acme", queues=["qa"], targets=["shell", "http"]))
    r = n.job("a", queue="billing-prod")
    assert (r["ok"], r["rejected"], r["field"]) == (False, "policy_denied", "queue")
    r = n.job("b", queue="qa", target={"http": {"url": "http://169.254.169.254/"}})
    assert (r["rejected"], r["field"]) == ("policy_denied", "target.http.url")
    r = n.job("c", queue="qa", notify=["http://127.0.0.1:9/"])
    assert (r["rejected"], r["field"]) == ("policy_denied", "notify[0]")
    assert n.job("d", queue="qa")["ok"]
    assert n.job("e", tenant="other", queue="billing-prod")["ok"]  # other tenants as before
    assert n.m.conn.execute("SELECT group_concat(id) FROM jobs").fetchone()[0] == "d,e"


def test_edit_and_batch_create_are_checked(tmp_path: Path) -> None:
    n = Node(tmp_path / "a.db")
    n.job("a")
    n.apply(c.PutTenant("t1", T0, "acme", targets=["http"]))
    spec = n.m.conn.execute("SELECT spec FROM jobs WHERE id = 'a'").fetchone()[0]

    edit = json.loads(spec)
    r = n.apply(c.PutJob("edit-a", T0, edit, False))
    assert (r["rejected"], r["field"]) == ("policy_denied", "target")
    batch = [dict(edit, id="x"), dict(edit, id="y", target={
        "http": {"url": "https://api.example.com/", "method": "POST", "headers": {},
                 "body": None}})]
    out = n.apply(c.CreateJobs("batch", T0, batch))
    assert [x.get("rejected") for x in out["results"]] == ["policy_denied", None]


def test_a_policy_set_later_fails_pending_runs_at_lease_instead_of_running_them(
        tmp_path: Path) -> None:
    n = Node(tmp_path / "a.db")
    n.job("a", queue="billing-prod")
    n.job("b", tenant="other", queue="billing-prod")
    at = T0 + 1000
    n.apply(c.Claim(1, T0, [["a", 1, at, at, "fire"], ["b", 1, at, at, "fire"]]))
    n.apply(c.PutTenant("t1", T0, "acme", queues=["qa"]))
    ids = [r[0] for r in n.m.conn.execute("SELECT id FROM attempts ORDER BY id")]
    leased = n.apply(c.Lease(1, at + 10, "w1", ids))["leases"]
    assert [x["job_id"] for x in leased] == ["b"]
    assert leased[0]["http_rule"] is None  # "other" has no policy
    occ = n.m.conn.execute("SELECT status, reason FROM occurrences WHERE job_id = 'a'"
                           ).fetchone()
    assert occ == ("failed", "policy")
    err = n.m.conn.execute("SELECT status, error FROM attempts WHERE job_id = 'a'").fetchone()
    assert err[0] == "failed" and "queue" in err[1]
    events = [r[0] for r in n.m.conn.execute("SELECT event FROM outbox")]
    assert events == ["occurrence.failed"]


def test_lease_carries_the_http_rule_of_a_tenant_with_a_policy(tmp_path: Path) -> None:
    n = Node(tmp_path / "a.db")
    n.apply(c.PutTenant("t1", T0, "acme", http_hosts=["api.example.com"]))
    n.job("a", target={"http": {"url": "https://api.example.com/x"}})
    at = T0 + 1000
    n.apply(c.Claim(1, T0, [["a", 1, at, at, "fire"]]))
    ids = [r[0] for r in n.m.conn.execute("SELECT id FROM attempts")]
    lease = n.apply(c.Lease(1, at + 10, "w1", ids))["leases"][0]
    assert lease["http_rule"] == {"http_hosts": ["api.example.com"]}


def test_an_old_put_tenant_entry_decodes_to_no_policy(tmp_path: Path) -> None:
    old = b'{"v":1,"t":"put_tenant","a":{"request_id":"r","now_ms":1,"name":"acme",' \
          b'"max_jobs":5,"max_concurrent_runs":null,"max_fires_per_minute":null}}'
    cmd = c.decode(old)
    assert isinstance(cmd, c.PutTenant)
    assert (cmd.max_jobs, cmd.queues, cmd.targets, cmd.http_hosts) == (5, None, None, None)
    n = Node(tmp_path / "a.db")
    n.apply(cmd)
    assert n.job("a", queue="anything", target={"http": {"url": "http://127.0.0.1/"}})["ok"]


def test_a_database_from_before_policies_is_migrated_and_behaves_as_before(
        tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(OLD_TENANTS_TABLE)
    conn.execute("INSERT INTO tenants VALUES ('acme', 1, NULL, NULL, 5)")
    conn.commit()
    conn.close()
    writer = open_writer(str(path))
    cols = [r[1] for r in writer.execute("PRAGMA table_info(tenants)")]
    assert cols[5:8] == ["queues", "targets", "http_hosts"]
    assert writer.execute("SELECT queues, targets, http_hosts FROM tenants").fetchone() == (
        None, None, None)
    writer.close()
    fresh = open_writer(str(tmp_path / "fresh.db"))
    assert [r[1] for r in fresh.execute("PRAGMA table_info(tenants)")] == cols
    # Reopening is a no-op; the migrated database digests like a fresh one.
    again = open_writer(str(path))
    fresh.execute("INSERT INTO tenants (name, max_jobs, updated_ms) VALUES ('acme', 1, 5)")
    assert digest(again) == digest(fresh)
    # ... and like a node of the previous version (no policy columns: a rolling upgrade
    # waits for equal digests), until a policy is set.
    previous = sqlite3.connect(tmp_path / "previous-version.db", isolation_level=None)
    previous.executescript(schema_sql())
    for column in ("queues", "targets", "http_hosts", "max_schedules", "max_pending_runs"):
        previous.execute(f"ALTER TABLE tenants DROP COLUMN {column}")
    previous.execute("INSERT INTO tenants VALUES ('acme', 1, NULL, NULL, 5)")
    assert digest(previous) == digest(again)
    again.execute("UPDATE tenants SET queues = '[\"qa\"]'")
    assert digest(previous) != digest(again)


def test_a_put_tenant_without_policy_encodes_as_the_previous_version_did() -> None:
    quotas = c.PutTenant("r", 1, "acme", max_jobs=5)
    assert c.encode(quotas) == (
        b'{"v":1,"t":"put_tenant","a":{"request_id":"r","now_ms":1,"name":"acme",'
        b'"max_jobs":5,"max_concurrent_runs":null,"max_fires_per_minute":null}}')
    with_policy = c.PutTenant("r", 1, "acme", queues=["qa"], http_hosts=[])
    assert c.decode(c.encode(with_policy)) == with_policy
