"""The ticker's brain: a heap of next fire instants and the claim items that are due.

Pure apart from the clock value it is handed, so it is tested without Raft. The leader
keeps one `TickPlanner` per epoch; the database stays the source of truth (it is
reloaded whenever a claim is rejected or a job changes).
"""

from __future__ import annotations

import heapq
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from raftcron.core import policy
from raftcron.core.ahead import HERD_SIZE, herd_claim_lead_ms
from raftcron.core.calendar import CompiledCalendar, excluding_calendar, skip_reason
from raftcron.core.schedule import jitter_offset_ms
from raftcron.core.schedule_set import FleetSchedules, ScheduleSet

LOOKAHEAD_MS = 1000
MAX_ITEMS_PER_CLAIM = 1000
# A herd (many jobs sharing one instant, e.g. midnight) is claimed further ahead, so its
# claims are committed before the instant instead of after it: this long, or, where the
# node lets a large herd lease further ahead (lease_ahead_herd_max_s), as long as its
# claims and leases take (core.ahead.herd_claim_lead_ms). Every job due before the herd's
# instant is claimed with it.
HERD_LOOKAHEAD_MS = 10_000
# A job that missed more instants than this (e.g. every second, cluster down for days) is
# accounted for over several rounds, so one job cannot monopolise a tick.
MAX_INSTANTS_PER_JOB_ROUND = 5000


@dataclass(slots=True)
class JobRecord:
    """What the planner keeps of one job: a new leader holds one per job (a million jobs
    are a million records), so only the fields planning reads are kept, not the spec."""

    id: str
    version: int
    paused: bool
    watermark_ms: int
    schedule: ScheduleSet
    calendars: tuple[str, ...]
    misfire_policy: str
    misfire_grace_s: int
    catch_up_max: int
    next_ms: int | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.next_ms = self._next_after(self.watermark_ms)

    @classmethod
    def from_spec(cls, job_id: str, version: int, paused: bool, watermark_ms: int,
                  spec: dict[str, Any]) -> JobRecord:
        return cls(job_id, version, paused, watermark_ms, ScheduleSet.from_spec(spec, job_id),
                   tuple(spec.get("calendars") or ()), sys.intern(spec["misfire_policy"]),
                   spec["misfire_grace_s"], spec["catch_up_max"])

    @classmethod
    def from_row(cls, row: tuple, schedules: FleetSchedules) -> JobRecord:
        """row: (id, version, paused, watermark_ms, schedule, misfire_policy,
        misfire_grace_s, catch_up_max, schedules, calendars) as `ticker.JOB_ROW_SQL`
        reads them: the schedules and calendars as JSON text, the last two null for a job
        without them."""
        (job_id, version, paused, watermark_ms, schedule_json, misfire_policy, grace_s,
         catch_up_max, schedules_json, calendars_json) = row
        return cls(job_id, version, bool(paused), watermark_ms,
                   schedules.get(schedule_json, schedules_json, job_id),
                   tuple(json.loads(calendars_json)) if calendars_json else (),
                   sys.intern(misfire_policy), grace_s, catch_up_max)

    def _next_after(self, after_ms: int) -> int | None:
        """The next instant of the union of the job's schedules (within their bounds)."""
        return self.schedule.next_after(after_ms)


