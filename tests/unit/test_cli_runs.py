"""The pieces of `raftcron job runs` / `run logs` that need no cluster."""

from __future__ import annotations

from typing import Any

import pytest

from raftcron.cli.runs import OutputFollower, alert_state, duration, outcome


@pytest.mark.parametrize(("start", "end", "shown"), [
    ("2026-01-01T00:00:00Z", "2026-01-01T00:00:01.250Z", "1.2s"),
    ("2026-01-01T00:00:00Z", "2026-01-01T00:03:04Z", "3m04s"),
    ("2026-01-01T00:00:00Z", "2026-01-01T02:05:00Z", "2h05m"),
    ("2026-01-01T00:00:00Z", None, ""),
    (None, "2026-01-01T00:00:00Z", ""),
])
def test_duration(start: str | None, end: str | None, shown: str) -> None:
    assert duration(start, end) == shown


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
