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

A job with `start_deadline_s` is judged the same way at T + start_deadline_s, under the
alert kind `not_started` (id `not_started:{occurrence_id}`, reason `not_started`): raised
when no attempt of the instant was leased by then (never claimed, skipped by the misfire
policy, still pending); raised and resolved at once when the first lease came after it;
resolved once an attempt starts, the occurrence ends, a later one succeeds or the job is
gone. With `alert_after_failures` set, `failed` deadline verdicts are left to the job's
failure threshold (state.run_alerts): one alert per streak, not one per failure.

For `missed`, `late` and `not_started`, the raise carries the deadline, and apply decides
from the replicated availability whether the cluster's own trouble was the cause
(`cause: "cluster_unavailable"`, see state.availability).

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
from typing import Any

from raftcron.cluster.proposer import Proposer
from raftcron.core.calendar import CompiledCalendar, without_excluded
from raftcron.core.commands import Command, RaiseAlert, ResolveAlert
from raftcron.core.identity import job_scheduled_occurrences_after, scheduled_occurrence_id
from raftcron.core.model import Job
from raftcron.core.protocol import BASE_LEVEL, FIELD_LEVELS
from raftcron.leader.alert_commands import propose_alert_change
from raftcron.leader.ticker import now_ms
from raftcron.state.calendars import CompiledCalendars
from raftcron.state.db import ThreadReader

CAUSE_LEVEL = FIELD_LEVELS[(RaiseAlert, "deadline_ms")].level

log = logging.getLogger("raftcron.deadlines")

KIND = "deadline"
START_KIND = "not_started"
PERIOD_S = 1.0
START_DELAY_S = 1.0
LOOKBACK_MS = 6 * 3600 * 1000
ROWS_PER_JOB = 500
UNCLAIMED_PER_JOB = 100
MAX_COMMANDS_PER_PASS = 200


def jobs_sql(field: str) -> str:
    """Jobs with a deadline field set (each has a partial index, see schema.sql)."""
    return (f"SELECT id, paused, watermark_ms, spec FROM jobs "
            f"WHERE json_extract(spec, '$.{field}') IS NOT NULL")


# Both read a job's scheduled occurrences as a range of ids, in the order of their instants
# (core.identity): rows_sql from the start of the window on, open_sql from the alerted
# occurrence on to the first later success.
def rows_sql(kind: str) -> str:
    return (
        "SELECT o.id, o.scheduled_for_ms, o.status, o.reason, o.finished_ms, "
        "(SELECT count(*) FROM attempts a WHERE a.id >= o.id || '~' AND a.id < o.id || char(127) "
        " AND a.leased_ms IS NOT NULL), "
        "(SELECT min(a.leased_ms) FROM attempts a WHERE a.id >= o.id || '~' "
        " AND a.id < o.id || char(127)) "
        "FROM occurrences o WHERE o.id >= ? AND o.id < ? AND o.kind = 'scheduled' "
        "AND o.scheduled_for_ms > ? AND o.scheduled_for_ms <= ? "
        f"AND NOT EXISTS (SELECT 1 FROM alerts x WHERE x.id = '{kind}:' || o.id) "
        "ORDER BY o.id LIMIT ?"
    )


def open_sql(kind: str) -> str:
    return (
        "SELECT a.id, a.job_id, o.status, o.scheduled_for_ms, j.id IS NOT NULL, "
        "(SELECT l.scheduled_for_ms FROM occurrences l "
        " WHERE l.id > a.occurrence_id AND l.id < a.job_id || '@:' "
        " AND +l.status = 'succeeded' ORDER BY l.id LIMIT 1), "  # +: not by the status index
        "(SELECT count(*) FROM attempts t WHERE t.id >= a.occurrence_id || '~' "
        " AND t.id < a.occurrence_id || char(127) AND t.leased_ms IS NOT NULL) "
        "FROM alerts a LEFT JOIN occurrences o ON o.id = a.occurrence_id "
        "LEFT JOIN jobs j ON j.id = a.job_id "
        f"WHERE a.status = 'open' AND a.kind = '{kind}' ORDER BY a.raised_ms LIMIT 1000"
    )


JOBS_SQL = jobs_sql("deadline_s")
ROWS_SQL = rows_sql(KIND)
OPEN_SQL = open_sql(KIND)
START_JOBS_SQL = jobs_sql("start_deadline_s")
START_ROWS_SQL = rows_sql(START_KIND)
START_OPEN_SQL = open_sql(START_KIND)


def alert_id(occurrence_id: str, kind: str = KIND) -> str:
    return f"{kind}:{occurrence_id}"


