"""`too_slow`: a run still going past its job's `max_duration_s` is reported, not killed.

Unlike `max_runtime_s` (the sweeper times the attempt out), `max_duration_s` only raises
the alert `too_slow:<attempt id>` once the attempt has run that long (from its start, the
later of its lease and its instant, as `max_runtime_s` counts). It is resolved when
the attempt ends. This duty also resolves the run alerts of jobs that were deleted
(`too_fast`, `failures`, `too_slow`: state.run_alerts raises the first two at apply time).

Like the deadline duty it reads applied state and proposes leader-only commands stamped
with the clock; alert ids are deterministic, so a failover mid-pass changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable

from raftcron.cluster.proposer import Proposer
from raftcron.core.commands import Command, RaiseAlert, ResolveAlert
from raftcron.leader.alert_commands import propose_alert_change
from raftcron.leader.ticker import now_ms
from raftcron.state.db import ThreadReader

log = logging.getLogger("raftcron.run_bounds")

KIND = "too_slow"
PERIOD_S = 1.0
# Running attempts only (att_running: a few hundred at most), joined to their job's bound.
# A run's duration counts from its start: the one its worker reported (with its heartbeats),
# else the later of its lease and its instant (a run leased ahead starts at its instant).
RUN_START = "coalesce(a.started_ms, max(a.leased_ms, a.not_before_ms))"
SLOW_SQL = (
    f"SELECT a.id, a.occurrence_id, a.job_id, {RUN_START}, "
    "o.scheduled_for_ms, json_extract(j.spec, '$.max_duration_s') "
    "FROM attempts a INDEXED BY att_running JOIN jobs j ON j.id = a.job_id "
    "JOIN occurrences o ON o.id = a.occurrence_id "
    "WHERE a.status = 'running' AND json_extract(j.spec, '$.max_duration_s') IS NOT NULL "
    f"AND {RUN_START} + json_extract(j.spec, '$.max_duration_s') * 1000 "
    "<= ? AND NOT EXISTS (SELECT 1 FROM alerts x WHERE x.id = 'too_slow:' || a.id) "
    "ORDER BY a.id LIMIT 200"
)
OPEN_SQL = (
    "SELECT a.id, a.kind, j.id IS NOT NULL, t.status, t.finished_ms, "
    "coalesce(t.started_ms, max(t.leased_ms, t.not_before_ms)) FROM alerts a "
    "LEFT JOIN jobs j ON j.id = a.job_id "
    "LEFT JOIN attempts t ON a.kind = 'too_slow' AND t.id = substr(a.id, 10) "
    "WHERE a.status = 'open' AND a.kind IN ('too_slow', 'too_fast', 'failures') "
    "ORDER BY a.raised_ms LIMIT 1000"
)


def alert_id(attempt_id: str) -> str:
    return f"{KIND}:{attempt_id}"


class RunBounds:
    def __init__(self, epoch: int, proposer: Proposer,
                 open_reader: Callable[[], sqlite3.Connection],
                 clock: Callable[[], int] = now_ms) -> None:
        self.epoch = epoch
        self.proposer = proposer
        self.open_reader = open_reader
        self.clock = clock
        self.gate: Callable[[], bool] = lambda: True  # set by the node (leader.clock)
        self.raised = 0
        self.resolved = 0

    async def run(self) -> None:
        reader = ThreadReader(self.open_reader, "run-bounds")
        try:
            while True:
                if self.gate():  # a fast clock would call healthy runs slow
                    await self.check_once(reader)
                await asyncio.sleep(PERIOD_S)
        finally:
            reader.close()

    async def check_once(self, reader: ThreadReader) -> None:
        for cmd in await reader.run(self.plan, self.clock()):
            change = await propose_alert_change(self.proposer, cmd, "run bounds")
            if change == "raised":
                self.raised += 1
                log.warning("run alert %s: %s", cmd.alert_id,  # type: ignore[attr-defined]
                            cmd.message)  # type: ignore[attr-defined]
            elif change == "resolved":
                self.resolved += 1

    def plan(self, conn: sqlite3.Connection, now: int) -> list[Command]:
        out: list[Command] = []
        for attempt_id, occ_id, job_id, started, sched, max_s in conn.execute(SLOW_SQL, (now,)):
            out.append(RaiseAlert(
                self.epoch, now, alert_id(attempt_id), KIND, job_id=job_id,
                occurrence_id=occ_id, reason=KIND, scheduled_for_ms=sched,
                message=f"still running after {(now - started) / 1000:.0f} s; "
                        f"max_duration_s is {max_s}"))
        for aid, kind, job_exists, status, finished, started in conn.execute(OPEN_SQL):
            if not job_exists:
                msg = "the job was deleted"
            elif kind == KIND and status != "running":
                took = "" if finished is None or started is None else \
                    f" after {(finished - started) / 1000:.0f} s"
                msg = f"the run ended{took}" + (f" ({status})" if status else "")
            else:
                continue
            out.append(ResolveAlert(self.epoch, now, aid, message=msg))
        return out
