"""A run's recorded times: the start its worker reported (never before its instant), a
finish that is that start plus the measured duration, the duration bound counted from
them; old completions without a report keep their stamp and show no start."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftcron.core import commands as c
from raftcron.core import identity, protocol
from raftcron.core.run_times import AFTER_STAMP_MS
from raftcron.state.queries import ATT_SELECT, attempt_to_api
from tests.integration.test_machine import MIN, T0, Node

SEC = 1000


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path / "state.db")
    n.begin(1)
    return n


def leased(node: Node, job_id: str, at: int, lease_at: int) -> dict:
    node.fire(job_id, at)
    attempt = identity.attempt_id(identity.scheduled_occurrence_id(job_id, at), 1)
    result = node.apply(c.Lease(epoch=node.epoch, now_ms=lease_at, worker_id="w1",
                                attempt_ids=[attempt], ahead_ms=max(0, at - lease_at)))
    return result["leases"][0]


def complete(node: Node, lease: dict, stamp: int, *times: int | None,
             outcome: str = "succeeded") -> dict:
    item = [lease["attempt_id"], lease["fencing_token"], outcome,
            0 if outcome == "succeeded" else 1, "", *times]
    result = node.apply(c.Complete(stamp, "w1", [item]))
    assert result["ok"] and result["results"][0]["ok"], result
    return result


def shown(node: Node, attempt_id: str) -> dict:
    return attempt_to_api(node.one(f"{ATT_SELECT} WHERE id = ?", attempt_id))


def test_the_reported_start_and_duration_are_the_record(node: Node) -> None:
    """The stamp lags (it is before the instant here): the record is the report."""
    node.create("j", now=T0)
    at = T0 + MIN
    lease = leased(node, "j", at, at - 900)  # leased ahead
    complete(node, lease, at - 4, at + 5, 203)
    row = node.one("SELECT started_ms, finished_ms FROM attempts WHERE id = ?",
                   lease["attempt_id"])
    assert row == (at + 5, at + 208)
    assert node.one("SELECT finished_ms FROM occurrences WHERE id = ?",
                    lease["occurrence_id"]) == (at + 208,)
    api = shown(node, lease["attempt_id"])
    assert api["duration_s"] == 0.203
    assert api["started_at"].endswith(".005Z")


def test_a_start_reported_before_the_instant_is_recorded_at_the_instant(node: Node) -> None:
    """A worker waits for the instant by its corrected clock; a report a few ms before it
    is the offset's error, and no record shows a start before its instant."""
    node.create("j", now=T0)
    at = T0 + MIN
    lease = leased(node, "j", at, at - 900)
    complete(node, lease, at + 300, at - 7, 100)
    started, finished = node.one("SELECT started_ms, finished_ms FROM attempts WHERE id = ?",
                                 lease["attempt_id"])
    assert started == at and finished == at + 100 and finished >= started


def test_a_failed_run_records_its_times_too(node: Node) -> None:
    node.create("j", now=T0, max_attempts=1)
    at = T0 + MIN
    lease = leased(node, "j", at, at)
    complete(node, lease, at + 900, at + 10, 500, outcome="failed")
    assert node.one("SELECT status, started_ms, finished_ms FROM attempts WHERE id = ?",
                    lease["attempt_id"]) == ("failed", at + 10, at + 510)


def test_without_a_report_the_stamp_stays_and_no_start_or_duration_is_shown(
        node: Node) -> None:
    node.create("j", now=T0)
    at = T0 + MIN
    lease = leased(node, "j", at, at)
    complete(node, lease, at + 1234)
    assert node.one("SELECT started_ms, finished_ms FROM attempts WHERE id = ?",
                    lease["attempt_id"]) == (None, at + 1234)
    api = shown(node, lease["attempt_id"])
    assert api["started_at"] is None and api["duration_s"] is None


def test_min_duration_counts_the_reported_duration_not_the_lease(node: Node) -> None:
    """Leased 0.9 s ahead and reported 2 s after the instant: it ran 0.2 s, too fast for
    a bound of 1 s, although lease to stamp is 2.9 s."""
    node.create("j", now=T0, min_duration_s=1)
    at = T0 + MIN
    lease = leased(node, "j", at, at - 900)
    complete(node, lease, at + 2000, at + 1800, 200)
    rows = node.q("SELECT kind, status FROM alerts")
    assert rows == [("too_fast", "open")]
    second = leased(node, "j", at + MIN, at + MIN)
    complete(node, second, at + MIN + 1600, at + MIN + 5, 1500)
    assert node.q("SELECT status FROM alerts") == [("resolved",)]


def test_a_resent_completion_with_its_times_is_a_duplicate(node: Node) -> None:
    node.create("j", now=T0)
    at = T0 + MIN
    lease = leased(node, "j", at, at)
    complete(node, lease, at + 300, at + 5, 200)
    again = complete(node, lease, at + 900, at + 5, 200)
    assert again["results"][0]["duplicate"] is True
    assert node.one("SELECT finished_ms FROM attempts WHERE id = ?",
                    lease["attempt_id"]) == (at + 205,)


