"""Apply throughput of batched Claim commands versus plain sqlite3 executemany.

Each Claim carries one item per job (1,000 jobs by default), so one command records 1,000
occurrences. Commands go through the codec and `StateMachine.apply_bytes`, on a file-backed
SQLite database in a temporary directory. The baselines insert the same occurrence and
attempt rows with `executemany` into tables created from the same schema, one transaction
per batch, and the occurrence rows alone into a table with no index at all (the floor).
`--rounds` sets how much history the run builds: job-led indexes slow down as it grows.
"machine: claim fire" is the product (common items through the set statements of
`state.bulk_claim`); "item by item" decides every item in Python, as claims did before.

The "ceiling" variants bound what an item-by-item loop in Python over SQLite could reach
on this machine with any storage model: a claim loop stripped to its least (decode the
same command bytes, read each job's watermark and version from a narrow table, insert one
lean occurrence row per item under the UNIQUE (instant, job) index and a pending-queue
index, move the watermarks, one transaction), with no pending-attempt row, no overlap,
pause or quota policy, and either no per-job index at all or one `(job_id, instant)` index
for per-job reads, and that last one again with five commands committed per transaction
(group commit). "ceiling: set path, no attempt row" bounds what reshaping the storage model
could give the set path: the product's machine and set path (encode, apply, candidates,
result), but no attempt row at claim time (the first attempt would be made at lease,
dispatch reading a pending-occurrence index), watermarks and live-run counts in a narrow
per-job table, and the `allow` policy read from a partial index instead of the job's JSON.

    python bench/claim_apply.py [--jobs 1000] [--rounds 20] [--reps 5] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import os
import pstats
import sqlite3
import statistics
import tempfile
import time
from typing import Any

from raftcron.core import commands as c
from raftcron.core import identity
from raftcron.core.model import parse_job
from raftcron.state import bulk_claim, occurrences
from raftcron.state.db import Checkpointer, open_writer, schema_sql
from raftcron.state.machine import StateMachine

T0 = 1_767_225_600_000
MIN = 60_000
TARGET = 50_000


def job_ids(n: int) -> list[str]:
    return [f"job-{i:05d}" for i in range(n)]


def setup_machine(path: str, jobs: list[str], overlap: str,
                  bulk: bool = True) -> tuple[StateMachine, int]:
    sm = StateMachine(open_writer(path), bulk_claims=bulk)
    index = 1
    sm.apply_bytes(index, c.encode(c.BeginEpoch(term=1, node_id="bench", now_ms=T0)))
    for job_id in jobs:
        index += 1
        spec = parse_job({"id": job_id, "schedule": "* * * * *", "target": {"shell": "true"},
                          "overlap_policy": overlap}).to_spec()
        r = sm.apply_bytes(index, c.encode(c.PutJob(f"r-{job_id}", T0, spec, True)))
        assert r["ok"], r
    return sm, index


def claim_round(jobs: list[str], r: int, decision: str) -> c.Claim:
    at = T0 + (r + 1) * MIN
    return c.Claim(epoch=1, now_ms=at, items=[[j, 1, at, at, decision] for j in jobs])


def run_machine(tmp: str, jobs: list[str], rounds: int, decision: str, overlap: str,
                profiler: cProfile.Profile | None = None, bulk: bool = True,
                reshaped: bool = False) -> float:
    """Occurrence rows per second through encode + apply_bytes (`bulk=False`: every item
    decided one by one, as before the set path; `reshaped`: the set path of the reshaped
    storage model, RESHAPED)."""
    sm, index = setup_machine(os.path.join(tmp, f"sm-{decision}-{overlap}.db"), jobs, overlap,
                              bulk)
    if reshaped:
        sm.conn.executescript(RESHAPED_SCHEMA)
        sm.handlers[c.Claim] = functools.partial(occurrences.claim, statements=RESHAPED)
    return _time_claims(tmp, sm, index, jobs, rounds, decision, overlap, profiler,
                        without_attempts=reshaped)


def _time_claims(tmp: str, sm: StateMachine, index: int, jobs: list[str], rounds: int,
                 decision: str, overlap: str, profiler: cProfile.Profile | None,
                 without_attempts: bool = False) -> float:
    cmds = [claim_round(jobs, r, decision) for r in range(rounds)]
    # As on a node: WAL checkpoints run on a background thread, off the apply path.
    checkpointer = Checkpointer(os.path.join(tmp, f"sm-{decision}-{overlap}.db")).start()
    if profiler is not None:
        profiler.enable()
    start = time.perf_counter()
    for cmd in cmds:
        index += 1
        result = sm.apply_bytes(index, c.encode(cmd))
        if not result["ok"] or result["rejected_items"]:
            raise RuntimeError(f"unexpected claim result {result}")
    elapsed = time.perf_counter() - start
    checkpointer.stop()
    if profiler is not None:
        profiler.disable()
    n = sm.conn.execute("SELECT count(*) FROM occurrences").fetchone()[0]
    assert n == rounds * len(jobs), n
    if without_attempts:  # every item went through the reshaped set path
        attempts = sm.conn.execute("SELECT count(*) FROM attempts").fetchone()[0]
        assert attempts == 0, f"{attempts} items left the reshaped set path"
    sm.conn.close()
    return n / elapsed


OCC_SQL = (
    "INSERT INTO occurrences (id, job_id, tenant, queue, kind, scheduled_for_ms, "
    "dispatch_at_ms, job_version, status, reason, idempotency_key, request_key, attempts, "
    "epoch, created_ms, finished_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
ATT_SQL = (
    "INSERT INTO attempts (id, occurrence_id, job_id, tenant, queue, number, status, "
    "not_before_ms, created_ms) VALUES (?,?,?,?,?,?,'pending',?,?)"
)


# The floor: the occurrence rows into a table with no index but its rowid, before any
# index the product reads by.
BARE_SCHEMA = (
    "CREATE TABLE occurrences (id TEXT NOT NULL, job_id TEXT, tenant TEXT, queue TEXT, "
    "kind TEXT, scheduled_for_ms INTEGER, dispatch_at_ms INTEGER, job_version INTEGER, "
    "status TEXT, reason TEXT, idempotency_key TEXT, request_key TEXT, attempts INTEGER, "
    "epoch INTEGER, created_ms INTEGER, finished_ms INTEGER)"
)


def run_baseline(tmp: str, jobs: list[str], rounds: int, with_attempts: bool,
                 schema: str | None = None) -> float:
    """Rows per second for plain executemany of the equivalent rows, one txn per batch,
    into tables of the product's schema (or `schema`)."""
    path = os.path.join(tmp, f"base-{with_attempts}-{schema is None}.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA cache_size=-65536")
    conn.executescript(schema or schema_sql())
    batches = []
    for r in range(rounds):
        at = T0 + (r + 1) * MIN
        occ_rows, att_rows = [], []
        for j in jobs:
            oid = identity.scheduled_occurrence_id(j, at)
            occ_rows.append((oid, j, "default", "default", "scheduled", at, at, 1, "pending",
                             None, None, None, 1, 1, at, None))
            att_rows.append((identity.attempt_id(oid, 1), oid, j, "default", "default", 1,
                             at, at))
        batches.append((occ_rows, att_rows))
    start = time.perf_counter()
    for occ_rows, att_rows in batches:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(OCC_SQL, occ_rows)
        if with_attempts:
            conn.executemany(ATT_SQL, att_rows)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    n = conn.execute("SELECT count(*) FROM occurrences").fetchone()[0]
    assert n == rounds * len(jobs)
    conn.close()
    return n / elapsed


