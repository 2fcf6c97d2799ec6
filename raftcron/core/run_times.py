"""A run's times as the record keeps them: the start its worker reported (never before
its instant, nor later than the cluster heard of it) and a finish that is that start plus
the measured duration.

Pure: the values come from the replicated completion and the attempt's own row.
"""

from __future__ import annotations

from typing import Any

from raftcron.core.ahead import CLOCK_TOLERANCE_MS

# How far after a command's own stamp a reported start or finish may lie: the nodes'
# clocks agree to within the clock guard's tolerance; a report beyond it is the worker's
# error (its reading of the cluster's clock ran ahead).
AFTER_STAMP_MS = CLOCK_TOLERANCE_MS


def heartbeat_start(reported_ms: int, not_before_ms: int, now_ms: int) -> int:
    """The start a heartbeat reports, as the record keeps it: never before the run's
    instant, and never more than AFTER_STAMP_MS after the heartbeat's stamp (the run
    had started when the cluster heard of it)."""
    return max(not_before_ms, min(int(reported_ms), now_ms + AFTER_STAMP_MS))


def reported_times(item: list[Any], not_before_ms: int, now_ms: int,
                   recorded_start: int | None = None) -> tuple[int | None, int]:
    """(started_ms, finished_ms) of a completion item.

    A worker that reports when it started the job's process and how long it ran (items
    of seven fields, core.protocol level 2) gets exactly that on the record: the start,
    on the cluster's clock as the worker measured it, raised to the attempt's not-before
    instant (a start is never recorded before its instant: the worker waits for it, so a
    report before it is the offset measurement's error), and the finish that start plus
    the duration. A start a heartbeat recorded while it ran (`recorded_start`) stands,
    unless the finish below takes it back.

    No finish lies more than AFTER_STAMP_MS after the command's stamp (`now_ms`):
    the run ended before the cluster heard of it, so a later finish is the worker's
    reading of the cluster's clock running ahead. Such a finish is the stamp plus that
    tolerance and the start moves back with it, keeping the duration, but not before the
    instant. The record then never shows a run running more than that tolerance after the
    cluster knew it had ended (the chaos suite's concurrency check counts runs from these
    times).

    Without a report the start is unknown (NULL) and the finish is the command's stamp, as
    before."""
    if len(item) < 7 or item[5] is None or item[6] is None:
        return recorded_start, now_ms if recorded_start is None else max(now_ms,
                                                                          recorded_start)
    started = max(int(item[5]), not_before_ms) if recorded_start is None else recorded_start
    duration = max(0, int(item[6]))
    latest = max(now_ms + AFTER_STAMP_MS, not_before_ms)
    finished = min(started + duration, latest)
    return min(started, max(finished - duration, not_before_ms)), finished
