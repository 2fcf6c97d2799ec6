"""The set path of a Claim (state.bulk_claim) against the item-by-item reference.

Two state machines get the same commands; machine a takes the common claim items in set
statements, machine b decides every item one by one. After every command both must
return the same result and hold the same state (digest). The worlds mix what sends items
to one path or the other: overlap policies, paused jobs, tenants with fire and run
quotas, jobs named twice in one claim, stale versions and instants, unknown jobs,
malformed items, and watermarks behind existing rows (the database's UNIQUE refusal).
"""

from __future__ import annotations

import json
import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftcron.core import commands as c
from raftcron.core.model import parse_job
from raftcron.state.bulk_claim import bulk_claim
from raftcron.state.db import open_writer
from raftcron.state.digest import digest
from raftcron.state.machine import StateMachine

MIN = 60_000
T0 = 1_767_225_600_000
JOBS = [f"j{i}" for i in range(4)]
TENANTS = ["default", "metered", "narrow"]

job_setup = st.tuples(
    st.sampled_from(["allow", "allow", "allow", "forbid", "replace", "buffer_one"]),
    st.sampled_from([False, False, False, True]),  # paused
    st.sampled_from([0, 0, 1, 2]),  # tenant
)
world = st.tuples(
    st.lists(job_setup, min_size=len(JOBS), max_size=len(JOBS)),
    st.sampled_from([None, 1, 2, 4]),  # the metered tenant's max_fires_per_minute
)
# How an item may be malformed (the leader never sends these; apply must still agree).
shapes = st.sampled_from(["ok"] * 24 + ["float_at", "bool_version", "int_job", "ms_at",
                                       "bad_decision", "huge_version", "far_at", "bc_at"])
item = st.tuples(
    st.integers(0, len(JOBS)),  # len(JOBS): a job that does not exist
    st.integers(0, 3),  # minutes after the claim's base instant (one minute per claim)
    st.sampled_from(["fire"] * 5 + ["misfire", "paused"]),
    st.sampled_from([0] * 7 + [1]),  # version off by
    st.integers(0, 3),  # dispatch delay, s
    shapes,
)
# Mostly each job once per claim (the set path's case), sometimes named twice.
claim_once = st.tuples(st.just("claim"), st.lists(item, min_size=1, max_size=len(JOBS) + 1,
                                                  unique_by=lambda it: it[0]))
claim_any = st.tuples(st.just("claim"), st.lists(item, min_size=1, max_size=8))
step = st.one_of(
    claim_once, claim_once, claim_once, claim_once, claim_any,
    st.tuples(st.just("lease"), st.integers(1, 4)),
    st.tuples(st.just("lease"), st.integers(1, 4)),
    st.tuples(st.just("complete"), st.integers(1, 4)),
    st.tuples(st.just("rewind"), st.integers(0, len(JOBS) - 1)),
    st.tuples(st.just("rewind"), st.integers(0, len(JOBS) - 1)),
    st.tuples(st.sampled_from(["pause", "resume", "edit", "recreate"]),
              st.integers(0, len(JOBS) - 1)),
    st.tuples(st.just("quota"), st.sampled_from([None, 0, 1, 3])),
    st.tuples(st.just("reopen"), st.just(0)),
    st.tuples(st.just("advance"), st.sampled_from([1_000, MIN])),
)


def spec(job_id: str, overlap: str, paused: bool, tenant: str, runtime: int = 60) -> dict:
    return parse_job({
        "id": job_id, "tenant": tenant, "schedule": "* * * * *",
        "target": {"shell": "true"}, "overlap_policy": overlap, "paused": paused,
        "max_runtime_s": runtime,
    }).to_spec()


def make_item(job_idx: int, minute: int, decision: str, off: int, delay: int, shape: str,
              versions: dict[str, int], base: int) -> list:
    job_id = JOBS[job_idx] if job_idx < len(JOBS) else "nobody"
    at = base + minute * MIN
    out = [job_id, versions.get(job_id, 1) + off, at, at + delay * 1000, decision]
    if shape == "float_at":
        out[2] = float(at)
    elif shape == "bool_version":
        out[1] = True
    elif shape == "int_job":
        out[0] = job_idx
    elif shape == "ms_at":
        out[2] = at + 500
    elif shape == "bad_decision":
        out[4] = "later"
    elif shape == "huge_version":
        out[1] = 2**70
    elif shape == "far_at":  # no occurrence id can name it (past year 9999)
        out[2] = 2**62
    elif shape == "bc_at":
        out[2] = -(2**62)
    return out