CEILING_SCHEMA = """
CREATE TABLE marks (job_id TEXT PRIMARY KEY, version INTEGER NOT NULL, tenant TEXT NOT NULL,
    queue TEXT NOT NULL, watermark_ms INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE occurrences (id TEXT NOT NULL, job_id TEXT NOT NULL, tenant TEXT NOT NULL,
    queue TEXT NOT NULL, kind TEXT NOT NULL, scheduled_for_ms INTEGER NOT NULL,
    dispatch_at_ms INTEGER NOT NULL, job_version INTEGER NOT NULL, status TEXT NOT NULL,
    attempts INTEGER NOT NULL, epoch INTEGER NOT NULL, created_ms INTEGER NOT NULL);
CREATE UNIQUE INDEX occ_scheduled_time ON occurrences (scheduled_for_ms, job_id)
    WHERE kind = 'scheduled';
CREATE INDEX occ_pending ON occurrences (queue, dispatch_at_ms) WHERE status = 'pending';
"""
PER_JOB_INDEX = "CREATE INDEX occ_job ON occurrences (job_id, scheduled_for_ms);"


def run_ceiling(tmp: str, jobs: list[str], rounds: int, per_job_index: bool,
                group: int = 1) -> float:
    """Occurrence rows per second for the least a claim apply must do (see the module doc),
    committing every `group` commands (group commit: one transaction for several entries)."""
    path = os.path.join(tmp, f"ceiling-{per_job_index}.db")
    conn = open_writer(path, schema=CEILING_SCHEMA + (PER_JOB_INDEX if per_job_index else ""))
    conn.executemany("INSERT INTO marks VALUES (?, 1, 'default', 'default', ?)",
                     [(j, T0) for j in jobs])
    payloads = [c.encode(claim_round(jobs, r, "fire")) for r in range(rounds)]
    checkpointer = Checkpointer(path).start()
    start = time.perf_counter()
    for k, payload in enumerate(payloads):
        cmd = c.decode(payload)
        assert isinstance(cmd, c.Claim)
        now_ms, epoch, items = cmd.now_ms, cmd.epoch, cmd.items
        if k % group == 0:
            conn.execute("BEGIN IMMEDIATE")
        ids = sorted({item[0] for item in items})
        marks: dict[str, list[Any]] = {}
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            for row in conn.execute(
                "SELECT job_id, version, tenant, queue, watermark_ms FROM marks "
                f"WHERE job_id IN ({','.join('?' * len(chunk))})", chunk,
            ):
                marks[row[0]] = list(row)
        rows = []
        for job_id, version, at, dispatch_at, _decision in items:
            mark = marks.get(job_id)
            if mark is None or mark[1] != version or at <= mark[4]:
                continue
            mark[4] = at
            rows.append((identity.scheduled_occurrence_id(job_id, at), job_id, mark[2],
                         mark[3], "scheduled", at, dispatch_at, version, "pending", 0, epoch,
                         now_ms))
        conn.executemany("INSERT INTO occurrences VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        conn.executemany("UPDATE marks SET watermark_ms = ? WHERE job_id = ?",
                         [(m[4], m[0]) for m in marks.values()])
        if k % group == group - 1 or k == len(payloads) - 1:
            conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    checkpointer.stop()
    n = conn.execute("SELECT count(*) FROM occurrences").fetchone()[0]
    assert n == rounds * len(jobs), n
    conn.close()
    return n / elapsed


