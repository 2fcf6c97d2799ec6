"""A backfill names instants, and an instant the job already has covered creates nothing.

Before protocol level BACKFILL_BY_INSTANT_LEVEL a backfill occurrence was named by (job,
instant, request key) alone, so every new Idempotency-Key made each instant again: 30
backfills of 10,000 instants left 330,000 pending runs. From that level on the instant
decides, as it does for cron instants: an instant is *covered* when the job has a run of
it, scheduled or backfilled under any key, that is waiting, running or has succeeded, and a
backfill of a covered instant answers that run's id and creates nothing. An instant whose
runs were all skipped (misfire, pause, calendar, overlap, quota), failed or were cancelled
is backfilled again, which is what a backfill is for; so at most one run of each (job,
instant) is live or successful at a time, whatever the keys.

This is a check inside the apply transaction, not a UNIQUE index: databases written before
it may hold several backfill rows of one instant (an index could not be built on them), a
level-1 member must still be able to insert such rows until the level is raised, and a
failed run must not keep its instant from being run again. The check reads only the state,
in one transaction, so every node decides alike.

The queries here serve apply (`sqlite3`) and the API's check before it proposes anything
(the same SQL over its read connection): `cover_queries` and `covering`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from raftcron.core import identity

# The statuses of a run that covers its instant: waiting (pending, and retries waiting for
# their backoff), running, or done well.
COVERING_STATUSES = ("pending", "running", "succeeded")
_STATUSES = ", ".join(f"'{s}'" for s in COVERING_STATUSES)
# The job's backfill runs in an instant range (index occ_backfill: job, instant, key).
# `+status`: never the status index, which holds every job's runs of that time.
_BACKFILLS_SQL = (
    "SELECT scheduled_for_ms, id FROM occurrences WHERE job_id = ? AND kind = 'backfill' "
    f"AND scheduled_for_ms BETWEEN ? AND ? AND +status IN ({_STATUSES})")
# The job's scheduled runs in an instant range: their ids sort by instant (core.identity),
# so this is a range of the primary key (`covering` keeps the instants asked for).
_SCHEDULED_SQL = (
    "SELECT scheduled_for_ms, id FROM occurrences WHERE id >= ? AND id <= ? "
    f"AND kind = 'scheduled' AND +scheduled_for_ms BETWEEN ? AND ? AND +status IN ({_STATUSES})")
# Which of the request's own occurrence ids exist already, whatever their status (the same
# request sent again creates nothing, as at every level).
OWN_SQL = "SELECT id FROM occurrences WHERE id IN ({marks})"


def cover_queries(job_id: str, instants: Sequence[int]) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements (SQL, parameters) whose rows `covering` reads, for these instants."""
    if not instants:
        return []
    lo, hi = min(instants), max(instants)
    return [
        (_BACKFILLS_SQL, (job_id, lo, hi)),
        (_SCHEDULED_SQL, (identity.scheduled_id_bound(job_id, lo),
                          identity.scheduled_id_bound(job_id, hi), lo, hi)),
    ]


def covering(rows: Iterable[tuple[int, str]], instants: Sequence[int],
             own: dict[int, str]) -> dict[int, str]:
    """For each covered instant of `instants`, the id of the run that covers it: the
    request's own occurrence (`own`, by instant) when it is one of them, else the least
    id, so that every node names the same run."""
    wanted = set(instants)
    found: dict[int, str] = {}
    for at, occ_id in rows:
        if at not in wanted:
            continue
        if own.get(at) == occ_id or at not in found or (
                found[at] != own.get(at) and occ_id < found[at]):
            found[at] = occ_id
    return found


def own_ids(job_id: str, instants: Sequence[int], request_key: str) -> dict[int, str]:
    """The occurrence id this request gives each instant."""
    return {at: identity.backfill_occurrence_id(job_id, at, request_key) for at in instants}


def own_queries(own: dict[int, str]) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements whose rows (one id each) are the request's own ids that exist."""
    ids = sorted(set(own.values()))
    return [(OWN_SQL.format(marks=",".join("?" * len(ids[i:i + 500]))), tuple(ids[i:i + 500]))
            for i in range(0, len(ids), 500)]


Fetch = Callable[[str, tuple[Any, ...]], Iterable[Sequence[Any]]]


def plan(fetch: Fetch, job_id: str, instants: Sequence[int], request_key: str
         ) -> tuple[dict[int, str], dict[int, str], set[str]]:
    """(each instant's own id, the covered instants with the runs covering them, the own
    ids that exist) for a backfill of `instants`, reading with `fetch(sql, params)` (a
    `sqlite3` execute-and-fetchall; the API runs the same statements on its reader)."""
    own = own_ids(job_id, instants, request_key)
    rows: list[tuple[int, str]] = []
    for sql, params in cover_queries(job_id, instants):
        rows.extend((r[0], r[1]) for r in fetch(sql, params))
    existing = {r[0] for sql, params in own_queries(own) for r in fetch(sql, params)}
    return own, covering(rows, instants, own), existing


def to_create(instants: Sequence[int], own: dict[int, str], covered: dict[int, str],
              existing: set[str]) -> list[int]:
    """The instants a backfill would make a run of: neither covered nor already its own
    (each once, in order)."""
    return [at for at in dict.fromkeys(instants)
            if at not in covered and own[at] not in existing]