class Pair:
    """Machine a (set path) and machine b (item by item), fed the same log."""

    def __init__(self, tmp: str) -> None:
        self.a = StateMachine(open_writer(os.path.join(tmp, "a.db")))
        self.b = StateMachine(open_writer(os.path.join(tmp, "b.db")), bulk_claims=False)
        self.index = 0
        self.now = T0 - MIN
        self.req = 0

    def apply(self, cmd: c.Command) -> dict:
        self.index += 1
        ra = self.a.apply(self.index, cmd)
        rb = self.b.apply(self.index, cmd)
        assert ra == rb, cmd
        assert digest(self.a.conn) == digest(self.b.conn), cmd
        return ra

    def reopen(self) -> None:
        for name in ("a", "b"):
            old = getattr(self, name)
            path = old.conn.execute("PRAGMA database_list").fetchone()[2]
            old.conn.close()
            setattr(self, name, StateMachine(open_writer(path), bulk_claims=name == "a"))

    def both(self, sql: str, *args) -> None:
        """The same direct change on both databases (a state an older version left)."""
        for m in (self.a, self.b):
            m.conn.execute(sql, args)

    def q(self, sql: str, *args) -> list:
        return self.a.conn.execute(sql, args).fetchall()

    def rid(self) -> str:
        self.req += 1
        return f"r{self.req}"


def run(pair: Pair, jobs: list, metered_quota: int | None, steps: list) -> None:
    pair.apply(c.BeginEpoch(term=1, node_id="n", now_ms=pair.now))
    pair.apply(c.PutTenant(pair.rid(), pair.now, "metered",
                           max_fires_per_minute=metered_quota))
    pair.apply(c.PutTenant(pair.rid(), pair.now, "narrow", max_concurrent_runs=1))
    for job_id, (overlap, paused, tenant) in zip(JOBS, jobs, strict=True):
        r = pair.apply(c.PutJob(pair.rid(), pair.now, spec(job_id, overlap, paused,
                                                            TENANTS[tenant]), True))
        assert r["ok"], r
    pair.now = T0 + 60 * MIN  # every instant claimed below is due
    base = T0
    for kind, arg in steps:
        if kind == "claim":
            versions = dict(pair.q("SELECT id, version FROM jobs"))
            items = [make_item(*it, versions, base) for it in arg]
            base += MIN
            r = pair.apply(c.Claim(epoch=1, now_ms=pair.now, items=items))
            assert r["ok"]
            assert r["fired"] + r["skipped"] + len(r["rejected_items"]) == len(items)
        elif kind == "lease":
            ids = [row[0] for row in pair.q(
                "SELECT id FROM attempts WHERE status = 'pending' ORDER BY id LIMIT ?", arg)]
            pair.apply(c.Lease(epoch=1, now_ms=pair.now, worker_id="w", attempt_ids=ids))
        elif kind == "complete":
            done = [[a, t, "succeeded", 0, ""] for a, t in pair.q(
                "SELECT id, fencing_token FROM attempts WHERE status = 'running' "
                "ORDER BY id LIMIT ?", arg)]
            pair.apply(c.Complete(now_ms=pair.now, worker_id="w", completions=done))
        elif kind in ("pause", "resume"):
            cls = c.PauseJob if kind == "pause" else c.ResumeJob
            pair.apply(cls(pair.rid(), pair.now, JOBS[arg]))
        elif kind == "edit":  # a new version: claims at the old one become stale
            row = pair.q("SELECT spec FROM jobs WHERE id = ?", JOBS[arg])
            if row:
                body = json.loads(row[0][0])
                body["overlap_policy"] = ("allow" if body["overlap_policy"] != "allow"
                                          else "forbid")
                r = pair.apply(c.PutJob(pair.rid(), pair.now, body, False))
                assert r["ok"], r
        elif kind == "recreate":  # the same id, a new life: its old instants stay claimed
            row = pair.q("SELECT spec FROM jobs WHERE id = ?", JOBS[arg])
            if row:
                pair.apply(c.DeleteJob(pair.rid(), pair.now, JOBS[arg]))
                r = pair.apply(c.PutJob(pair.rid(), pair.now, json.loads(row[0][0]), True))
                assert r["ok"], r
        elif kind == "quota":  # the default tenant gains, changes or loses a fires quota
            pair.apply(c.PutTenant(pair.rid(), pair.now, "default", max_fires_per_minute=arg))
        elif kind == "reopen":  # a restart: the set path's temporary tables are gone
            pair.reopen()
        elif kind == "rewind":  # a watermark behind the job's rows: UNIQUE decides
            pair.both("UPDATE jobs SET watermark_ms = watermark_ms - ? WHERE id = ?",
                      3 * MIN, JOBS[arg])
        else:
            pair.now += arg


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(world, st.lists(step, min_size=6, max_size=30))
def test_the_set_path_leaves_what_item_by_item_leaves(setup, steps):
    jobs, metered_quota = setup
    with tempfile.TemporaryDirectory() as tmp:
        pair = Pair(tmp)
        try:
            run(pair, jobs, metered_quota, steps)
        finally:
            pair.a.conn.close()
            pair.b.conn.close()


# --- which items the set path takes -------------------------------------------------------

def _machine(tmp: str, jobs: dict[str, tuple[str, bool, str]]) -> StateMachine:
    sm = StateMachine(open_writer(os.path.join(tmp, "s.db")))
    sm.apply(1, c.BeginEpoch(term=1, node_id="n", now_ms=T0 - MIN))
    sm.apply(2, c.PutTenant("t1", T0 - MIN, "metered", max_fires_per_minute=5))
    for i, (job_id, (overlap, paused, tenant)) in enumerate(jobs.items(), start=3):
        assert sm.apply(i, c.PutJob(f"p{i}", T0 - MIN, spec(job_id, overlap, paused, tenant),
                                    True))["ok"]
    return sm


