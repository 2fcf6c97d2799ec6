"""A job's history of edits from the real command line, against three real nodes:
`raftcron job history` after `job add`, `job edit` and `job pause` made through other
nodes, the same history on every node, and the refusals (another tenant, bad arguments)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import serving_cluster

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def cl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with serving_cluster(Path(tmp_path_factory.mktemp("job-history"))) as c:
        yield c


def cli(c: LocalCluster, nid: str, *args: str,
        token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAFTCRON_TOKEN"}
    env["RAFTCRON_TOKEN"] = token or c.admin_token
    return subprocess.run([sys.executable, "-m", "raftcron", *args, "--server", c.urls[nid]],
                          capture_output=True, text=True, timeout=90, env=env)


def ok(c: LocalCluster, nid: str, *args: str) -> str:
    done = cli(c, nid, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def one_line_refusal(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_job_history_shows_who_changed_what_on_every_node(cl: LocalCluster) -> None:
    a, b, c = cl.ids
    ok(cl, a, "job", "add", "invoices", "--cron", "0 9 * * 1-5", "--tz", "Europe/Berlin",
       "--shell", "./send-invoices.sh")
    ok(cl, b, "job", "edit", "invoices", "--cron", "0 10 * * 1-5", "--tz", "Europe/Berlin",
       "--shell", "./send-invoices.sh")
    ok(cl, c, "job", "pause", "invoices")
    cl.wait_converged()
    answers = [json.loads(ok(cl, nid, "job", "history", "invoices", "--json"))
               for nid in cl.ids]
    assert answers[0] == answers[1] == answers[2]  # replicated: every node says the same
    versions = answers[0]["versions"]
    assert [(v["seq"], v["version"], v["kind"]) for v in versions] == [
        (3, 2, "pause"), (2, 2, "edit"), (1, 1, "create")]
    admin = versions[0]["by"]
    assert admin and all(v["by"] == admin for v in versions)
    assert {"field": "schedule.cron", "before": "0 9 * * 1-5",
            "after": "0 10 * * 1-5"} in versions[1]["changes"]

    table = ok(cl, b, "job", "history", "invoices").splitlines()
    assert table[0].split() == ["seq", "version", "kind", "at", "(UTC)", "by", "change"]
    pause, edit, create = (next(line for line in table[1:] if line.split()[:3] == row)
                           for row in (["3", "2", "pause"], ["2", "2", "edit"],
                                       ["1", "1", "create"]))
    assert "paused: false → true" in pause and admin in pause
    edit_lines = table[table.index(edit):table.index(create)]  # one line per field
    assert any("schedule.cron: 0 9 * * 1-5 → 0 10 * * 1-5" in line for line in edit_lines)
    assert create.rstrip().endswith("created")

    paged = ok(cl, a, "job", "history", "invoices", "--limit", "1", "--before", "3")
    assert paged.splitlines()[1].split()[:3] == ["2", "2", "edit"]


def test_job_history_refusals_are_one_line(cl: LocalCluster) -> None:
    a = cl.ids[0]
    ok(cl, a, "job", "add", "payroll", "--cron", "0 3 * * *", "--shell", "true")
    other = cl.create_token("tenant:other", name="other-bot")
    wait_until(lambda: cl.http.get(f"{cl.urls[a]}/v1/jobs", headers=cl.auth_headers(other)
                                   ).status_code == 200, 15, message="the new token known")
    refused = one_line_refusal(cli(cl, a, "job", "history", "payroll", token=other), 1)
    assert "payroll" in refused and "does not exist" in refused
    assert "--limit" in one_line_refusal(cli(cl, a, "job", "history", "payroll", "--limit",
                                             "0"), 2)
    assert "--before" in one_line_refusal(cli(cl, a, "job", "history", "payroll", "--before",
                                              "x"), 2)
    gone = one_line_refusal(cli(cl, a, "job", "history", "no-such-job"), 1)
    assert "no-such-job" in gone


def test_job_history_of_a_deleted_job_says_who_deleted_it(cl: LocalCluster) -> None:
    a, b, _ = cl.ids
    ok(cl, a, "job", "add", "reports", "--cron", "0 6 * * *", "--shell", "./report.sh")
    ok(cl, b, "job", "rm", "reports")
    cl.wait_converged()
    done = cli(cl, a, "job", "history", "reports")
    assert done.returncode == 0, done.stderr
    delete = done.stdout.splitlines()[1]
    assert delete.split()[:3] == ["2", "1", "delete"] and "no field changed" in delete
    assert done.stderr.strip() == "reports is deleted"
    versions = json.loads(ok(cl, a, "job", "history", "reports", "--json"))["versions"]
    assert versions[0]["job"]["target"] == {"shell": "./report.sh"}  # what it was