def test_the_reported_times_need_level_2_and_old_items_need_nothing() -> None:
    with_times = c.Complete(1, "w", [["a", 1, "succeeded", 0, "", 5, 7]])
    without = c.Complete(1, "w", [["a", 1, "succeeded", 0, ""]])
    assert protocol.unmet(with_times, 1) == protocol.COMPLETION_TIMES
    assert protocol.unmet(with_times, 2) is None
    assert protocol.unmet(without, 1) is None


def beat(node: Node, lease: dict, stamp: int, started: int | None = None) -> dict:
    item = [lease["attempt_id"], lease["fencing_token"]]
    result = node.apply(c.Heartbeat(stamp, "w1", [item if started is None
                                                  else [*item, started]]))
    assert result["ok"] and result["results"][0]["ok"], result
    return result


def test_a_heartbeat_records_a_running_runs_start_and_the_completion_keeps_it(
        node: Node) -> None:
    node.create("j", now=T0)
    at = T0 + MIN
    lease = leased(node, "j", at, at - 900)
    beat(node, lease, at - 500)  # waiting for its instant: no start yet
    assert shown(node, lease["attempt_id"])["started_at"] is None
    beat(node, lease, at + 400, at - 3)  # started; reported 3 ms before: the instant
    running = shown(node, lease["attempt_id"])
    assert running["started_at"].endswith(":00Z") or running["started_at"].endswith(".000Z")
    assert running["duration_s"] is None and running["status"] == "running"
    beat(node, lease, at + 900, at + 50)  # a later report does not move it
    assert node.one("SELECT started_ms FROM attempts WHERE id = ?",
                    lease["attempt_id"]) == (at,)
    complete(node, lease, at + 1200, at + 50, 700)
    assert node.one("SELECT started_ms, finished_ms FROM attempts WHERE id = ?",
                    lease["attempt_id"]) == (at, at + 700)


def test_too_slow_counts_from_the_reported_start(node: Node) -> None:
    """max_duration_s: a run leased at its instant whose worker reports it started 20 s
    later (its slots were busy) is not too slow 25 s after the instant with a bound of
    10 s, as it would be counted from the lease; 31 s after, it is."""
    from raftcron.leader.run_bounds import RunBounds
    from tests.integration.test_run_alerts import plan

    node.create("j", now=T0, max_duration_s=10)
    at = T0 + MIN
    lease = leased(node, "j", at, at)
    beat(node, lease, at + 21 * SEC, at + 20 * SEC)
    bounds = RunBounds(node.epoch, None, None)  # type: ignore[arg-type]
    assert plan(node, bounds, at + 25 * SEC) == []
    [raised] = plan(node, bounds, at + 31 * SEC)
    assert raised.alert_id == f"too_slow:{lease['attempt_id']}"  # type: ignore[attr-defined]


def test_heartbeat_starts_need_level_2() -> None:
    cmd = c.Heartbeat(1, "w", [["a", 1, 5]])
    assert protocol.unmet(cmd, 1) == protocol.HEARTBEAT_START
    assert protocol.unmet(c.Heartbeat(1, "w", [["a", 1]]), 1) is None


def test_a_finish_reported_after_the_completions_stamp_is_pulled_back(node: Node) -> None:
    """A worker whose reading of the cluster's clock ran 16 s ahead reports a run that
    ended before the cluster heard of it as ending 16 s later: the record keeps its
    duration but ends it at most the clock tolerance after the completion's stamp, so the
    run never counts as running after it ended (the tenant's concurrency quota)."""
    node.create("j", now=T0)
    at = T0 + MIN
    lease = leased(node, "j", at, at)
    stamp = at + 2 * SEC
    complete(node, lease, stamp, at + 16 * SEC, 1500)
    started, finished = node.one("SELECT started_ms, finished_ms FROM attempts WHERE id = ?",
                                 lease["attempt_id"])
    assert finished == stamp + AFTER_STAMP_MS
    assert (started, finished - started) == (finished - 1500, 1500)
    # Just within the tolerance the report stands.
    second = leased(node, "j", at + MIN, at + MIN)
    complete(node, second, at + MIN + 300, at + MIN + 100, 200 + AFTER_STAMP_MS)
    assert node.one("SELECT started_ms, finished_ms FROM attempts WHERE id = ?",
                    second["attempt_id"]) == (at + MIN + 100, at + MIN + 300 + AFTER_STAMP_MS)


def test_a_pulled_back_start_never_goes_before_the_instant(node: Node) -> None:
    """The stamp is 0.2 s after the instant and the report says 9 s of running from
    16 s after it: the finish comes back to the stamp plus the tolerance and the start to
    the instant, not 9 s before the finish."""
    node.create("j", now=T0)
    at = T0 + MIN
    lease = leased(node, "j", at, at - 900)
    complete(node, lease, at + 200, at + 16 * SEC, 9 * SEC)
    assert node.one("SELECT started_ms, finished_ms FROM attempts WHERE id = ?",
                    lease["attempt_id"]) == (at, at + 200 + AFTER_STAMP_MS)


def test_a_heartbeat_start_after_its_stamp_is_pulled_back(node: Node) -> None:
    node.create("j", now=T0)
    at = T0 + MIN
    lease = leased(node, "j", at, at)
    beat(node, lease, at + SEC, at + 17 * SEC)
    assert node.one("SELECT started_ms FROM attempts WHERE id = ?",
                    lease["attempt_id"]) == (at + SEC + AFTER_STAMP_MS,)
