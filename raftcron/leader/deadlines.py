"""Dead-man's switch: alerts when a job's scheduled instant has no success by its deadline.

For a job with `deadline_s`, the occurrence for instant T must have succeeded by
T + deadline_s. Once that moment has passed the leader looks at the instant once and,
if it did not succeed in time, commits `RaiseAlert` with the deterministic id
`deadline:{occurrence_id}` and one of these reasons:

- `missed`: never ran — the instant was never claimed (the ticker did not run), it was
  skipped by the misfire policy, or it is still pending without any attempt leased;
- `failed`: it failed (or an attempt failed and a retry is still pending);
- `running_too_long`: an attempt is still running at the deadline;
- `late`: it succeeded, but after the deadline. A late success is raised and resolved at
  once, so it stays in the alert history without paging anyone twice.

Instants skipped because the job was paused, or by the overlap policy (another run of the
job was in progress), and cancelled (replaced) runs raise nothing. Only `scheduled`
occurrences have deadlines.

An open deadline alert is resolved when its occurrence succeeds, when a later scheduled
occurrence of the same job succeeded (the job checked in again), or when the job is gone.

The duty only reads applied state and proposes leader-only commands stamped with the
clock; whether an alert row already exists is re-checked on every pass, and alert ids are
deterministic, so a failover in the middle of a pass changes nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from raftcron.cluster.proposer import Proposer
from raftcron.core.commands import Command, RaiseAlert, ResolveAlert
from raftcron.core.identity import job_scheduled_occurrences_after, scheduled_occurrence_id
from raftcron.core.model import Job
from raftcron.leader.alert_commands import propose_alert_change
from raftcron.leader.ticker import now_ms
from raftcron.state.db import ThreadReader

log = logging.getLogger("raftcron.deadlines")

KIND = "deadline"
PERIOD_S = 1.0
START_DELAY_S = 1.0
LOOKBACK_MS = 6 * 3600 * 1000
ROWS_PER_JOB = 500
UNCLAIMED_PER_JOB = 100
MAX_COMMANDS_PER_PASS = 200

JOBS_SQL = (
    "SELECT id, paused, watermark_ms, spec FROM jobs "
    "WHERE json_extract(spec, '$.deadline_s') IS NOT NULL"
)
# Both read a job's scheduled occurrences as a range of ids, in the order of their instants
# (core.identity): ROWS_SQL from the start of the window on, OPEN_SQL from the alerted
# occurrence on to the first later success.
ROWS_SQL = (
    "SELECT o.id, o.scheduled_for_ms, o.status, o.reason, o.finished_ms, "
    "(SELECT count(*) FROM attempts a WHERE a.id >= o.id || '~' AND a.id < o.id || char(127) "
    " AND a.leased_ms IS NOT NULL) "
    "FROM occurrences o WHERE o.id >= ? AND o.id < ? AND o.kind = 'scheduled' "
    "AND o.scheduled_for_ms > ? AND o.scheduled_for_ms <= ? "
    "AND NOT EXISTS (SELECT 1 FROM alerts x WHERE x.id = 'deadline:' || o.id) "
    "ORDER BY o.id LIMIT ?"
)
OPEN_SQL = (
    "SELECT a.id, a.job_id, o.status, o.scheduled_for_ms, j.id IS NOT NULL, "
    "(SELECT l.scheduled_for_ms FROM occurrences l "
    " WHERE l.id > a.occurrence_id AND l.id < a.job_id || '@:' "
    " AND +l.status = 'succeeded' ORDER BY l.id LIMIT 1) "  # +: not by the status index
    "FROM alerts a LEFT JOIN occurrences o ON o.id = a.occurrence_id "
    "LEFT JOIN jobs j ON j.id = a.job_id "
    "WHERE a.status = 'open' AND a.kind = 'deadline' ORDER BY a.raised_ms LIMIT 1000"
)


def alert_id(occurrence_id: str) -> str:
    return f"{KIND}:{occurrence_id}"


@dataclass(frozen=True)
class Verdict:
    """What to do about one overdue instant: reason None means it met its deadline."""

    reason: str | None
    message: str = ""


def judge(status: str | None, skip_reason: str | None, finished_ms: int | None,
          leased: int, deadline_at_ms: int) -> Verdict:
    """Pure decision for an instant whose deadline has passed (status None: unclaimed)."""
    if status is None:
        return Verdict("missed", "the instant was not claimed by its deadline")
    if status == "succeeded":
        if finished_ms is not None and finished_ms > deadline_at_ms:
            return Verdict("late", f"succeeded {(finished_ms - deadline_at_ms) / 1000:.1f} s "
                                   "after its deadline")
        return Verdict(None)
    if status == "skipped":
        if skip_reason == "misfire":
            return Verdict("missed", "skipped by the misfire policy")
        return Verdict(None)
    if status == "cancelled":
        return Verdict(None)
    if status == "failed":
        return Verdict("failed", f"failed: {skip_reason}" if skip_reason else "failed")
    if status == "running":
        return Verdict("running_too_long", "still running at its deadline")
    if leased:
        return Verdict("failed", "an attempt failed; a retry is pending")
    return Verdict("missed", "no attempt ran before the deadline")


class Deadlines:
    def __init__(self, epoch: int, proposer: Proposer,
                 open_reader: Callable[[], sqlite3.Connection],
                 clock: Callable[[], int] = now_ms, lookback_ms: int = LOOKBACK_MS) -> None:
        self.epoch = epoch
        self.proposer = proposer
        self.open_reader = open_reader
        self.clock = clock
        # Whether this node's clock may be trusted (see leader.clock); set by the node.
        self.gate: Callable[[], bool] = lambda: True
        self.lookback_ms = lookback_ms
        # job id -> nominal instant (ms) through which overdue instants were judged.
        self.cursor: dict[str, int] = {}
        self.raised = 0
        self.resolved = 0

    async def run(self) -> None:
        await asyncio.sleep(START_DELAY_S)  # let the ticker claim what is due first
        reader = ThreadReader(self.open_reader, "deadlines")
        try:
            while True:
                if self.gate():  # a fast clock would declare runs missed too early
                    await self.check_once(reader)
                await asyncio.sleep(PERIOD_S)
        finally:
            reader.close()

    async def check_once(self, reader: ThreadReader) -> None:
        now = self.clock()
        commands, cursors = await reader.run(self._plan, now)
        for cmd in commands:
            await self._propose(cmd)
        self.cursor.update(cursors)

    async def _propose(self, cmd: Command) -> None:
        change = await propose_alert_change(self.proposer, cmd, "deadline")
        if change == "raised" and isinstance(cmd, RaiseAlert):
            self.raised += 1
            log.warning("deadline alert %s: %s (%s)", cmd.alert_id, cmd.reason, cmd.message)
        elif change == "resolved":
            self.resolved += 1

    # --- planning (reader thread) ----------------------------------------------------------

    def _plan(self, conn: sqlite3.Connection, now: int
              ) -> tuple[list[Command], dict[str, int]]:
        commands: list[Command] = []
        cursors: dict[str, int] = {}
        for job_id, paused, watermark, spec_text in conn.execute(JOBS_SQL).fetchall():
            if len(commands) >= MAX_COMMANDS_PER_PASS:
                break
            spec = json.loads(spec_text)
            deadline_ms = int(spec["deadline_s"]) * 1000
            upto = now - deadline_ms
            start = self.cursor.get(job_id, now - self.lookback_ms)
            if upto <= start:
                continue
            lo, hi = job_scheduled_occurrences_after(job_id, start)
            rows = conn.execute(ROWS_SQL, (lo, hi, start, upto, ROWS_PER_JOB)).fetchall()
            through = upto if len(rows) < ROWS_PER_JOB else rows[-1][1]
            for occ_id, t, status, reason, finished, leased in rows:
                commands += self._verdict_commands(
                    now, job_id, occ_id, t, judge(status, reason, finished, leased,
                                                  t + deadline_ms))
            if not paused and watermark < through:
                instants = self._unclaimed(spec, max(start, watermark), through)
                if len(instants) >= UNCLAIMED_PER_JOB:
                    through = instants[-1]
                for t in instants:
                    occ_id = scheduled_occurrence_id(job_id, t)
                    if conn.execute("SELECT 1 FROM alerts WHERE id = ?",
                                    (alert_id(occ_id),)).fetchone():
                        continue
                    commands += self._verdict_commands(
                        now, job_id, occ_id, t, judge(None, None, None, 0, t + deadline_ms))
            cursors[job_id] = through
        commands += self._resolutions(conn, now)
        return commands, cursors

    def _unclaimed(self, spec: dict, after_ms: int, through_ms: int) -> list[int]:
        """Nominal instants in (after_ms, through_ms] of the union of the job's schedules
        (within their bounds), capped."""
        fires = Job.from_spec(spec).fire_times().iter_after(after_ms, through_ms)
        return list(itertools.islice(fires, UNCLAIMED_PER_JOB))

    def _verdict_commands(self, now: int, job_id: str, occ_id: str, t: int,
                          verdict: Verdict) -> list[Command]:
        if verdict.reason is None:
            return []
        aid = alert_id(occ_id)
        raise_cmd = RaiseAlert(self.epoch, now, aid, KIND, job_id=job_id, occurrence_id=occ_id,
                               reason=verdict.reason, scheduled_for_ms=t,
                               message=verdict.message)
        if verdict.reason == "late":
            return [raise_cmd, ResolveAlert(self.epoch, now, aid, message="succeeded late")]
        return [raise_cmd]

    def _resolutions(self, conn: sqlite3.Connection, now: int) -> list[Command]:
        out: list[Command] = []
        for aid, _job, status, t, job_exists, last_success in conn.execute(OPEN_SQL):
            if status == "succeeded":
                msg = "the occurrence succeeded"
            elif not job_exists:
                msg = "the job was deleted"
            elif t is not None and last_success is not None and last_success > t:
                msg = "a later occurrence of the job succeeded"
            else:
                continue
            out.append(ResolveAlert(self.epoch, now, aid, message=msg))
        return out
