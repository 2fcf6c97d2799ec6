"""The pieces of `raftcron job runs` / `run logs` that need no cluster."""

from __future__ import annotations

from typing import Any

import pytest

from raftcron.cli.runs import OutputFollower, alert_state, outcome, run_duration


@pytest.mark.parametrize(("took_s", "shown"), [
    (0.203, "0.203s"), (1.25, "1.250s"), (12.34, "12.3s"), (184, "3m04s"), (7500, "2h05m"),
    (None, ""),  # no reported start: no duration, rather than a lease-to-finish guess
])
def test_a_runs_duration_is_what_its_worker_reported(took_s: float | None, shown: str
                                                     ) -> None:
    assert run_duration({"duration_s": took_s, "leased_at": "2026-01-01T00:00:00Z"}) == shown


def test_outcome_names_the_reason() -> None:
    assert outcome({"status": "skipped", "reason": "misfire"}) == "skipped (misfire)"
    assert outcome({"status": "succeeded", "reason": None}) == "succeeded"


def test_alert_state_names_who_acknowledged_an_open_alert() -> None:
    acked = {"by": "ops", "at": "2026-01-01T00:00:00Z", "note": "x"}
    assert alert_state({"status": "open", "acknowledged": acked}) == "acked by ops"
    assert alert_state({"status": "open", "acknowledged": None}) == "open"
    assert alert_state({"status": "resolved", "acknowledged": acked}) == "resolved"


def attempt(number: int, status: str, output: str | None = None) -> dict[str, Any]:
    return {"id": f"o~{number}", "number": number, "status": status, "worker_id": "w1",
            "output": output}


def test_follower_prints_each_output_once_and_reports_status_changes(
        capsys: pytest.CaptureFixture[str]) -> None:
    follower = OutputFollower()
    follower.show({"attempt_list": [attempt(1, "running")]})
    follower.show({"attempt_list": [attempt(1, "running")]})  # nothing new: nothing printed
    first = capsys.readouterr()
    assert first.out == "" and first.err == "-- attempt 1 running on w1\n"
    follower.show({"attempt_list": [attempt(1, "failed", "boom"), attempt(2, "running")]})
    follower.show({"attempt_list": [attempt(1, "failed", "boom"),
                                    attempt(2, "succeeded", "ok\n")]})
    second = capsys.readouterr()
    assert second.out == "boom\nok\n"
    assert second.err.splitlines() == ["-- attempt 1 failed on w1", "-- attempt 2 running on w1",
                                       "-- attempt 2 succeeded on w1"]