# The reshaped model's additions to the product schema (see the module doc).
RESHAPED_SCHEMA = """
CREATE TABLE job_marks (job_id TEXT PRIMARY KEY, watermark_ms INTEGER NOT NULL,
    pending INTEGER NOT NULL DEFAULT 0, running INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
CREATE INDEX occ_ready ON occurrences (queue, dispatch_at_ms) WHERE status = 'pending';
CREATE INDEX jobs_allow ON jobs (id) WHERE json_extract(spec, '$.overlap_policy') = 'allow';
INSERT INTO job_marks (job_id, watermark_ms) SELECT id, watermark_ms FROM jobs;
"""
# Its claim: the product's judgement (derived from it, so the two cannot drift apart),
# reading the watermark and the live runs from the narrow marks and the `allow` policy
# from the partial index; no attempt rows; the marks of the taken items move (and count a
# queued run for each fire).
_NO_LIVE_RUNS = """(NOT EXISTS (SELECT 1 FROM attempts AS a
                            WHERE a.job_id = j.id AND a.status = 'pending')
                AND NOT EXISTS (SELECT 1 FROM attempts AS a
                                WHERE a.job_id = j.id AND a.status = 'running'))"""


def _reshaped_judge() -> str:
    sql = bulk_claim.STATEMENTS.judge
    for old, new in (
        ("JOIN jobs AS j ON j.id = i.job_id",
         "JOIN jobs AS j ON j.id = i.job_id JOIN job_marks AS m ON m.job_id = i.job_id"),
        ("i.at > j.watermark_ms", "i.at > m.watermark_ms"),
        ("json_extract(j.spec, '$.overlap_policy') = 'allow'",
         "EXISTS (SELECT 1 FROM jobs AS k INDEXED BY jobs_allow WHERE k.id = j.id "
         "AND json_extract(k.spec, '$.overlap_policy') = 'allow')"),
        (_NO_LIVE_RUNS, "(m.pending = 0 AND m.running = 0)"),
    ):
        assert sql.count(old) == 1, f"the product's claim judgement changed: {old!r}"
        sql = sql.replace(old, new)
    return sql


