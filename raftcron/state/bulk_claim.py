"""The set-based path of a Claim: the common items recorded by a few SQL statements.

A herd claim records one occurrence (and for a fire one pending attempt) per job. Item by
item, that is Python work per row: a decision, two row tuples, twenty-four bound
parameters. Most items need no decision SQL cannot make: a fire of a job named once in
the command, in a tenant without a fires quota, whose overlap policy lets it run with no
side effect (`allow`, or nothing of the job pending or running), or any item recorded as
skipped (misfire, paused). Those go through here: their facts are bound once into a
temporary table, and set statements join them with their jobs, insert their rows and
move their watermarks. Everything else (overlap decisions, quotas, a job named twice,
anything malformed or refused) is left to the item-by-item path in `occurrences`, which
makes the same rows from the same facts; `tests/property/test_bulk_claim.py` checks that
both paths leave the same database and return the same result.

The two sets name different jobs, so neither path sees the other's rows. If the
database refuses a row (the UNIQUE constraint on an instant the watermark let through),
the caller rolls this path back and lets the item-by-item path decide every item.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from raftcron.core import identity, policy
from raftcron.core.timefmt import ISO_MAX_MS, ISO_MIN_MS

# The candidate items, as `candidates` makes them; occurrence and attempt ids come from
# core.identity, the one place that names them. (Bound row by row into a temporary table:
# in SQLite 3.40, reading eight fields per item out of one JSON array parses each item
# eight times, which costs more than the binding.)
_INPUT_TABLE = (
    "CREATE TEMP TABLE IF NOT EXISTS claim_input (pos INTEGER PRIMARY KEY, job_id TEXT, "
    "version INTEGER, at INTEGER, dispatch_at INTEGER, decision TEXT, occ_id TEXT, "
    "att_id TEXT)"
)
_INPUT = "INSERT INTO temp.claim_input VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
# The candidates the set statements take, with what their rows need of their jobs.
_BATCH_TABLE = (
    "CREATE TEMP TABLE IF NOT EXISTS claim_batch (pos INTEGER PRIMARY KEY, "
    "occ_id TEXT NOT NULL, att_id TEXT NOT NULL, job_id TEXT NOT NULL, tenant TEXT NOT NULL, "
    "queue TEXT NOT NULL, version INTEGER NOT NULL, at INTEGER NOT NULL, "
    "dispatch_at INTEGER NOT NULL, status TEXT NOT NULL, reason TEXT)"
)
# The job must exist at the claimed version, the instant be past its watermark, and the
# item need no decision but "fire" or "skipped": a skip is recorded as it is; a fire is
# taken only when no fires quota applies and overlap cannot hold it back: `allow` runs
# everything, and every other policy runs a job with nothing pending or running, with
# nothing to cancel (core.policy.decide_overlap).
_SELECT = """
INSERT INTO temp.claim_batch
SELECT i.pos, i.occ_id, i.att_id, j.id, j.tenant, j.queue, j.version, i.at, i.dispatch_at,
       CASE WHEN i.decision != :fire OR j.paused THEN 'skipped' ELSE 'pending' END,
       CASE WHEN i.decision != :fire THEN i.decision WHEN j.paused THEN :paused END
FROM temp.claim_input AS i JOIN jobs AS j ON j.id = i.job_id
WHERE j.version = i.version AND i.at > j.watermark_ms
  AND (i.decision != :fire OR j.paused
       OR ((json_extract(j.spec, '$.overlap_policy') = 'allow'
            OR (NOT EXISTS (SELECT 1 FROM attempts AS a
                            WHERE a.job_id = j.id AND a.status = 'pending')
                AND NOT EXISTS (SELECT 1 FROM attempts AS a
                                WHERE a.job_id = j.id AND a.status = 'running')))
           AND j.tenant NOT IN (SELECT name FROM tenants
                                WHERE max_fires_per_minute IS NOT NULL)))
ORDER BY i.pos
"""
_INSERT_OCCURRENCES = """
INSERT OR IGNORE INTO occurrences (id, job_id, tenant, queue, kind, scheduled_for_ms,
    dispatch_at_ms, job_version, status, reason, idempotency_key, request_key, attempts,
    epoch, created_ms, finished_ms)
SELECT occ_id, job_id, tenant, queue, 'scheduled', at, dispatch_at, version, status, reason,
       NULL, NULL, status = 'pending', :epoch, :now,
       CASE WHEN status = 'skipped' THEN :now END
FROM temp.claim_batch ORDER BY pos
"""
_INSERT_ATTEMPTS = """
INSERT INTO attempts (id, occurrence_id, job_id, tenant, queue, number, status,
    not_before_ms, created_ms)
