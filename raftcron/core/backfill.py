"""The instants a backfill request names, with its cost bounded before any is computed.

Listing a range costs per instant (at most `MAX_BACKFILL_INSTANTS + 1` are listed) and per
year of the job's zone (its offset transitions are found year by year: about 2 ms of CPU
each, so a yearly Europe/Berlin job over 7,000 years took 15 s). The span is therefore
capped first, in `check_backfill_span`, and the API lists the instants off the event loop.
"""

from __future__ import annotations

import itertools

from raftcron.core.errors import ValidationError
from raftcron.core.schedule import CronSchedule
from raftcron.core.schedule_set import ScheduleSet

MAX_BACKFILL_INSTANTS = 10_000
MAX_BACKFILL_SPAN_DAYS = 3_653  # ten years
MAX_BACKFILL_SPAN_MS = MAX_BACKFILL_SPAN_DAYS * 86_400_000


def check_backfill_span(start_ms: int, end_ms: int, field: str = "end") -> None:
    """Refuse a range that ends before it starts or spans more than ten years."""
    if end_ms < start_ms:
        raise ValidationError(field, "must not be before start")
    if end_ms - start_ms > MAX_BACKFILL_SPAN_MS:
        raise ValidationError(field, f"the range spans more than {MAX_BACKFILL_SPAN_DAYS:,} "
                              "days (ten years): split it")


def backfill_instants(sched: CronSchedule | ScheduleSet, start_ms: int, end_ms: int,
                      max_instants: int = MAX_BACKFILL_INSTANTS,
                      field: str = "end") -> list[int]:
    """The fire instants (epoch ms) in [start_ms, end_ms], at most `max_instants` (of
    every schedule of a job with several: their union, each instant once).

    Raises ValidationError on `field` for a range too long or holding more instants."""
    check_backfill_span(start_ms, end_ms, field)
    in_range = (t * 1000 for t in sched.iter_between((start_ms - 1) // 1000, end_ms // 1000)
                if t * 1000 >= start_ms)
    instants = list(itertools.islice(in_range, max_instants + 1))
    if len(instants) > max_instants:
        raise ValidationError(field, f"the range holds more than {max_instants:,} instants")
    return instants
