"""The check just before a run leased ahead starts, answered from a read, not a commit.

A worker that leased runs ahead sends one `POST /v1/heartbeats` with `before_start: true`
for the runs about to start, shortly before their instant: a run cancelled, taken back, or
whose job was paused since it was leased must not start. That check used to be a committed
heartbeat: at a herd (tens of thousands of runs due at one instant) those commits, one row
update per run on every node, were what the starts waited for.

The check only needs to see every write acknowledged before it, so it is a barrier (one
empty commit) followed by a read of this node's state. Only the runs that need a write go
through the committed `Heartbeat(before_start=True)`: a run whose job was paused (the commit
records the skip), a lease still awaiting its acknowledgement (the commit acknowledges it),
and one about to expire (the commit extends it). The answers
are the ones the committed heartbeat gives (`state.attempts.before_start_answer` shares the
apply's own verdict), so a worker cannot tell which path answered.
"""

from __future__ import annotations

from typing import Any

from raftcron.api.context import ApiContext
from raftcron.core import commands as c
from raftcron.state.attempt_rows import ATT_COLS, N_ATT_COLS
from raftcron.state.attempts import before_start_answer

# One read per batch of the API's largest (workers.MAX_BATCH); SQLite's default limit on
# bound parameters is far above it.
READ_CHUNK = 1000


async def check_before_start(ctx: ApiContext, worker_id: str, pairs: list[list[Any]],
                             queues: list[str] | None) -> list[dict[str, Any]]:
    """Answer a `before_start` heartbeat: one result per pair, in order."""
    # The same level rule as the committed check, even when nothing is committed.
    await ctx.require_level(c.Heartbeat(0, worker_id, pairs, queues, True))
    await ctx.barrier()
    now_ms = ctx.stamp_ms()
    attempts = await _attempts(ctx, [p[0] for p in pairs])
    answers: dict[int, dict[str, Any]] = {}
    to_commit: list[int] = []
    for i, (attempt_id, token) in enumerate(pairs):
        att, paused = attempts.get(attempt_id, (None, False))
        answer = before_start_answer(att, paused, token, worker_id, queues, now_ms)
        if answer is None:
            to_commit.append(i)
        else:
            answers[i] = {"attempt_id": attempt_id, **answer}
    if to_commit:
        committed = await ctx.propose_raw(c.Heartbeat(
            now_ms, worker_id, [pairs[i] for i in to_commit], queues, True))
        # The apply answers its pairs in order, one result each.
        answers.update(zip(to_commit, committed["results"], strict=True))
    return [answers[i] for i in range(len(pairs))]


# Each attempt's columns (state.attempt_rows.ATT_COLS) and whether its job is paused, in one read.
_ROW_SQL = ("SELECT " + ", ".join(f"a.{col.strip()}" for col in ATT_COLS.split(","))
            + ", coalesce(j.paused, 0) FROM attempts a LEFT JOIN jobs j ON j.id = a.job_id "
            "WHERE a.id IN ({marks})")


async def _attempts(ctx: ApiContext, ids: list[str]) -> dict[str, tuple[tuple, bool]]:
    """attempt id -> (its ATT_COLS row, whether its job is paused)."""
    unique = list(dict.fromkeys(ids))
    found: dict[str, tuple[tuple, bool]] = {}
    for i in range(0, len(unique), READ_CHUNK):
        chunk = unique[i:i + READ_CHUNK]
        for row in await ctx.select_all(_ROW_SQL.format(marks=",".join("?" * len(chunk))),
                                        chunk, N_ATT_COLS + 1):
            found[row[0]] = (row[:-1], bool(row[-1]))
    return found