class TickPlanner:
    def __init__(self, lookahead_ms: int = LOOKAHEAD_MS, herd_size: int = HERD_SIZE,
                 herd_max_ms: int = HERD_LOOKAHEAD_MS) -> None:
        self.lookahead_ms = lookahead_ms
        # How far ahead a herd too large for HERD_LOOKAHEAD_MS may be leased (the node's
        # lease_ahead_herd_max_s); it is claimed that far ahead plus its claims' time.
        self.herd_max_ms = herd_max_ms
        self.herd_size = herd_size
        self.jobs: dict[str, JobRecord] = {}
        self._heap: list[tuple[int, str, int]] = []  # (next_ms, job_id, version)
        self.per_instant: dict[int, int] = {}  # live jobs whose next instant is this one
        # The replicated calendars by name (the ticker reloads them when one changes).
        self.calendars: dict[str, CompiledCalendar] = {}
        self.held = 0  # jobs the last `due` held back for a calendar not loaded

    def _count(self, next_ms: int | None, delta: int) -> None:
        if next_ms is None:
            return
        n = self.per_instant.get(next_ms, 0) + delta
        if n > 0:
            self.per_instant[next_ms] = n
        else:
            self.per_instant.pop(next_ms, None)

    def _push(self, rec: JobRecord) -> None:
        if rec.next_ms is not None:
            heapq.heappush(self._heap, (rec.next_ms, rec.id, rec.version))
            self._count(rec.next_ms, +1)

    def upsert(self, rec: JobRecord) -> None:
        self.remove(rec.id)
        self.jobs[rec.id] = rec
        self._push(rec)

    def remove(self, job_id: str) -> None:
        old = self.jobs.pop(job_id, None)
        if old is not None:
            self._count(old.next_ms, -1)

    def horizon(self, now_ms: int) -> int:
        """How far ahead to claim: the lookahead, or up to a herd's instant."""
        horizon = now_ms + self.lookahead_ms
        for instant, n in self.per_instant.items():
            if (n >= self.herd_size and horizon < instant
                    and instant - self._claim_lead_ms(n) <= now_ms):
                horizon = instant
        return horizon

    def _claim_lead_ms(self, herd: int) -> int:
        return herd_claim_lead_ms(herd, HERD_LOOKAHEAD_MS, self.herd_max_ms)

    def next_wakeup_ms(self) -> int | None:
        """When the next claim is due (the next instant minus the lookahead)."""
        while self._heap:
            next_ms, job_id, version = self._heap[0]
            rec = self.jobs.get(job_id)
            if rec is None or rec.version != version or rec.next_ms != next_ms:
                heapq.heappop(self._heap)  # stale entry
                continue
            herds = [i - self._claim_lead_ms(n)
                     for i, n in self.per_instant.items() if n >= self.herd_size]
            return min([next_ms - self.lookahead_ms, *herds])
        return None

    def due(self, now_ms: int, limit: int = 100_000) -> list[list[Any]]:
        """Claim items for every instant at or before now + lookahead, with decisions.

        Advances each job's watermark in memory as if the claim succeeded; the caller
        reloads a job from the database if its claim is rejected.
        """
        horizon = self.horizon(now_ms)
        items: list[list[Any]] = []
        held: list[JobRecord] = []
        while self._heap and self._heap[0][0] <= horizon and len(items) < limit:
            next_ms, job_id, version = heapq.heappop(self._heap)
            rec = self.jobs.get(job_id)
            if rec is None or rec.version != version or rec.next_ms != next_ms:
                continue
            self._count(rec.next_ms, -1)
            if not self.holds_calendars_of(rec):
                held.append(rec)
                continue
            items.extend(self._job_items(rec, now_ms, horizon))
            self._push(rec)
        for rec in held:
            self._push(rec)
        self.held = len(held)
        return items

    def holds_calendars_of(self, rec: JobRecord) -> bool:
        """Whether every calendar the job names is loaded. A job naming one that is not
        (the ticker has not read it yet) is held, not claimed: fail closed rather than fire
        an instant that calendar may exclude. Apply refuses a job naming a calendar that
        does not exist and a delete of one a job names, so the hold is brief."""
        return all(name in self.calendars for name in rec.calendars)

    def _job_items(self, rec: JobRecord, now_ms: int, horizon: int) -> list[list[Any]]:
        instants: list[int] = []
        t = rec.next_ms
        while t is not None and t <= horizon and len(instants) < MAX_INSTANTS_PER_JOB_ROUND:
            instants.append(t)
            t = rec._next_after(t)
        rec.next_ms = t
        if not instants:
            return []
        rec.watermark_ms = instants[-1]
        grace_ms = rec.misfire_grace_s * 1000
        excluded = self._excluded(rec, instants) if rec.calendars and not rec.paused else {}
        eligible = [i for i in instants if i not in excluded] if excluded else instants
        if rec.paused:
            plan = [(i, policy.SKIP_PAUSED) for i in instants]
        elif t is not None and now_ms - t > grace_ms:
            # More missed instants follow in a later round: the ones to fire (the latest)
            # are there, so everything in this round is a misfire.
            plan = [(i, policy.SKIP_MISFIRE) for i in eligible]
        else:
            # An excluded instant is not a missed one: misfire policy (run_once fires the
            # latest missed instant) chooses among the instants the calendars allow.
            plan = policy.plan_misfires(
                eligible, now_ms, rec.misfire_policy, rec.misfire_grace_s, rec.catch_up_max,
            )
        if excluded:
            plan = sorted(plan + [(i, skip_reason(name)) for i, name in excluded.items()])
        sched = rec.schedule
        single = sched.is_single
        items = []
        for t_ms, decision in plan:
            jitter_s = sched.jitter_s_at(t_ms)
            item = [rec.id, rec.version, t_ms,
                    t_ms + jitter_offset_ms(rec.id, t_ms // 1000, jitter_s) if jitter_s
                    else t_ms, decision]
            if not single:
                item.append(sched.matched_names(t_ms))  # which schedules named the instant
            items.append(item)
        return items

    def _excluded(self, rec: JobRecord, instants: list[int]) -> dict[int, str]:
        """The instants one of the job's calendars excludes, with that calendar's name."""
        cals = [self.calendars[name] for name in rec.calendars]
        out: dict[int, str] = {}
        for t in instants:
            name = excluding_calendar(cals, t)
            if name is not None:
                out[t] = name
        return out
