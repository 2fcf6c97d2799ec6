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
from raftcron.state.attempts import A_JOB, ATT_COLS, before_start_answer

# SQLite's default limit on bound parameters is far above this; it keeps each read short.
READ_CHUNK = 500


async def check_before_start(ctx: ApiContext, worker_id: str, pairs: list[list[Any]],
                             queues: list[str] | None) -> list[dict[str, Any]]:
    """Answer a `before_start` heartbeat: one result per pair, in order."""
    # The same level rule as the committed check, even when nothing is committed.
    await ctx.require_level(c.Heartbeat(0, worker_id, pairs, queues, True))
    await ctx.barrier()
    now_ms = ctx.stamp_ms()
    attempts = await _attempts(ctx, [p[0] for p in pairs])
    paused = await _paused_jobs(ctx, {att[A_JOB] for att in attempts.values()})
    answers: dict[int, dict[str, Any]] = {}
    to_commit: list[int] = []
    for i, (attempt_id, token) in enumerate(pairs):
        att = attempts.get(attempt_id)
        answer = before_start_answer(att, att is not None and att[A_JOB] in paused, token,
                                     worker_id, queues, now_ms)
        if answer is None:
            to_commit.append(i)
        else:
            answers[i] = {"attempt_id": attempt_id, **answer}
    if to_commit:
        committed = await ctx.propose_raw(c.Heartbeat(
            ctx.stamp_ms(), worker_id, [pairs[i] for i in to_commit], queues, True))
        # The apply answers its pairs in order, one result each.
        answers.update(zip(to_commit, committed["results"], strict=True))
    return [answers[i] for i in range(len(pairs))]


async def _attempts(ctx: ApiContext, ids: list[str]) -> dict[str, tuple]:
    unique = list(dict.fromkeys(ids))
    found: dict[str, tuple] = {}
    for i in range(0, len(unique), READ_CHUNK):
        chunk = unique[i:i + READ_CHUNK]
        rows = await ctx.fetchall(
            f"SELECT {ATT_COLS} FROM attempts WHERE id IN ({','.join('?' * len(chunk))})",
            chunk)
        found.update({row[0]: row for row in rows})
    return found


async def _paused_jobs(ctx: ApiContext, job_ids: set[str]) -> set[str]:
    ids = sorted(job_ids)
    paused: set[str] = set()
    for i in range(0, len(ids), READ_CHUNK):
        chunk = ids[i:i + READ_CHUNK]
        rows = await ctx.fetchall(
            f"SELECT id FROM jobs WHERE paused != 0 AND id IN ({','.join('?' * len(chunk))})",
            chunk)
        paused.update(row[0] for row in rows)
    return paused
