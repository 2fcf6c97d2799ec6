"""CLI input the API would refuse is refused first: exit 2 with one line naming the flag,
before any request (the server given here does not exist)."""

from __future__ import annotations

import pytest

from raftcron.cli.main import main

NOWHERE = "http://127.0.0.1:9"


@pytest.mark.parametrize(("start", "end", "expected"), [
    ("1970-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "--end: the range spans more than"),
    ("2026-01-01T00:00:00Z", "9999-12-31T23:59:59-23:59", "--end: must be between"),
    ("2016-12-31T23:59:60Z", "2026-01-01T00:00:00Z", "--start:"),
])
def test_backfill_ranges_the_api_refuses_exit_2_before_any_request(
        start: str, end: str, expected: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAFTCRON_TOKEN", "t")
    code = main(["job", "backfill", "j", "--start", start, "--end", end, "--server", NOWHERE])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and expected in err, err


def test_schedule_preview_refuses_an_instant_past_the_year_9999(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["schedule", "preview", "--cron", "0 9 * * *",
                 "--start", "9999-12-31T23:59:59-23:59"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--start: must be between" in err, err


@pytest.mark.parametrize("prefetch", ["-1", "1001"])
def test_worker_prefetch_out_of_range_exits_2(prefetch: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["worker", "--server", NOWHERE, "--prefetch", prefetch, "--token", "t"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "--prefetch must be between 0 and 1000" in err, err


@pytest.mark.parametrize("worker_id", ["w\u00e9", "x" * 129, "w\t1"])
def test_worker_id_the_api_refuses_exits_2(worker_id: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["worker", "--server", NOWHERE, "--id", worker_id, "--token", "t"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "--id must be 1-128 printable ASCII" in err, err


@pytest.mark.parametrize(("flags", "expected"), [
    (["--min-duration-s", "20", "--max-duration-s", "10"],
     "--min-duration-s must be at most max_duration_s"),
    (["--max-duration-s", "60", "--max-runtime-s", "60"],
     "--max-duration-s must be less than max_runtime_s"),
    (["--alert-after-failures", "1001"], "--alert-after-failures must be between 1 and 1000"),
    (["--start-deadline-s", "-5"], "--start-deadline-s: '-5' is not a whole number"),
    (["--min-duration-s", "1.5"], "--min-duration-s: '1.5' is not a whole number"),
])
def test_run_bounds_the_api_refuses_exit_2_before_any_request(
        flags: list[str], expected: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAFTCRON_TOKEN", "t")
    try:
        code = main(["job", "add", "j", "--cron", "* * * * *", "--shell", "true", *flags,
                     "--server", NOWHERE])
    except SystemExit as e:  # refused by the argument parser
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and expected in err, err


def test_a_zero_run_bound_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--min-duration-s 0` sends null (off); the other given bounds go as numbers."""
    from raftcron.cli import client as cli_client

    sent: list[dict] = []

    def request(self: object, method: str, path: str, **kw: object) -> dict:
        sent.append(kw["json"])  # type: ignore[arg-type]
        return {"id": "j", "version": 1, "next_fire_times": []}

    monkeypatch.setattr(cli_client.Client, "request", request)
    monkeypatch.setenv("RAFTCRON_TOKEN", "t")
    assert main(["job", "add", "j", "--cron", "* * * * *", "--shell", "true",
                 "--min-duration-s", "0", "--alert-after-failures", "3",
                 "--server", NOWHERE]) == 0
    assert sent[0]["min_duration_s"] is None and sent[0]["alert_after_failures"] == 3
    assert "max_duration_s" not in sent[0], "a flag not given is not sent"
