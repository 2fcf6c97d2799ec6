"""A level-1 log applied by this build, at committed level 1, ends in the state the
level-1 build (4aaeeff, frozen under tests/fixtures/level1) reaches from the same log.

During a rolling upgrade both builds apply the same entries, and the upgrade procedure
(README, "Rolling upgrades") and the chaos checker compare their digests: until the
cluster's level is raised, a new build must apply a level-1 log exactly as the old build
did. The log below is a realistic level-1 history, written with this build's commands
(level-1 fields only, checked entry by entry): jobs and tenants, claims with every
level-1 decision, leases (acknowledged and not), heartbeats, successes, failures,
retries, sweeps of lost and timed-out leases, releases, pauses, manual triggers, a
backfill, alerts raised, acknowledged, resolved and raised again, webhook routing and
deliveries, outbox acknowledgements and retries, pruning, edits and deletes. The old
build applies it in a process of its own (`python -S -E`, so that only the frozen copy is
importable), on its own SQLite file; both files are then compared table by table.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from raftcron.core import commands as c
from raftcron.core import delivery, identity, protocol
from raftcron.core.model import parse_job
from raftcron.state.db import open_writer
from raftcron.state.digest import digest
from raftcron.state.machine import StateMachine
from raftcron.testing import commit_protocol_level

LEVEL1 = Path(__file__).resolve().parents[1] / "fixtures" / "level1"
MIN = 60_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOOK = "https://hooks.example.com/raftcron"


def occ(job_id: str, at: int) -> str:
    return identity.scheduled_occurrence_id(job_id, at)


def att(job_id: str, at: int, n: int = 1) -> str:
    return identity.attempt_id(occ(job_id, at), n)


def job_body(job_id: str, **kw: Any) -> dict[str, Any]:
    """A job as a client sends it, with level-1 fields only."""
    return {"id": job_id, "schedule": "* * * * *", "target": {"shell": "true"}, **kw}


@dataclass
class Log:
    """This build's state machine at committed level 1 (a state that never committed a
    level, as every cluster of the old build), recording each entry it applies."""

    conn: sqlite3.Connection
    sm: StateMachine
    entries: list[str] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    epoch: int = 0

    @classmethod
    def open(cls, path: Path) -> Log:
        conn = open_writer(str(path))
        return cls(conn, StateMachine(conn))

    def spec(self, job_id: str, **kw: Any) -> dict[str, Any]:
        """The job as this build's API stores it (the body is kept: the old build's API
        must store the same)."""
        body = job_body(job_id, **kw)
        self.bodies.append(body)
        return parse_job(body).to_spec()

    def rid(self) -> str:
        self.requests += 1
        return f"req-{self.requests}"

    def apply(self, cmd: c.Command) -> dict[str, Any]:
        assert protocol.unmet(cmd, protocol.BASE_LEVEL) is None, f"not a level-1 entry: {cmd}"
        data = c.encode(cmd)
        assert protocol.unmet_entry(data, protocol.BASE_LEVEL) is None, data
        self.entries.append(data.decode())
        result = self.sm.apply_bytes(len(self.entries), data)
        self.results.append(result)
        self.digests.append(digest(self.conn))
        return result

    def begin(self, term: int, now: int) -> None:
        assert self.apply(c.BeginEpoch(term=term, node_id=f"n{term}", now_ms=now))["ok"]
        self.epoch = term

    def claim(self, now: int, *items: list[Any]) -> dict[str, Any]:
        return self.apply(c.Claim(self.epoch, now, [list(i) for i in items]))

    def lease(self, now: int, *ids: str, worker: str = "w1",
              acknowledge: bool = False) -> dict[str, str]:
        """{attempt id: fencing token} of what the lease handed out."""
        r = self.apply(c.Lease(self.epoch, now, worker, list(ids), acknowledge))
        assert r["ok"], r
        return {lease["attempt_id"]: lease["fencing_token"] for lease in r["leases"]}

    def outbox(self, status: str = "pending") -> list[int]:
        return [r[0] for r in self.conn.execute(
            "SELECT id FROM outbox WHERE status = ? ORDER BY id", (status,))]


def level1_history(log: Log) -> None:
    """Apply a level-1 cluster's history to `log` (the results steer the next entries, as a
    leader and its workers would be steered)."""
    t = T0
    log.begin(1, t)
    log.apply(c.SetWebhookKey(log.rid(), t, "cluster", "k" * 43, False))
    log.apply(c.PutTenant(log.rid(), t, "acme", max_jobs=10, max_concurrent_runs=2,
                          max_fires_per_minute=100, queues=["default", "batch"]))
    log.apply(c.CreateJobs(log.rid(), t, [
        log.spec("a", max_attempts=3, retry_backoff_s=30, notify=[HOOK], deadline_s=120),
        log.spec("b", overlap_policy="forbid", heartbeat_timeout_s=10),
        log.spec("c", tenant="acme", queue="batch", max_runtime_s=90, ack_timeout_s=5),
        log.spec("d", overlap_policy="replace", misfire_policy="catch_up", catch_up_max=5),
        log.spec("e", schedule={"cron": "30 2 * * *", "timezone": "Europe/Paris",
                            "jitter_s": 20}),
    ]))
    log.apply(c.PutJob(log.rid(), t, log.spec("h", overlap_policy="buffer_one", target={
        "http": {"url": "https://api.example.com/run", "method": "POST",
                 "headers": {"Authorization": "secret:tok"}, "body": "{}"}}), True))
    log.apply(c.PutJob(log.rid(), t, log.spec("f", misfire_policy="skip", schedule={
        "cron": "H H(0-5) * * 1-5", "timezone": "America/New_York", "dst_gap": "skip",
        "dst_fold": "both", "start_at": "2026-01-01T00:00:00Z",
        "end_at": "2027-01-01T00:00:00+01:00"}, max_runtime_s=600, paused=True), True))
    log.apply(c.PutJob(log.rid(), t, log.spec("g", schedule="@daily", tenant="acme",
                                              queue="batch", max_attempts=1), True))
    log.apply(c.PutJob(log.rid(), t, log.spec("x", tenant="acme", queue="nope"),
                       True))  # refused by the tenant's policy
    log.apply(c.PutJob(log.rid(), t, log.spec("a", max_attempts=2, retry_backoff_s=30,
                                          notify=[HOOK], deadline_s=120), False,
                       expected_version=1))
    log.apply(c.PutJob(log.rid(), t, log.spec("b"), False, expected_version=7))  # conflict

    # Minute 1: every job due; a misfire skip and a paused skip.
    t1 = T0 + MIN
    log.apply(c.PauseJob(log.rid(), t1 - 1000, "h"))
    log.claim(t1, ["a", 2, t1, t1, "fire"], ["b", 1, t1, t1, "fire"],
              ["c", 1, t1, t1 + 3000, "fire"], ["d", 1, t1 - MIN, t1, "misfire"],
              ["h", 1, t1, t1, "paused"], ["nope", 1, t1, t1, "fire"])
    log.claim(t1 + 5, ["d", 1, t1, t1, "fire"], ["a", 2, t1, t1, "fire"])  # a: claimed
    tokens = log.lease(t1 + 10, att("a", t1), att("b", t1), att("d", t1))
    tokens |= log.lease(t1 + 3010, att("c", t1), worker="w2", acknowledge=True)
    log.apply(c.Heartbeat(t1 + 5000, "w1", [[att("a", t1), tokens[att("a", t1)]],
                                            [att("b", t1), tokens[att("b", t1)]],
                                            [att("d", t1), tokens[att("d", t1)] - 1]]))
    log.apply(c.Complete(t1 + 8000, "w1", [
        [att("a", t1), tokens[att("a", t1)], "failed", 1, "boom"],
        [att("d", t1), tokens[att("d", t1)], "succeeded", 0, "done"]]))
    log.apply(c.Complete(t1 + 8001, "w1", [  # the same completion, resent
        [att("d", t1), tokens[att("d", t1)], "succeeded", 0, "done"]]))
    log.apply(c.Heartbeat(t1 + 9000, "w2", [[att("c", t1), tokens[att("c", t1)]]],
                          queues=["batch"]))
    log.apply(c.Release(t1 + 9500, "w2", [[att("c", t1), tokens[att("c", t1)]]]))
    log.apply(c.TriggerManual(log.rid(), t1 + 9600, "b", "by-hand"))
    log.apply(c.TriggerManual(log.rid(), t1 + 9700, "b", "by-hand"))  # the same key
    log.apply(c.TriggerManual(log.rid(), t1 + 9800, "b", "urgent", override_overlap=True))

    # Minute 2: b's lease was lost (no heartbeat), a's retry is due and fails again.
    t2 = T0 + 2 * MIN
    log.claim(t2, ["b", 1, t2, t2, "fire"], ["d", 1, t2, t2, "fire"],
              ["c", 1, t2, t2, "fire"])
    log.apply(c.Sweep(log.epoch, t2 + 1000, [att("b", t1), att("c", t1)]))
    retry = att("a", t1, 2)
    tokens |= log.lease(t2 + 2000, retry, att("b", t1, 2), att("c", t1), att("d", t2),
                        att("c", t2), worker="w3")
    log.apply(c.Complete(t2 + 3000, "w3", [
        [retry, tokens[retry], "failed", 2, "boom again"],
        [att("c", t1), tokens[att("c", t1)], "succeeded", 0, ""]]))
    log.apply(c.RaiseAlert(log.epoch, t2 + 4000, f"deadline:{occ('a', t1)}", "deadline",
                           job_id="a", occurrence_id=occ("a", t1), reason="failed",
                           scheduled_for_ms=t1, message="no success by the deadline"))
    log.apply(c.RaiseAlert(log.epoch, t2 + 4000, "backlog:batch", "backlog",
                           reason="backlog", message="oldest due run waited 90 s"))

    # A failover: a new leader's epoch; the old one's claims are refused.
    log.begin(2, t2 + 20_000)
    log.apply(c.Claim(1, t2 + 21_000, [["b", 1, t2 + MIN, t2 + MIN, "fire"]]))
    t3 = T0 + 3 * MIN
    log.claim(t3, ["a", 2, t3, t3, "fire"], ["d", 1, t3, t3, "fire"],
              ["b", 1, t3, t3, "fire"], ["c", 1, t3, t3, "fire"])
    log.apply(c.Sweep(log.epoch, t3 + 1, [att("d", t2), att("c", t2)]))
    log.apply(c.Backfill(log.rid(), t3 + 10, "a", "bf-1", [T0 - 2 * MIN, T0 - MIN]))
    man = identity.attempt_id(identity.manual_occurrence_id("b", "urgent"), 1)
    tokens |= log.lease(t3 + 100, att("a", t3), man, att("b", t1, 2), att("c", t3),
                        identity.attempt_id(identity.backfill_occurrence_id(
                            "a", T0 - MIN, "bf-1"), 1), worker="w1")
    log.apply(c.Complete(t3 + 200, "w1", [
        [att("a", t3), tokens[att("a", t3)], "succeeded", 0, "ok"],
        [man, tokens[man], "succeeded", 0, ""]]))
    # c's run heartbeats past its max_runtime_s (90 s) and is timed out; b's is lost.
    for beat in (25_000, 50_000, 75_000, 95_000):
        log.apply(c.Heartbeat(t3 + beat, "w1", [[att("c", t3), tokens[att("c", t3)]]]))
    log.apply(c.Sweep(log.epoch, t3 + 96_000, [att("c", t3), att("b", t1, 2)]))
    log.apply(c.Complete(t3 + 97_000, "w1", [  # too late: the lease ended
        [att("c", t3), tokens[att("c", t3)], "failed", -9, "killed"]]))
    log.apply(c.Sweep(log.epoch, t3 + 200_000, [att("d", t3), att("b", t3)]))

    # Alerts: acknowledged, resolved, raised again; a person's action on them.
    aid = f"deadline:{occ('a', t1)}"
    log.apply(c.AlertAction(log.rid(), t3 + 210_000, aid, "ack", "ops@acme", "looking"))
    log.apply(c.AlertAction(log.rid(), t3 + 211_000, aid, "ack", "dev", "x", tenants=["acme"]))
    log.apply(c.ResolveAlert(log.epoch, t3 + 212_000, "backlog:batch", "drained"))
    log.apply(c.ResolveAlert(log.epoch, t3 + 212_001, "backlog:batch", "drained"))
    log.apply(c.ResolveAlert(log.epoch, t3 + 212_002, "never-raised"))
    log.apply(c.RaiseAlert(log.epoch, t3 + 213_000, "backlog:batch", "backlog",
                           occurrence_id=occ("c", t3), reason="backlog"))
    log.apply(c.AlertAction(log.rid(), t3 + 214_000, aid, "resolve", "ops@acme", "fixed"))
    log.apply(c.AlertAction(log.rid(), t3 + 215_000, "backlog:batch", "ack", "ops", "on it"))

    # Webhooks: the leader routes new rows, delivers, fails, gives up, retries by hand.
    t4 = t3 + 300_000
    pending = log.outbox()
    assert len(pending) >= 4, pending
    log.apply(c.AckOutbox(log.epoch, t4, pending[0], True))
    log.apply(c.AckOutbox(log.epoch, t4, pending[1], False, "connection refused"))
    log.apply(c.RouteOutbox(log.epoch, t4 + 1, [
        [pending[1], [[HOOK, "cluster"]]], [pending[2], [[HOOK, "cluster"],
                                                         ["https://b.example", "tenant:acme"]]],
        [pending[3], []]]))
    log.apply(c.AckDeliveries(log.epoch, t4 + 2, give_up_ms=60_000, max_attempts=2, results=[
        [pending[1], HOOK, False, "HTTP 503"], [pending[2], HOOK, True, ""],
        [pending[2], "https://b.example", False, "timeout"]]))
    log.apply(c.AckDeliveries(log.epoch, t4 + 70_000, give_up_ms=60_000, max_attempts=2,
                              results=[[pending[1], HOOK, False, "HTTP 503"],
                                       [pending[2], "https://b.example", False, "timeout"]]))
    log.apply(c.RetryOutbox(log.rid(), t4 + 80_000, pending[1]))
    log.apply(c.AckDeliveries(log.epoch, t4 + 90_000, give_up_ms=60_000, results=[
        [pending[1], HOOK, True, ""], [pending[2], "https://b.example", True, ""]]))

    # Edits, a resume, a tenant change, deletes (with runs pending), and retention.
    t5 = t4 + 100_000
    log.apply(c.ResumeJob(log.rid(), t5, "h"))
    log.apply(c.PauseJob(log.rid(), t5 + 1, "e"))
    log.apply(c.PauseJob(log.rid(), t5 + 2, "e"))
    log.apply(c.PutTenant(log.rid(), t5 + 3, "acme", max_concurrent_runs=1))
    log.apply(c.SetWebhookKey(log.rid(), t5 + 4, "tenant:acme", "t" * 43, True))
    t6 = T0 + 10 * MIN
    log.claim(t6, ["a", 2, t6, t6, "fire"], ["d", 1, t6, t6, "fire"],
              ["h", 1, t6, t6, "fire"], ["e", 1, t6, t6, "paused"])
    tokens |= log.lease(t6 + 10, att("a", t6), worker="w9", acknowledge=True)  # never acked
    log.apply(c.Sweep(log.epoch, t6 + 10_000, [att("a", t6)]))
    # d replaces its running run: told through the heartbeat, it ends cancelled.
    tokens |= log.lease(t6 + 11_000, att("d", t6), worker="w4")
    t7 = t6 + MIN
    log.claim(t7, ["d", 1, t7, t7, "fire"], ["c", 1, t7, t7, "fire"])
    log.apply(c.Heartbeat(t7 + 1000, "w4", [[att("d", t6), tokens[att("d", t6)]]]))
    for resent in (0, 1):
        log.apply(c.Complete(t7 + 2000 + resent, "w4", [
            [att("d", t6), tokens[att("d", t6)], "failed", -15, "terminated"]]))
    # acme runs one at a time now: the backfill of g waits while c runs.
    log.apply(c.Backfill(log.rid(), t7 + 3000, "g", "bf-g", [T0]))
    g_run = identity.attempt_id(identity.backfill_occurrence_id("g", T0, "bf-g"), 1)
    held = log.apply(c.Lease(log.epoch, t7 + 4000, "w2", [att("c", t7), g_run]))
    assert held["held_tenants"] == ["acme"], held
    log.apply(c.DeleteJob(log.rid(), t7 + 20_000, "d", expected_version=3))  # conflict
    log.apply(c.DeleteJob(log.rid(), t7 + 20_001, "d"))
    log.apply(c.DeleteJob(log.rid(), t7 + 20_002, "d"))
    log.apply(c.Prune(log.rid(), t7 + 20_003, before_ms=t3 + 250_000, limit=3))
    log.apply(c.Barrier(log.rid()))


def old_build_specs(bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The specs the level-1 build's API stores for `bodies` (its core.model.parse_job)."""
    code = ("import json, sys, raftcron; from raftcron.core.model import parse_job; "
            "print(json.dumps({'from': raftcron.__file__, "
            "'specs': [parse_job(b).to_spec() for b in json.load(sys.stdin)]}))")
    proc = subprocess.run([sys.executable, "-S", "-E", "-c", code], cwd=LEVEL1,
                          input=json.dumps(bodies), capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert Path(out["from"]).resolve().parent == LEVEL1 / "raftcron", out["from"]
    return out["specs"]


def old_build_applies(entries: list[str], db: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-S", "-E", str(LEVEL1 / "apply_log.py"), str(db)],
        input=json.dumps(entries), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def tables(conn: sqlite3.Connection) -> dict[str, list[str]]:
    return {name: [r[1] for r in conn.execute(f"PRAGMA table_info({name})")]
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")}


def rows(conn: sqlite3.Connection, table: str, columns: list[str]) -> list[tuple]:
    cols = ", ".join(columns)
    return conn.execute(f"SELECT {cols} FROM {table} ORDER BY {cols}").fetchall()


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[Log, dict[str, Any], Path]:
    where = tmp_path_factory.mktemp("parity")
    log = Log.open(where / "new.db")
    level1_history(log)
    old = old_build_applies(log.entries, where / "old.db")
    assert len(old["results"]) == len(old["digests"]) == len(log.entries)
    yield log, old, where / "old.db"
    log.conn.close()


def test_the_history_is_the_one_it_means_to_be(both: tuple[Log, dict, Path]) -> None:
    """The log reaches every path it claims to (so an equal digest means something)."""
    log, _, _ = both
    q = log.conn.execute
    statuses = {r[0] for r in q("SELECT DISTINCT status FROM attempts")}
    assert {"succeeded", "failed", "timed_out", "lost", "pending", "running",
            "cancelled"} <= statuses, statuses
    assert any(r.get("unacknowledged") for r in log.results), "an unacknowledged lease"
    replaced = att("d", T0 + 10 * MIN)  # running when a newer instant replaced it
    assert q("SELECT status, exit_code FROM attempts WHERE id = ?",
             (replaced,)).fetchone() == ("cancelled", -15)
    occ_statuses = {r[0] for r in q("SELECT DISTINCT status FROM occurrences")}
    assert {"succeeded", "failed", "skipped", "pending", "running"} <= occ_statuses, \
        occ_statuses
    assert {r[0] for r in q("SELECT DISTINCT kind FROM occurrences")} >= {
        "scheduled", "manual", "backfill"}
    assert q("SELECT count(*) FROM alerts WHERE acked_by IS NOT NULL").fetchone()[0] >= 1
    assert {r[0] for r in q("SELECT DISTINCT status FROM outbox_deliveries")} >= {
        "delivered"}
    assert q("SELECT count(*) FROM alerts WHERE kind = ?",
             (delivery.DEAD_ALERT_KIND,)).fetchone()[0] == 2  # both receivers gave up
    rejected = [r for r in log.results if not r["ok"]]
    assert len(rejected) >= 4, "conflicts, a policy refusal and a stale epoch are in it"
    assert q("SELECT count(*) FROM jobs WHERE id = 'd'").fetchone()[0] == 0
    assert protocol.BASE_LEVEL == 1


def test_the_same_level1_log_gives_the_old_builds_digest(both: tuple[Log, dict, Path]
                                                         ) -> None:
    log, old, _ = both
    # Entry by entry: the first that diverges names the handler to look at.
    for i, (new, was) in enumerate(zip(log.digests, old["digests"], strict=True)):
        assert new == was, f"digests differ from entry {i + 1} on: {log.entries[i]}"
    assert digest(log.conn) == old["digests"][-1]


def test_every_table_of_the_old_build_holds_the_same_rows(both: tuple[Log, dict, Path]
                                                          ) -> None:
    log, _, old_db = both
    old_conn = sqlite3.connect(old_db)
    try:
        old_tables = tables(old_conn)
        new_tables = tables(log.conn)
        assert set(old_tables) <= set(new_tables)
        for name, columns in old_tables.items():
            assert set(columns) <= set(new_tables[name]), name
            assert rows(log.conn, name, columns) == rows(old_conn, name, columns), name
            added = [col for col in new_tables[name] if col not in columns]
            for col in added:  # a column the old build lacks stays unset
                assert log.conn.execute(
                    f"SELECT count(*) FROM {name} WHERE {col} IS NOT NULL").fetchone()[0] \
                    == 0, f"{name}.{col}"
        derived = {"job_search", "tenant_usage"}
        for name in set(new_tables) - set(old_tables) - derived:  # the old build lacks
            assert log.conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0] == 0, name
        # Except what every node derives from `jobs` (state.job_search, state.tenant_usage):
        # one row of words a job, and each tenant's counts as counting gives them.
        assert log.conn.execute("SELECT count(*) FROM job_search").fetchone() == \
            log.conn.execute("SELECT count(*) FROM jobs").fetchone()
        kept = {t: (n, n + extra) for t, n, extra in log.conn.execute(
            "SELECT tenant, jobs, extra FROM tenant_usage WHERE jobs != 0 OR extra != 0")}
        counted = {t: (n, schedules) for t, n, schedules in log.conn.execute(
            "SELECT tenant, count(*), sum(CASE WHEN json_type(spec, '$.schedules') = 'array' "
            "THEN max(1, json_array_length(spec, '$.schedules')) ELSE 1 END) FROM jobs "
            "GROUP BY tenant")}
        assert kept == counted and counted
    finally:
        old_conn.close()


def test_every_entry_gets_the_old_builds_result(both: tuple[Log, dict, Path]) -> None:
    """Every entry is answered as the old build answered it."""
    log, old, _ = both
    assert len(old["results"]) == len(log.results)
    for i, (new, was) in enumerate(zip(log.results, old["results"], strict=True)):
        new = json.loads(json.dumps(new))
        # A result is read by the proposer's own build only (the node that proposed the
        # entry applies it), so a key this build adds (Lease's held_groups) is no change.
        assert {k: new.get(k) for k in was} == was, (i + 1, log.entries[i])


@pytest.mark.parametrize(("level", "keeps_first"), [(None, True), (2, False)])
def test_an_alert_raised_again_names_the_new_occurrence_only_from_level_2(
        tmp_path: Path, level: int | None, keeps_first: bool) -> None:
    """Below level 2 a resolved alert raised again keeps its first occurrence, as the
    level-1 build does; from level 2 on it names the new one (a `failures:<job>` alert
    raised again for a later streak names that streak's last failure)."""
    conn = open_writer(str(tmp_path / "state.db"))
    if level is not None:
        commit_protocol_level(conn, level)
    sm = StateMachine(conn)
    first, second = occ("j", T0), occ("j", T0 + MIN)
    for index, cmd in enumerate([
            c.BeginEpoch(term=1, node_id="n1", now_ms=T0),
            c.RaiseAlert(1, T0 + 1, "failures:j", "failures", job_id="j",
                         occurrence_id=first, reason="consecutive_failures"),
            c.ResolveAlert(1, T0 + 2, "failures:j", "the job succeeded again"),
            c.RaiseAlert(1, T0 + 3, "failures:j", "failures", job_id="j",
                         occurrence_id=second, reason="consecutive_failures")], start=1):
        assert sm.apply(index, cmd)["ok"]
    row = conn.execute("SELECT occurrence_id, status, raised_ms FROM alerts").fetchall()
    assert row == [(first if keeps_first else second, "open", T0 + 3)]
    conn.close()


def test_both_builds_store_a_level1_job_alike(both: tuple[Log, dict, Path]) -> None:
    """A job given with level-1 fields only is stored with the same spec by either build's
    API (no default moved), so a leader of either build writes the same entries."""
    log, _, _ = both
    assert len(log.bodies) >= 8
    assert old_build_specs(log.bodies) == [parse_job(b).to_spec() for b in log.bodies]
