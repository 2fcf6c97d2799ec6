"""The union of a job's schedules: the one place that answers "when does this job fire?".

A job has one schedule or several (`schedules`). An occurrence is still (job, instant):
two schedules naming the same instant make one fire instant, and `matching` tells which
schedules named it. Every reader of fire times (the planner, next fire times, the job
page, the herd chart, deadlines, backfill) goes through `ScheduleSet`, so they all read
the union. Each member keeps its own zone, DST policy, jitter and start/end bounds.

Pure: no clock, no I/O. It only calls the public functions of core.schedule.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from raftcron.core.one_time import IntervalSchedule, OnceSchedule, compile_kind
from raftcron.core.schedule import CronSchedule, hash_resolution

# 9999-12-31T23:59:59Z: no fire instant lies after it (the schedule engine computes in
# years up to 9999; asked for an instant after this second it would fail).
LAST_SECOND = 253_402_300_799


@dataclass(frozen=True, slots=True)
class Member:
    """One compiled schedule of a job, with its bounds (epoch ms) and its name."""

    name: str | None
    schedule: CronSchedule | OnceSchedule | IntervalSchedule
    start_at_ms: int | None
    end_at_ms: int | None
    jitter_s: int

    def next_after(self, after_ms: int) -> int | None:
        """The first fire instant (ms) after `after_ms` within the bounds, or None."""
        start = self.start_at_ms
        if start is not None and after_ms < start - 1:
            after_ms = start - 1
        # Instants are whole seconds: next_after(floor(after)) is > after as well.
        after_s = after_ms // 1000
        if after_s >= LAST_SECOND:
            return None  # e.g. start_at 9999-12-31T23:59:59.999Z: nothing can follow
        nxt = self.schedule.next_after(after_s)
        if nxt is None:
            return None
        nxt_ms = nxt * 1000
        if self.end_at_ms is not None and nxt_ms > self.end_at_ms:
            return None
        return nxt_ms


class ScheduleSet:
    """The fire instants of a job: the union of its members' instants."""

    __slots__ = ("members",)

    def __init__(self, members: Sequence[Member]) -> None:
        if not members:
            raise ValueError("a schedule set needs at least one schedule")
        self.members = tuple(members)

    @classmethod
    def from_spec(cls, spec: dict[str, Any], hash_key: str) -> ScheduleSet:
        """From a job spec (its `schedules` when present, else its single `schedule`).
        Specs stored before `schedules` existed have only `schedule`."""
        raw = spec.get("schedules") or [spec["schedule"]]
        return cls([_member(s, hash_key) for s in raw])

    @property
    def timezone(self) -> str:
        """The zone a single-zone view shows times in: the first schedule's."""
        return self.members[0].schedule.timezone

    @property
    def is_single(self) -> bool:
        return len(self.members) == 1

    def next_after(self, after_ms: int) -> int | None:
        """The first instant of the union after `after_ms` (ms), or None."""
        if len(self.members) == 1:
            return self.members[0].next_after(after_ms)
        best: int | None = None
        for m in self.members:
            t = m.next_after(after_ms)
            if t is not None and (best is None or t < best):
                best = t
        return best

    def matching(self, at_ms: int) -> list[Member]:
        """The members that fire at `at_ms` (an instant of the union), in order."""
        return [m for m in self.members if m.next_after(at_ms - 1) == at_ms]

    def matched_names(self, at_ms: int) -> list[str]:
        return [m.name or str(i) for i, m in enumerate(self.members)
                if m.next_after(at_ms - 1) == at_ms]

    def jitter_s_at(self, at_ms: int) -> int:
        """The jitter of the first schedule that fires at `at_ms` (0 when none does)."""
        if len(self.members) == 1:
            return self.members[0].jitter_s
        for m in self.members:
            if m.next_after(at_ms - 1) == at_ms:
                return m.jitter_s
        return 0

    def iter_after(self, after_ms: int, until_ms: int | None = None) -> Iterator[int]:
        """Instants of the union in (after_ms, until_ms], ascending, each once."""
        t = self.next_after(after_ms)
        while t is not None and (until_ms is None or t <= until_ms):
            yield t
            t = self.next_after(t)

    def iter_between(self, after_s: int, until_s: int) -> Iterator[int]:
        """The cron instants (seconds) of the union in (after_s, until_s], ascending, each
        once, without the schedules' start/end bounds: what a backfill lists (the caller
        names the range), as `CronSchedule.iter_between` does for one schedule."""
        if len(self.members) == 1:
            yield from self.members[0].schedule.iter_between(after_s, until_s)
            return
        last = None
        for t in heapq.merge(*(m.schedule.iter_between(after_s, until_s)
                               for m in self.members)):
            if t != last:
                yield t
                last = t

    def describe(self) -> str:
        """In words; several schedules are joined with "; and"."""
        return "; and ".join(m.schedule.describe() for m in self.members)


def _member(s: dict[str, Any], hash_key: str) -> Member:
    return Member(
        name=s.get("name"),
        schedule=compile_kind(s.get("cron", ""), tuple(s.get("at") or ()), s.get("every_s"),
                              s.get("anchor_ms"), s.get("timezone", "UTC"),
                              s.get("dst_gap", "auto"), s.get("dst_fold", "auto"),
                              hash_key=hash_key),
        start_at_ms=s.get("start_at_ms"),
        end_at_ms=s.get("end_at_ms"),
        jitter_s=s.get("jitter_s", 0) or 0,
    )


def _resolved_cron(s: dict[str, Any], hash_key: str) -> tuple[str, ...] | None:
    """A cron member's fields with this job's `H` values; None for any other kind (the
    same choice as `compile_kind`'s)."""
    if s.get("at") or s.get("every_s") is not None or not s.get("cron"):
        return None
    return hash_resolution(s["cron"], hash_key)


class FleetSchedules:
    """The `ScheduleSet`s of many jobs, built from their stored JSON: each distinct JSON is
    parsed once, and each distinct compiled set is built once and shared.

    A new leader compiles every job's schedules before it ticks, a million of them in a
    large fleet. Jobs with equal schedules share one set (sets are immutable); for a
    schedule with ``H`` items, equal means the same text and the same resolved values, so
    a million ``H H * * *`` jobs are 1,440 sets. Both caches are bounded: a fleet of all
    distinct schedules only misses.
    """

    MAX_ENTRIES = 65_536

    def __init__(self) -> None:
        self._parsed: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
        self._sets: dict[object, ScheduleSet] = {}

    def get(self, schedule_json: str, schedules_json: str | None, hash_key: str
            ) -> ScheduleSet:
        """The set of a job whose spec holds `schedule` and `schedules` as this JSON (the
        latter None when absent), for job id `hash_key`."""
        text_key = (schedule_json, schedules_json)
        raws = self._parsed.get(text_key)
        if raws is None:
            raws = self._remember(self._parsed, text_key, (
                json.loads(schedules_json) if schedules_json else None) or [
                json.loads(schedule_json)])
        # The resolved fields of each cron member (the same for every job when it has no
        # `H`): what, beside the text, makes two jobs' sets equal.
        key = (text_key, tuple(_resolved_cron(r, hash_key) for r in raws))
        found = self._sets.get(key)
        if found is None:
            found = self._remember(self._sets, key,
                                   ScheduleSet([_member(r, hash_key) for r in raws]))
        return found

    def _remember(self, cache: dict, key: object, value: Any) -> Any:
        if len(cache) >= self.MAX_ENTRIES:
            cache.clear()
        cache[key] = value
        return value