def _not_excluded(instants: list[int], names: list[str],
                  calendars: dict[str, CompiledCalendar]) -> list[int]:
    """The unclaimed instants the job's calendars do not exclude: an excluded instant was
    never due, so it is not missed (the ticker claims it as skipped once it runs). A
    calendar that cannot be read (absent: apply refuses deleting one a job lists) excludes
    nothing, so an alert is raised rather than silently dropped."""
    cals = [calendars[name] for name in names if name in calendars]
    return without_excluded(instants, cals)[0]


@dataclass(frozen=True)
class Verdict:
    """What to do about one overdue instant: reason None means it met its deadline.
    `resolved`: raise and resolve at once with this message (it is already over)."""

    reason: str | None
    message: str = ""
    resolved: str | None = None


def judge(status: str | None, skip_reason: str | None, finished_ms: int | None,
          leased: int, deadline_at_ms: int) -> Verdict:
    """Pure decision for an instant whose deadline has passed (status None: unclaimed)."""
    if status is None:
        return Verdict("missed", "the instant was not claimed by its deadline")
    if status == "succeeded":
        if finished_ms is not None and finished_ms > deadline_at_ms:
            return Verdict("late", f"succeeded {(finished_ms - deadline_at_ms) / 1000:.1f} s "
                                   "after its deadline", resolved="succeeded late")
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


def judge_start(status: str | None, skip_reason: str | None, first_leased_ms: int | None,
                start_by_ms: int) -> Verdict:
    """Pure decision for an instant whose start deadline has passed (status None:
    unclaimed): did an attempt of it start (was leased) by `start_by_ms`?"""
    if status is None:
        return Verdict("not_started", "the instant was not claimed by its start deadline")
    if status == "skipped":
        if skip_reason == "misfire":
            return Verdict("not_started", "skipped by the misfire policy")
        return Verdict(None)
    if status == "cancelled":
        return Verdict(None)
    if first_leased_ms is not None:
        if first_leased_ms > start_by_ms:
            late_s = (first_leased_ms - start_by_ms) / 1000
            return Verdict("not_started", f"started {late_s:.1f} s after its start deadline",
                           resolved="started late")
        return Verdict(None)
    return Verdict("not_started", "no attempt was leased by its start deadline")


@dataclass(frozen=True)
class Bound:
    """One deadline a job may set: the job field (seconds after the instant), the alert
    kind it raises, its queries and its judgement of one instant."""

    field: str
    kind: str
    jobs_sql: str
    rows_sql: str
    open_sql: str
    judge: Callable[[tuple, int, dict[str, Any]], Verdict]


def _judge_success(row: tuple, deadline_at_ms: int, spec: dict[str, Any]) -> Verdict:
    _, _, status, reason, finished, leased, _ = row
    verdict = judge(status, reason, finished, leased, deadline_at_ms)
    if verdict.reason == "failed" and spec.get("alert_after_failures") is not None:
        return Verdict(None)  # the failure threshold speaks for failures
    return verdict


def _judge_start(row: tuple, start_by_ms: int, spec: dict[str, Any]) -> Verdict:
    _, _, status, reason, _, _, first_leased = row
    return judge_start(status, reason, first_leased, start_by_ms)


SUCCESS = Bound("deadline_s", KIND, JOBS_SQL, ROWS_SQL, OPEN_SQL, _judge_success)
START = Bound("start_deadline_s", START_KIND, START_JOBS_SQL, START_ROWS_SQL, START_OPEN_SQL,
              _judge_start)
BOUNDS = (SUCCESS, START)
UNCLAIMED_ROW = (None, None, None, None, None, 0, None)


