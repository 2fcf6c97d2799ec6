"""The herd chart's work cap counts every schedule step, not only counted instants."""

from __future__ import annotations

import json

from raftcron.api.status import compute_herd
from raftcron.core.model import parse_job

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def test_steps_before_a_jobs_start_count_against_the_cap() -> None:
    # Every second of the week comes before start_at: nothing is counted, yet each
    # second is a schedule step. Uncapped, that was 604,800 steps for one request.
    late = json.dumps(parse_job({
        "id": "late", "schedule": {"cron": "* * * * * *", "start_at": "2027-01-01T00:00:00Z"},
        "target": {"shell": "true"}}).to_spec())
    herd = compute_herd([late], T0, 168, 60, cap=1000)
    assert herd["truncated"] and herd["total"] == 0


def test_a_job_with_nothing_in_the_window_costs_one_step() -> None:
    yearly = json.dumps(parse_job({"id": "y", "schedule": {"cron": "0 0 1 6 *"},
                                   "target": {"shell": "true"}}).to_spec())
    herd = compute_herd([yearly] * 3, T0, 24, 60, cap=3)
    assert not herd["truncated"] and herd["jobs"] == 3 and herd["total"] == 0


def test_a_bucket_size_that_does_not_divide_the_window_ends_in_a_shorter_bucket() -> None:
    # 3,600 s in buckets of 2,400 s: one full bucket and one of 1,200 s. The instants of
    # the partial bucket used to index past the counts (a 500 on /v1/schedule/herd).
    every_second = json.dumps(parse_job({"id": "s", "schedule": {"cron": "* * * * * *"},
                                         "target": {"shell": "true"}}).to_spec())
    herd = compute_herd([every_second], T0, 1, 2400)
    assert herd["counts"] == [2400, 1200]
    assert herd["total"] == 3600