SELECT att_id, occ_id, job_id, tenant, queue, 1, 'pending', dispatch_at, :now
FROM temp.claim_batch WHERE status = 'pending' ORDER BY pos
"""
_MOVE_WATERMARKS = (
    "UPDATE jobs SET watermark_ms = b.at FROM temp.claim_batch AS b WHERE jobs.id = b.job_id"
)
_DECISIONS = (policy.FIRE, policy.SKIP_MISFIRE, policy.SKIP_PAUSED)


@dataclass(frozen=True)
class ClaimStatements:
    """The statements that judge the staged items into `claim_batch` and record its rows
    (bench/claim_apply.py measures other storage models through the same path)."""

    judge: str = _SELECT
    attempts: str | None = _INSERT_ATTEMPTS
    watermarks: str = _MOVE_WATERMARKS


STATEMENTS = ClaimStatements()
# SQLite integers are 64-bit.
_INT_MAX = 2**63 - 1


@dataclass
class BulkClaimed:
    """What the set statements recorded: which items, and how many fired or skipped."""

    positions: set[int] = field(default_factory=set)
    fired: int = 0
    skipped: int = 0


def _is_int(value: Any) -> bool:
    return type(value) is int and -_INT_MAX <= value <= _INT_MAX


MAX_MATCHED = 16


def well_formed(item: Any) -> bool:
    """[job id, version, instant ms, dispatch ms, decision], as SQLite can store them and
    an occurrence id can name the instant (core.timefmt writes it); an item of a job with
    several schedules has a sixth field, the names of those that named the instant."""
    return (
        type(item) is list and len(item) in (5, 6) and type(item[0]) is str
        and _is_int(item[1]) and type(item[2]) is int
        and ISO_MIN_MS <= item[2] <= ISO_MAX_MS and _is_int(item[3])
        and type(item[4]) is str
        and (len(item) == 5 or (type(item[5]) is list and 1 <= len(item[5]) <= MAX_MATCHED
                                and all(type(n) is str for n in item[5])))
    )


def candidates(items: list[list[Any]]) -> list[tuple[Any, ...]]:
    """Items well formed enough for SQL to judge, of jobs named once in the command."""
    rows: list[tuple[Any, ...]] = []
    seen: set[str] = set()
    named_twice: set[Any] = set()
    scheduled_id, attempt_id = identity.scheduled_occurrence_id, identity.attempt_id
    for pos, item in enumerate(items):
        if not well_formed(item):
            continue
        job_id, version, at, dispatch_at, decision = item[:5]
        if job_id in seen:
            named_twice.add(job_id)
            continue
        seen.add(job_id)
        # Matched schedules (a sixth field) are recorded item by item.
        if decision in _DECISIONS and len(item) == 5:
            occ_id = scheduled_id(job_id, at)
            rows.append((pos, job_id, version, at, dispatch_at, decision, occ_id,
                         attempt_id(occ_id, 1)))
    if named_twice:
        rows = [row for row in rows if row[1] not in named_twice]
    return rows


def bulk_claim(conn: sqlite3.Connection, items: list[list[Any]], epoch: int,
               now_ms: int, statements: ClaimStatements = STATEMENTS) -> BulkClaimed | None:
    """Record the items SQL can decide alone; None when the database refused a row (the
    caller rolls back what this did and decides every item one by one)."""
    rows = candidates(items)
    if not rows:
        return BulkClaimed()
    for create in (_INPUT_TABLE, _BATCH_TABLE):
        conn.execute(create)
    conn.execute("DELETE FROM temp.claim_input")
    conn.execute("DELETE FROM temp.claim_batch")
    conn.executemany(_INPUT, rows)
    judged = {"fire": policy.FIRE, "paused": policy.SKIP_PAUSED}
    taken = conn.execute(statements.judge, judged).rowcount
    if taken == 0:
        return BulkClaimed()
    if conn.execute(_INSERT_OCCURRENCES, {"epoch": epoch, "now": now_ms}).rowcount != taken:
        return None
    if statements.attempts is not None:
        conn.execute(statements.attempts, {"now": now_ms})
    conn.execute(statements.watermarks)
    fired = conn.execute(
        "SELECT count(*) FROM temp.claim_batch WHERE status = 'pending'").fetchone()[0]
    positions = (set(range(len(items))) if taken == len(items) else
                 {pos for (pos,) in conn.execute("SELECT pos FROM temp.claim_batch")})
    return BulkClaimed(positions, fired, taken - fired)
