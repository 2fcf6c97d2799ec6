""""Did it run?" from the real command line: `job runs`, `run show`, `run logs --follow`,
`alerts` with ack/resolve, and `status --watch`, against three real nodes and a real
worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftcron.core.timefmt import parse_iso_ms
from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job, as_from_a_terminal

pytestmark = pytest.mark.system

WORKER = "w-ops"


def cli_env(token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAFTCRON_TOKEN"}
    env["RAFTCRON_TOKEN"] = token
    return env


class Cli:
    def __init__(self, c: LocalCluster, server: str) -> None:
        self.c, self.server = c, server

    def run(self, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "raftcron", *args, "--server", self.server],
                              capture_output=True, text=True, timeout=90,
                              env=cli_env(token or self.c.admin_token))

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "raftcron", *args, "--server",
                                 self.server], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=cli_env(self.c.admin_token),
                                preexec_fn=as_from_a_terminal)

    def ok(self, *args: str, token: str | None = None) -> str:
        done = self.run(*args, token=token)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def refused(self, code: int, *args: str, token: str | None = None) -> str:
        done = self.run(*args, token=token)
        assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        return lines[0]


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    c = LocalCluster(Path(tmp_path_factory.mktemp("cli-runs")))
    c.start()
    try:
        leader = c.wait_leader(timeout=30)
        wait_until(lambda: all(c.cluster_view(n) for n in c.ids), 30, message="all nodes up")
        c.start_worker(WORKER)
        yield Cli(c, c.urls[next(n for n in c.ids if n != leader)])
    finally:
        c.close()


def occurrence(cli: Cli, occ_id: str) -> dict[str, Any]:
    return cli.c.http.get(f"{cli.server}/v1/occurrences/{occ_id}").json()


def trigger(cli: Cli, job_id: str, key: str) -> str:
    out = json.loads(cli.ok("job", "trigger", job_id, "--key", key, "--json"))
    return out["id"]


def iso_ms(text: str) -> int:
    return parse_iso_ms(text, "instant")


def test_job_runs_lists_the_run_with_its_worker_and_run_show_prints_its_output(
        cli: Cli) -> None:
    resp = cli.c.post(cli.c.wait_leader(), "/v1/jobs", {
        "id": "hello", "schedule": {"cron": "0 9 * * *", "timezone": "Europe/Berlin"},
        "target": {"shell": "echo hi from hello"}})
    assert resp.status_code == 201, resp.text
    occ_id = trigger(cli, "hello", "run-1")
    wait_until(lambda: occurrence(cli, occ_id)["status"] == "succeeded", 60,
               message="the manual run of hello succeeded")

    table = cli.ok("job", "runs", "hello").splitlines()
    assert table[0].split()[:4] == ["instant", "(UTC)", "instant", "(Europe/Berlin)"]
    row = next(line.split() for line in table[1:] if occ_id in line)
    utc, local, kind, status, attempts, started, took, worker, shown_id = row
    assert (kind, status, attempts, worker, shown_id) == (
        "manual", "succeeded", "1", WORKER, occ_id)
    assert utc.endswith("Z") and local.endswith(("+01:00", "+02:00"))
    # The run's own start is on the record, never before its instant.
    assert started.endswith("Z") and iso_ms(started) >= iso_ms(utc)
    assert took.endswith("s")

    data = json.loads(cli.ok("job", "runs", "hello", "--kind", "manual", "--json"))
    assert data["timezone"] == "Europe/Berlin"
    [listed] = data["occurrences"]
    assert listed["attempt_list"][0]["worker_id"] == WORKER
    assert json.loads(cli.ok("job", "runs", "hello", "--status", "failed",
                             "--json"))["occurrences"] == []

    shown = cli.ok("run", "show", occ_id)
    assert "hi from hello" in shown
    assert f"worker {WORKER}" in shown and "exit 0" in shown
    detail = json.loads(cli.ok("run", "show", occ_id, "--json"))
    assert detail["attempt_list"][0]["output"].strip() == "hi from hello"
    assert cli.ok("run", "logs", occ_id) == "hi from hello\n"


def test_run_logs_follow_prints_the_output_when_the_running_attempt_ends(
        cli: Cli, tmp_path: Path) -> None:
    go = tmp_path / "go"
    resp = cli.c.post(cli.c.wait_leader(), "/v1/jobs", {
        "id": "waiter", "schedule": {"cron": "0 9 * * *"},
        "target": {"shell": f"while [ ! -e {go} ]; do sleep 0.1; done; echo released"}})
    assert resp.status_code == 201, resp.text
    occ_id = trigger(cli, "waiter", "run-1")
    follow = cli.popen("run", "logs", occ_id, "--follow", "--interval", "0.2")
    try:
        assert follow.stderr is not None
        seen = []
        while not any("running" in line for line in seen):  # it watches the running attempt
            line = follow.stderr.readline()
            assert line, f"follow ended early: {seen}"
            seen.append(line)
        assert follow.poll() is None, "still following while the attempt runs"
        go.touch()
        out, err = follow.communicate(timeout=60)
    finally:
        if follow.poll() is None:
            follow.kill()
    assert follow.returncode == 0, err
    assert out == "released\n"
    assert f"attempt 1 running on {WORKER}" in "".join(seen)
    assert "-- occurrence succeeded" in err


def test_alerts_ack_and_resolve_with_who_and_note(cli: Cli) -> None:
    c = cli.c
    leader = c.wait_leader()
    add_job(c, leader, "nightly", cron="* * * * * *", deadline_s=1, queue="unstaffed")
    alerts = wait_until(lambda: c.get(leader, "/v1/alerts",
                                      params={"job_id": "nightly"})["alerts"], 30,
                        message="a deadline alert")
    assert c.post(leader, "/v1/jobs/nightly/pause").status_code == 200
    alert_id = alerts[-1]["id"]

    listed = cli.ok("alerts", "--job", "nightly")
    assert alert_id in listed and "open" in listed
    other = c.create_token("tenant:elsewhere", name="elsewhere-bot")
    reader = c.create_token("read", name="reader")
    assert "does not exist" in cli.refused(1, "alerts", "ack", alert_id, "--note", "mine?",
                                           token=other)
    assert "forbidden" in cli.refused(1, "alerts", "ack", alert_id, "--note", "x",
                                      token=reader)

    for _ in range(2):  # a retry with the same key acts once
        cli.ok("alerts", "ack", alert_id, "--note", "on it: the unstaffed queue has no worker",
               "--key", "page-1")
    data = json.loads(cli.ok("alerts", "--job", "nightly", "--json"))
    shown = next(a for a in data["alerts"] if a["id"] == alert_id)
    assert shown["acknowledged"]["by"] == "local-admin"
    assert shown["acknowledged"]["note"] == "on it: the unstaffed queue has no worker"
    assert "acked by local-admin" in cli.ok("alerts", "--job", "nightly")

    cli.ok("alerts", "resolve", alert_id, "--note", "queue retired")
    data = json.loads(cli.ok("alerts", "--status", "resolved", "--job", "nightly", "--json"))
    shown = next(a for a in data["alerts"] if a["id"] == alert_id)
    assert [(h["event"], h.get("by"), h.get("note")) for h in shown["history"]][1:] == [
        ("acknowledged", "local-admin", "on it: the unstaffed queue has no worker"),
        ("resolved", "local-admin", "queue retired")]
    assert "already resolved" in cli.refused(1, "alerts", "resolve", alert_id, "--note", "x")


def test_unknown_names_and_bad_arguments_are_one_line(cli: Cli) -> None:
    assert "job 'nope' does not exist" in cli.refused(1, "job", "runs", "nope")
    assert "does not exist" in cli.refused(1, "run", "show", "nope@manual-x")
    assert "does not exist" in cli.refused(1, "alerts", "ack", "deadline:nope", "--note", "x")
    assert "--status" in cli.refused(2, "job", "runs", "hello", "--status", "done")
    assert "--limit" in cli.refused(2, "job", "runs", "hello", "--limit", "0")
    assert "--note" in cli.refused(2, "alerts", "ack", "deadline:x")
    assert "--interval" in cli.refused(2, "status", "--watch", "--interval", "0")


def test_status_watch_redraws_until_ctrl_c_and_exits_0(cli: Cli) -> None:
    watch = cli.popen("status", "--watch", "--interval", "0.3")
    try:
        assert watch.stdout is not None
        frames = 0
        while frames < 2:
            line = watch.stdout.readline()
            assert line, "watch ended early"
            frames += line.startswith("every 0.3s")
        watch.send_signal(signal.SIGINT)
        out, err = watch.communicate(timeout=30)
    finally:
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0, err
    assert "Traceback" not in err