RESHAPED = bulk_claim.ClaimStatements(
    judge=_reshaped_judge(),
    attempts=None,
    watermarks="UPDATE job_marks SET watermark_ms = b.at, pending = pending + "
               "(b.status = 'pending') FROM temp.claim_batch AS b "
               "WHERE job_marks.job_id = b.job_id",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="cProfile one machine run")
    args = ap.parse_args()
    jobs = job_ids(args.jobs)

    variants = {
        "machine: claim fire (occ+attempt)": lambda t: run_machine(
            t, jobs, args.rounds, "fire", "allow"),
        "machine: claim fire, item by item": lambda t: run_machine(
            t, jobs, args.rounds, "fire", "allow", bulk=False),
        "machine: claim fire, forbid policy": lambda t: run_machine(
            t, jobs, args.rounds, "fire", "forbid"),
        "machine: claim misfire (occ only)": lambda t: run_machine(
            t, jobs, args.rounds, "misfire", "allow"),
        "executemany occ+attempt": lambda t: run_baseline(t, jobs, args.rounds, True),
        "executemany occ only": lambda t: run_baseline(t, jobs, args.rounds, False),
        "executemany occ, bare table": lambda t: run_baseline(t, jobs, args.rounds, False,
                                                              BARE_SCHEMA),
        "ceiling: least claim, no per-job index": lambda t: run_ceiling(
            t, jobs, args.rounds, False),
        "ceiling: least claim + per-job index": lambda t: run_ceiling(
            t, jobs, args.rounds, True),
        "ceiling: + per-job index, 5 cmds/txn": lambda t: run_ceiling(
            t, jobs, args.rounds, True, group=5),
        "ceiling: set path, no attempt row": lambda t: run_machine(
            t, jobs, args.rounds, "fire", "allow", reshaped=True),
    }
    results: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.reps):
        for name, fn in variants.items():  # interleaved so drift hits every variant alike
            with tempfile.TemporaryDirectory() as tmp:
                results[name].append(fn(tmp))

    print(f"claim apply benchmark: {args.jobs} occurrences/command, {args.rounds} commands/run, "
          f"{args.reps} repetitions, sqlite {sqlite3.sqlite_version}")
    print(f"{'variant':40} {'median occ/s':>14} {'min':>10} {'max':>10}")
    for name, vals in results.items():
        print(f"{name:40} {statistics.median(vals):14,.0f} {min(vals):10,.0f} "
              f"{max(vals):10,.0f}")
    med = {k: statistics.median(v) for k, v in results.items()}
    fire = med["machine: claim fire (occ+attempt)"]
    miss = med["machine: claim misfire (occ only)"]
    print(f"ratio set path/item by item (fire):      "
          f"{fire / med['machine: claim fire, item by item']:.2f}")
    print(f"ratio machine/executemany (occ+attempt): {fire / med['executemany occ+attempt']:.2f}")
    print(f"ratio machine/executemany (occ only):    {miss / med['executemany occ only']:.2f}")
    print(f"ratio machine/bare table (occ+attempt):  "
          f"{fire / med['executemany occ, bare table']:.2f}")
    reshaped = med["ceiling: set path, no attempt row"]
    print(f"ratio reshaped ceiling/machine (fire):   {reshaped / fire:.2f}")
    verdict = "meets" if fire >= TARGET else "BELOW"
    print(f"target {TARGET:,} occ/s: {verdict} (claim fire median {fire:,.0f} occ/s; "
          f"reshaped ceiling median {reshaped:,.0f} occ/s)")

    if args.profile or fire < TARGET:
        prof = cProfile.Profile()
        with tempfile.TemporaryDirectory() as tmp:
            run_machine(tmp, jobs, args.rounds, "fire", "allow", profiler=prof)
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(18)
        print(out.getvalue())


if __name__ == "__main__":
    main()
