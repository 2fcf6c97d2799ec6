"""A run's recorded start against when it really started.

- start_recorded_late: the start an attempt's record shows (`started_at`) lies more than
  START_SLACK_S after the first thing the run sent the sink: its start record (`event:
  start`, posted once it runs) or its effect (`event: offer`, its last step), stamped on
  the cluster's clock. The run had certainly started by then, so the worker's report, or
  the record made of it, is wrong. (A worker
  whose wall clock stepped once reported starts 2-16 s late, and so finishes as late:
  the tenant concurrency check then counted runs as running after they had ended.)

The slack covers what the record may rightly add: a start reported early by the worker's
measurement error is raised to the instant (the clock guard's 0.5 s), and the sink's own
stamp. Runs started while a fault moved a node's clock, and for PROBE_SLACK_S after it,
are not judged: a worker reads the cluster's clock on the node it talks to, and a skewed
node moves that reading until the worker's next probe. A fault that moves the worker's
own clock (clock-bump-worker) moves nothing the worker reports, and is judged.
"""

from __future__ import annotations

from typing import Any

from chaos.checks_tenants import CLOCK_FAULTS
from chaos.report_model import Report, iso, ts

START_SLACK_S = 1.0
FAULT_SLACK_BEFORE_S = 2.0
# The worker probes the cluster's clock every 5 s (worker.clock.PROBE_EVERY_S); a probe
# can fail once around a fault's end.
PROBE_SLACK_S = 12.0


def _node_clock_moved(t: float, windows: list[dict[str, Any]], end: float) -> bool:
    return any(w["start"] - FAULT_SLACK_BEFORE_S <= t <= (w["stop"] or end) + PROBE_SLACK_S
               for w in windows if w["kind"] in CLOCK_FAULTS)


def check_run_times(rep: Report, attempts: dict[str, list[dict[str, Any]]],
                    starts: list[dict[str, Any]], windows: list[dict[str, Any]],
                    window_end: float) -> int:
    """Judge every attempt with both a recorded start and a record at the sink (`starts`:
    its start records and offers); returns how many were judged."""
    first_start: dict[str, float] = {}
    for s in starts:
        at = s.get("cluster_wall")
        if s.get("attempt") and at is not None:
            first_start[s["attempt"]] = min(at, first_start.get(s["attempt"], at))
    judged = 0
    for lst in attempts.values():
        for a in lst or []:
            recorded, really = ts(a.get("started_at")), first_start.get(a["id"])
            if recorded is None or really is None or _node_clock_moved(really, windows,
                                                                       window_end):
                continue
            judged += 1
            if recorded > really + START_SLACK_S:
                rep.add("start_recorded_late", attempt=a["id"], started_at=iso(recorded),
                        start_record=iso(really), late_s=round(recorded - really, 3))
    return judged