def test_the_set_path_takes_plain_fires_and_skips_and_leaves_the_rest(tmp_path):
    sm = _machine(str(tmp_path), {
        "plain": ("allow", False, "default"), "held": ("allow", True, "default"),
        "exclusive": ("forbid", False, "default"), "metered": ("allow", False, "metered"),
        "twice": ("allow", False, "default"), "skipped": ("forbid", False, "default"),
        "idle": ("replace", False, "default"), "leased": ("replace", False, "default"),
    })
    before = T0 + MIN
    # "exclusive" and "skipped" have a run queued, "leased" one running: overlap has a
    # say in their next fire.
    assert sm.apply(20, c.Claim(epoch=1, now_ms=before, items=[
        ["exclusive", 1, before, before, "fire"], ["skipped", 1, before, before, "fire"],
        ["leased", 1, before, before, "fire"]],
    ))["fired"] == 3
    leased = sm.apply(21, c.Lease(epoch=1, now_ms=before, worker_id="w",
                                  attempt_ids=["leased@2026-01-01T00:01:00Z~1"]))
    assert len(leased["leases"]) == 1
    at = before + MIN
    items = [
        ["plain", 1, at, at, "fire"],        # 0: taken, fires
        ["held", 1, at, at, "fire"],         # 1: taken, skipped (paused)
        ["exclusive", 1, at, at, "fire"],    # 2: overlap decides (a run queued): left
        ["metered", 1, at, at, "fire"],      # 3: quota decides: left
        ["twice", 1, at, at, "fire"],        # 4: named twice: left
        ["twice", 1, at + MIN, at, "fire"],  # 5: left
        ["skipped", 1, at, at, "misfire"],   # 6: a skip needs no overlap decision: taken
        ["idle", 1, at, at, "fire"],         # 7: nothing to replace: taken, fires
        ["plain", 2, at, at, "fire"],        # 8: named twice too (with 0): left
        ["nobody", 1, at, at, "fire"],       # 9: no such job: left
        ["leased", 1, at, at, "fire"],       # 10: a run to replace: left
    ]
    conn = sm.conn
    conn.execute("BEGIN")
    # "plain" is named twice above; take it out to see it taken.
    got = bulk_claim(conn, [it for k, it in enumerate(items) if k != 8], 1, at)
    assert got is not None
    assert got.positions == {0, 1, 6, 7}
    assert (got.fired, got.skipped) == (2, 2)
    new = conn.execute("SELECT id, status, reason FROM occurrences WHERE scheduled_for_ms = ? "
                       "ORDER BY id", (at,)).fetchall()
    assert new == [
        ("held@2026-01-01T00:02:00Z", "skipped", "paused"),
        ("idle@2026-01-01T00:02:00Z", "pending", None),
        ("plain@2026-01-01T00:02:00Z", "pending", None),
        ("skipped@2026-01-01T00:02:00Z", "skipped", "misfire"),
    ]
    assert conn.execute("SELECT id FROM attempts WHERE created_ms = ? ORDER BY id",
                        (at,)).fetchall() == [("idle@2026-01-01T00:02:00Z~1",),
                                              ("plain@2026-01-01T00:02:00Z~1",)]
    assert conn.execute("SELECT id FROM jobs WHERE watermark_ms = ? ORDER BY id",
                        (at,)).fetchall() == [("held",), ("idle",), ("plain",), ("skipped",)]
    conn.execute("ROLLBACK")
    conn.execute("BEGIN")
    got = bulk_claim(conn, items, 1, at)
    assert got is not None and got.positions == {1, 6, 7}
    conn.execute("ROLLBACK")


def test_a_row_the_database_refuses_sends_every_item_item_by_item(tmp_path):
    sm = _machine(str(tmp_path), {"a": ("allow", False, "default"),
                                  "b": ("allow", False, "default")})
    at = T0 + MIN
    assert sm.apply(10, c.Claim(epoch=1, now_ms=at, items=[["a", 1, at, at, "fire"]]))["ok"]
    sm.conn.execute("UPDATE jobs SET watermark_ms = 0 WHERE id = 'a'")  # an older version's
    conn = sm.conn
    conn.execute("BEGIN")
    assert bulk_claim(conn, [["a", 1, at, at, "fire"], ["b", 1, at, at, "fire"]], 1, at) is None
    conn.execute("ROLLBACK")
    r = sm.apply(11, c.Claim(epoch=1, now_ms=at, items=[["a", 1, at, at, "fire"],
                                                         ["b", 1, at, at, "fire"]]))
    assert r == {"ok": True, "fired": 1, "skipped": 0,
                 "rejected_items": [["a", at, "already_claimed"]]}
    assert sm.conn.execute("SELECT count(*) FROM attempts").fetchone()[0] == 2
