"""A finished run's times as the record keeps them: the start its worker reported (never
before its instant) and a finish that is that start plus the measured duration.

Pure: the values come from the replicated completion and the attempt's own row.
"""

from __future__ import annotations

from typing import Any


def reported_times(item: list[Any], not_before_ms: int, now_ms: int,
                   recorded_start: int | None = None) -> tuple[int | None, int]:
    """(started_ms, finished_ms) of a completion item.

    A worker that reports when it started the job's process and how long it ran (items
    of seven fields, core.protocol level 2) gets exactly that on the record: the start,
    on the cluster's clock as the worker measured it, raised to the attempt's not-before
    instant (a start is never recorded before its instant: the worker waits for it, so a
    report before it is the offset measurement's error), and the finish that start plus
    the duration. A start a heartbeat recorded while it ran (`recorded_start`) stands.
    Without a report the start is unknown (NULL) and the finish is the command's stamp, as
    before."""
    if len(item) < 7 or item[5] is None or item[6] is None:
        return recorded_start, now_ms if recorded_start is None else max(now_ms,
                                                                          recorded_start)
    started = max(int(item[5]), not_before_ms) if recorded_start is None else recorded_start
    return started, started + max(0, int(item[6]))