class Deadlines:
    def __init__(self, epoch: int, proposer: Proposer,
                 open_reader: Callable[[], sqlite3.Connection],
                 clock: Callable[[], int] = now_ms, lookback_ms: int = LOOKBACK_MS,
                 calendars: CompiledCalendars | None = None) -> None:
        self.epoch = epoch
        self.proposer = proposer
        self.open_reader = open_reader
        self.clock = clock
        # Whether this node's clock may be trusted (see leader.clock); set by the node.
        self.gate: Callable[[], bool] = lambda: True
        # The protocol level the cluster may be written at (cluster.levels); set by the
        # node. Below CAUSE_LEVEL an alert carries no deadline (no cause is judged).
        self.level: Callable[[], int] = lambda: BASE_LEVEL
        self.lookback_ms = lookback_ms
        # Compiled calendars, recompiled only when one changed (the node's duties pass
        # the ticker's, so each is compiled once per change).
        self.calendar_cache = calendars or CompiledCalendars()
        # job id -> nominal instant (ms) through which overdue instants were judged, per
        # bound kind (`cursor` is the success deadline's, `cursors` every bound's).
        self.cursors: dict[str, dict[str, int]] = {b.kind: {} for b in BOUNDS}
        self.cursor = self.cursors[KIND]
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
        for bound in BOUNDS:
            commands, cursors = await reader.run(self._plan, now, bound)
            for cmd in commands:
                await self._propose(cmd)
            self.cursors[bound.kind].update(cursors)

    async def _propose(self, cmd: Command) -> None:
        change = await propose_alert_change(self.proposer, cmd, "deadline")
        if change == "raised" and isinstance(cmd, RaiseAlert):
            self.raised += 1
            log.warning("deadline alert %s: %s (%s)", cmd.alert_id, cmd.reason, cmd.message)
        elif change == "resolved":
            self.resolved += 1

    # --- planning (reader thread) ----------------------------------------------------------

    def _plan(self, conn: sqlite3.Connection, now: int, bound: Bound = SUCCESS
              ) -> tuple[list[Command], dict[str, int]]:
        commands: list[Command] = []
        cursors: dict[str, int] = {}
        cursor = self.cursors[bound.kind]
        calendars: dict[str, CompiledCalendar] | None = None  # loaded when a job names one
        for job_id, paused, watermark, spec_text in conn.execute(bound.jobs_sql).fetchall():
            if len(commands) >= MAX_COMMANDS_PER_PASS:
                break
            spec = json.loads(spec_text)
            deadline_ms = int(spec[bound.field]) * 1000
            upto = now - deadline_ms
            start = cursor.get(job_id, now - self.lookback_ms)
            if upto <= start:
                continue
            lo, hi = job_scheduled_occurrences_after(job_id, start)
            rows = conn.execute(bound.rows_sql, (lo, hi, start, upto, ROWS_PER_JOB)).fetchall()
            through = upto if len(rows) < ROWS_PER_JOB else rows[-1][1]
            for row in rows:
                occ_id, t = row[0], row[1]
                commands += self._verdict_commands(
                    now, job_id, occ_id, t, t + deadline_ms,
                    bound.judge(row, t + deadline_ms, spec), bound.kind)
            if not paused and watermark < through:
                instants = self._unclaimed(spec, max(start, watermark), through)
                if spec.get("calendars"):
                    if calendars is None:
                        calendars = self.calendar_cache.load(conn)
                    instants = _not_excluded(instants, spec["calendars"], calendars)
                if len(instants) >= UNCLAIMED_PER_JOB:
                    through = instants[-1]
                for t in instants:
                    occ_id = scheduled_occurrence_id(job_id, t)
                    if conn.execute("SELECT 1 FROM alerts WHERE id = ?",
                                    (alert_id(occ_id, bound.kind),)).fetchone():
                        continue
                    commands += self._verdict_commands(
                        now, job_id, occ_id, t, t + deadline_ms,
                        bound.judge(UNCLAIMED_ROW, t + deadline_ms, spec), bound.kind)
            cursors[job_id] = through
        commands += self._resolutions(conn, now, bound)
        return commands, cursors

    def _unclaimed(self, spec: dict, after_ms: int, through_ms: int) -> list[int]:
        """Nominal instants in (after_ms, through_ms] of the union of the job's schedules
        (within their bounds), capped."""
        fires = Job.from_spec(spec).fire_times().iter_after(after_ms, through_ms)
        return list(itertools.islice(fires, UNCLAIMED_PER_JOB))

    def _verdict_commands(self, now: int, job_id: str, occ_id: str, t: int, deadline_at: int,
                          verdict: Verdict, kind: str = KIND) -> list[Command]:
        if verdict.reason is None:
            return []
        aid = alert_id(occ_id, kind)
        raise_cmd = RaiseAlert(self.epoch, now, aid, kind, job_id=job_id, occurrence_id=occ_id,
                               reason=verdict.reason, scheduled_for_ms=t,
                               message=verdict.message,
                               deadline_ms=deadline_at if self.level() >= CAUSE_LEVEL else None)
        if verdict.resolved is not None:
            return [raise_cmd, ResolveAlert(self.epoch, now, aid, message=verdict.resolved)]
        return [raise_cmd]

    def _resolutions(self, conn: sqlite3.Connection, now: int, bound: Bound = SUCCESS
                     ) -> list[Command]:
        out: list[Command] = []
        for aid, _job, status, t, job_exists, last_success, started in conn.execute(
                bound.open_sql):
            if status == "succeeded":
                msg = "the occurrence succeeded"
            elif not job_exists:
                msg = "the job was deleted"
            elif t is not None and last_success is not None and last_success > t:
                msg = "a later occurrence of the job succeeded"
            elif bound is START and started:
                msg = "an attempt started"
            elif bound is START and status in ("failed", "cancelled", "skipped"):
                msg = f"the occurrence ended {status}"
            else:
                continue
            out.append(ResolveAlert(self.epoch, now, aid, message=msg))
        return out
