"""The real `raftcron` command line, as a subprocess, against real node processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftcron.ops.local import write_cluster_configs
from raftcron.testing import LocalCluster, free_port_base, wait_until

pytestmark = pytest.mark.system


TOKEN: dict[str, str] = {}


def raftcron(*args: str, cwd: Path | None = None, token: str | None = None
             ) -> subprocess.CompletedProcess[str]:
    """Runs the CLI with RAFTCRON_TOKEN set to `token` (default: the cluster's admin token)."""
    env = {k: v for k, v in os.environ.items() if k != "RAFTCRON_TOKEN"}
    if token or TOKEN.get("admin"):
        env["RAFTCRON_TOKEN"] = token or TOKEN["admin"]
    return subprocess.run([sys.executable, "-m", "raftcron", *args], capture_output=True,
                          text=True, timeout=90, cwd=cwd, env=env)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {stderr!r}"
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, str]]:
    """The cluster and the --server value the CLI uses (one follower: read-your-writes)."""
    c = LocalCluster(Path(tmp_path_factory.mktemp("cli")))
    TOKEN["admin"] = c.admin_token
    c.start()
    try:
        leader = c.wait_leader(timeout=30)
        wait_until(lambda: all(c.cluster_view(n) for n in c.ids), 30, message="all nodes up")
        follower = next(n for n in c.ids if n != leader)
        yield c, c.urls[follower]
    finally:
        TOKEN.clear()
        c.close()


def test_job_add_list_show_pause_resume_rm(cli: tuple[LocalCluster, str]) -> None:
    c, server = cli
    add = raftcron("job", "add", "cli-a", "--cron", "*/5 * * * *", "--shell", "echo hi",
                   "--server", server)
    assert add.returncode == 0, add.stderr
    assert add.stdout.split("\n")[0].split() == ["id", "version", "next", "fire", "(UTC)"]
    row = add.stdout.split("\n")[1].split()
    assert row[:2] == ["cli-a", "1"]
    assert row[2].endswith(":00Z") and int(row[2][14:16]) % 5 == 0

    job = c.http.get(server + "/v1/jobs/cli-a").json()
    assert job["schedule"]["cron"] == "*/5 * * * *"
    assert job["target"] == {"shell": "echo hi"}

    listed = raftcron("job", "list", "--server", server)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert rows[0] == ["id", "tenant", "cron", "timezone", "state", "version"]
    assert ["cli-a", "default", "*/5", "*", "*", "*", "*", "UTC", "active", "1"] in rows

    show = raftcron("job", "show", "cli-a", "--json", "--server", server)
    assert show.returncode == 0, show.stderr
    detail = json.loads(show.stdout)
    assert detail["id"] == "cli-a" and detail["version"] == 1
    assert detail["target"] == {"shell": "echo hi"}
    assert len(detail["next_fire_times"]) == 5

    pause = raftcron("job", "pause", "cli-a", "--server", server)
    assert pause.returncode == 0, pause.stderr
    assert pause.stdout.splitlines()[1].split() == ["cli-a", "paused"]
    assert c.http.get(server + "/v1/jobs/cli-a").json()["paused"] is True
    listed = raftcron("job", "list", "--json", "--server", server)
    assert {j["id"]: j["paused"] for j in json.loads(listed.stdout)["jobs"]}["cli-a"] is True

    resume = raftcron("job", "resume", "cli-a", "--server", server)
    assert resume.returncode == 0, resume.stderr
    assert resume.stdout.splitlines()[1].split() == ["cli-a", "active"]
    assert c.http.get(server + "/v1/jobs/cli-a").json()["paused"] is False

    rm = raftcron("job", "rm", "cli-a", "--server", server)
    assert rm.returncode == 0, rm.stderr
    assert rm.stdout.splitlines()[1].split() == ["cli-a", "deleted"]
    assert c.http.get(server + "/v1/jobs/cli-a").status_code == 404
    gone = raftcron("job", "show", "cli-a", "--server", server)
    assert gone.returncode == 2
    assert "404" in one_line(gone.stderr)


def test_job_trigger_with_the_same_key_twice_is_one_occurrence(
        cli: tuple[LocalCluster, str]) -> None:
    c, server = cli
    assert raftcron("job", "add", "cli-t", "--cron", "0 0 1 1 *", "--shell", "true",
                    "--server", server).returncode == 0
    first = raftcron("job", "trigger", "cli-t", "--key", "K", "--json", "--server", server)
    second = raftcron("job", "trigger", "cli-t", "--key", "K", "--json", "--server", server)
    assert first.returncode == second.returncode == 0, (first.stderr, second.stderr)
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a["id"] == b["id"]
    assert a["duplicate"] is False and b["duplicate"] is True
    table = raftcron("job", "trigger", "cli-t", "--key", "K", "--server", server)
    assert table.returncode == 0
    assert table.stdout.splitlines()[1].split()[0] == a["id"]
    occs = c.http.get(server + "/v1/occurrences",
                      params={"job_id": "cli-t", "kind": "manual"}).json()["occurrences"]
    assert [o["id"] for o in occs] == [a["id"]]
    other = raftcron("job", "trigger", "cli-t", "--key", "K2", "--json", "--server", server)
    assert json.loads(other.stdout)["id"] != a["id"]


def test_job_backfill_prints_a_summary_on_stderr(cli: tuple[LocalCluster, str]) -> None:
    c, server = cli
    assert raftcron("job", "add", "cli-b", "--cron", "*/5 * * * *", "--shell", "true",
                    "--server", server).returncode == 0
    out = raftcron("job", "backfill", "cli-b", "--start", "2026-01-01T00:00:00Z",
                   "--end", "2026-01-01T00:29:59Z", "--server", server)
    assert out.returncode == 0, out.stderr
    progress, summary = out.stderr.strip().splitlines()
    assert progress == "backfill cli-b: 6/6 instants"
    assert summary.startswith("backfill ")
    assert summary.endswith(": 6 occurrences (6 new)"), summary
    listed = out.stdout.splitlines()
    assert listed[0] == "occurrence" and len(listed) == 7
    occs = c.http.get(server + "/v1/occurrences",
                      params={"job_id": "cli-b", "kind": "backfill"}).json()["occurrences"]
    assert {o["id"] for o in occs} == set(listed[1:])
    assert sorted(o["scheduled_for"] for o in occs) == [
        f"2026-01-01T00:{m:02d}:00Z" for m in range(0, 30, 5)]
    as_json = raftcron("job", "backfill", "cli-b", "--start", "2026-01-01T00:00:00Z",
                       "--end", "2026-01-01T00:29:59Z", "--json", "--server", server)
    assert as_json.returncode == 0 and as_json.stderr.strip() == ""
    assert json.loads(as_json.stdout)["occurrence_ids"] == listed[1:]


def test_job_backfill_of_too_many_instants_exits_2_and_creates_nothing(
        cli: tuple[LocalCluster, str]) -> None:
    c, server = cli
    assert raftcron("job", "add", "cli-big", "--cron", "* * * * * *", "--shell", "true",
                    "--server", server).returncode == 0
    # Six years of a job firing every second: 189 million instants.
    out = raftcron("job", "backfill", "cli-big", "--start", "2020-01-01T00:00:00Z",
                   "--end", "2026-01-01T00:00:00Z", "--max-instants", "500", "--server", server)
    assert out.returncode == 2
    assert "more than 500 instants of cli-big" in one_line(out.stderr)
    occs = c.http.get(server + "/v1/occurrences",
                      params={"job_id": "cli-big", "kind": "backfill"}).json()["occurrences"]
    assert occs == []
    bad = raftcron("job", "backfill", "cli-big", "--start", "2020-01-01T00:00:00Z",
                   "--end", "2020-01-01T00:00:10Z", "--max-instants", "0", "--server", server)
    assert bad.returncode == 2 and "--max-instants" in one_line(bad.stderr)


def test_job_import_creates_each_job_once_and_reruns_harmlessly(
        cli: tuple[LocalCluster, str], tmp_path: Path) -> None:
    c, server = cli
    jobs = [{"id": f"imp-{i}", "schedule": {"cron": "0 3 * * *", "timezone": "Europe/Berlin"},
             "target": {"shell": "true"}} for i in range(3)]
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(jobs))
    first = raftcron("job", "import", str(path), "--server", server, "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {"created": 3, "unchanged": 0, "updated": [],
                                         "differing": [], "refused": []}
    again = raftcron("job", "import", str(path), "--server", server, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"created": 0, "unchanged": 3, "updated": [],
                                        "differing": [], "refused": []}
    listed = c.get(next(iter(c.procs)), "/v1/jobs", params={"consistent": "true"})["jobs"]
    assert sorted(j["id"] for j in listed if j["id"].startswith("imp-")) == [
        "imp-0", "imp-1", "imp-2"]


def test_job_import_names_jobs_the_file_would_change_and_updates_them_on_request(
        cli: tuple[LocalCluster, str], tmp_path: Path) -> None:
    c, server = cli
    jobs = [{"id": f"upd-{i}", "schedule": {"cron": "0 3 * * *"}, "target": {"shell": "true"}}
            for i in range(3)]
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(jobs))
    assert raftcron("job", "import", str(path), "--server", server).returncode == 0
    jobs[1]["schedule"] = {"cron": "0 4 * * *", "timezone": "Europe/Berlin"}
    jobs[2]["target"] = {"shell": "echo edited"}
    jobs[2]["max_attempts"] = 1
    path.write_text(json.dumps(jobs))

    def server_job(job_id: str) -> dict:
        return c.get(next(iter(c.procs)), f"/v1/jobs/{job_id}", params={"consistent": "true"})

    # Without --update: named with the fields that differ, left as they are, exit 1.
    out = raftcron("job", "import", str(path), "--server", server, "--json")
    assert out.returncode == 1, out.stderr
    assert json.loads(out.stdout) == {
        "created": 0, "unchanged": 1, "updated": [], "refused": [],
        "differing": [{"id": "upd-1", "fields": ["schedule"]},
                      {"id": "upd-2", "fields": ["target", "max_attempts"]}]}
    assert "differs upd-2: target, max_attempts" in out.stderr
    assert "--update" in out.stderr
    assert server_job("upd-1")["version"] == 1
    assert server_job("upd-1")["schedule"]["cron"] == "0 3 * * *"

    # With --update: edited to the file's definitions; a paused job stays paused.
    assert c.post(next(iter(c.procs)), "/v1/jobs/upd-2/pause").status_code == 200
    out = raftcron("job", "import", str(path), "--update", "--server", server, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["updated"] == ["upd-1", "upd-2"]
    one, two = server_job("upd-1"), server_job("upd-2")
    assert (one["version"], one["schedule"]["cron"], one["schedule"]["timezone"]) == (
        2, "0 4 * * *", "Europe/Berlin")
    assert (two["version"], two["target"]["shell"], two["max_attempts"], two["paused"]) == (
        2, "echo edited", 1, True)
    again = raftcron("job", "import", str(path), "--server", server, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["unchanged"] == 3


def test_job_import_of_an_invalid_job_exits_2_naming_it(
        cli: tuple[LocalCluster, str], tmp_path: Path) -> None:
    c, server = cli
    def job(job_id: str, cron: str = "* * * * *") -> dict:
        return {"id": job_id, "schedule": {"cron": cron}, "target": {"shell": "true"}}

    path = tmp_path / "bad.json"
    path.write_text(json.dumps([job("imp-ok"), job("imp-bad", "99 * * * *")]))
    out = raftcron("job", "import", str(path), "--server", server)
    assert out.returncode == 2
    assert "jobs[1].schedule.cron" in one_line(out.stderr)
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps([job("imp-twice"), job("imp-other"),
                                 job("imp-twice", "0 * * * *")]))
    out = raftcron("job", "import", str(twice), "--server", server)
    assert out.returncode == 2
    assert "jobs[0] and jobs[2] are both job 'imp-twice'" in one_line(out.stderr)
    listed = c.get(next(iter(c.procs)), "/v1/jobs", params={"consistent": "true"})["jobs"]
    assert not {j["id"] for j in listed} & {"imp-twice", "imp-other"}  # nothing sent
    not_json = tmp_path / "x.json"
    not_json.write_text("{")
    out = raftcron("job", "import", str(not_json), "--server", server)
    assert out.returncode == 2
    assert f"{not_json} is not valid JSON" in one_line(out.stderr)


def test_status_shows_every_nodes_role(cli: tuple[LocalCluster, str]) -> None:
    c, server = cli
    out = raftcron("status", "--server", server)
    assert out.returncode == 0, out.stderr
    nodes_part, _, queues_part = out.stdout.partition("\n\n")
    rows = [line.split() for line in nodes_part.splitlines()]
    assert rows[0] == ["node", "role", "term", "epoch", "leader", "commit", "applied", "lag"]
    queue_rows = [line.split() for line in queues_part.splitlines()]
    assert queue_rows[0] in (["queues:", "none"], ["queue", "due", "oldest_wait_s"]), queue_rows
    leader = c.wait_leader()
    assert [r[0] for r in rows[1:]] == ["n1", "n2", "n3"]
    roles = {r[0]: r[1] for r in rows[1:]}
    assert roles == {n: "leader" if n == leader else "follower" for n in roles}, rows
    assert all(r[4] == leader for r in rows[1:]), rows
    as_json = json.loads(raftcron("status", "--json", "--server", server).stdout)
    assert as_json["leader_id"] == leader
    assert [n["node_id"] for n in as_json["nodes"]] == ["n1", "n2", "n3"]
    assert isinstance(as_json["queues"], list)


def test_cli_tries_the_next_server_when_one_is_down(cli: tuple[LocalCluster, str]) -> None:
    _, server = cli
    out = raftcron("status", "--json", "--server", f"http://127.0.0.1:9,{server}")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["asked_by"] in ("n1", "n2", "n3")


def test_bad_cron_on_job_add_exits_2_with_one_line(cli: tuple[LocalCluster, str]) -> None:
    c, server = cli
    out = raftcron("job", "add", "cli-bad", "--cron", "61 * * * *", "--shell", "true",
                   "--server", server)
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert "schedule.cron" in line and "400" in line
    assert out.stdout == ""
    assert c.http.get(server + "/v1/jobs/cli-bad").status_code == 404


def test_schedule_preview_across_the_dst_change() -> None:
    out = raftcron("schedule", "preview", "--cron", "30 2 * * *", "--tz", "America/New_York",
                   "--start", "2026-03-07T00:00:00Z", "--count", "3", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["scheduled_for"] for r in rows] == [
        "2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]
    assert rows[0]["local"] == "2026-03-07T02:30:00-05:00"
    assert rows[2]["local"] == "2026-03-09T02:30:00-04:00"


def test_schedule_preview_with_an_unknown_zone_exits_2() -> None:
    out = raftcron("schedule", "preview", "--cron", "* * * * *", "--tz", "Mars/Olympus")
    assert out.returncode == 2
    assert "Mars/Olympus" in one_line(out.stderr)
    assert out.stdout == ""


def test_schedule_preview_with_a_bad_cron_exits_2() -> None:
    out = raftcron("schedule", "preview", "--cron", "* * *")
    assert out.returncode == 2
    assert "schedule.cron" in one_line(out.stderr)


def test_node_config_without_secret_file_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "n1.toml"
    cfg.write_text('node_id = "n1"\ndata_dir = "n1"\nraft_addr = "127.0.0.1:1"\n'
                   "http_port = 1\n")
    out = raftcron("node", "--config", str(cfg), cwd=tmp_path)
    assert out.returncode == 2
    assert "secret" in one_line(out.stderr)
    assert not (tmp_path / "n1").exists()


def test_node_config_with_an_unreadable_secret_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "n1.toml"
    cfg.write_text('node_id = "n1"\ndata_dir = "n1"\nraft_addr = "127.0.0.1:1"\n'
                   'http_port = 1\nsecret_file = "missing.secret"\ntokens_file = "t.json"\n')
    out = raftcron("node", "--config", str(cfg), cwd=tmp_path)
    assert out.returncode == 2
    assert "secret" in one_line(out.stderr)


def test_no_server_answering_is_one_line_naming_the_servers() -> None:
    out = raftcron("status", "--server", "http://127.0.0.1:9,http://127.0.0.1:10")
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert "no server answered (http://127.0.0.1:9, http://127.0.0.1:10)" in line, line
    assert "[0 " not in line


def test_backup_to_a_path_it_cannot_write_exits_2_with_one_line(tmp_path: Path) -> None:
    for out, says in ((tmp_path / "no" / "x.db", "does not exist"),
                      (tmp_path, "is a directory")):
        res = raftcron("backup", "--out", str(out), "--force", "--server",
                       "http://127.0.0.1:9")
        assert res.returncode == 2
        assert says in one_line(res.stderr)


def test_up_with_ports_out_of_range_exits_2_with_one_line(tmp_path: Path) -> None:
    res = raftcron("up", "--port-base", "70000", "--data-dir", str(tmp_path / "c"))
    assert res.returncode == 2
    assert "--port-base must be between" in one_line(res.stderr)
    assert not (tmp_path / "c").exists()


def test_job_add_with_two_kinds_of_target_exits_2_with_one_line() -> None:
    res = raftcron("job", "add", "two", "--cron", "* * * * *", "--shell", "true", "--url",
                   "http://127.0.0.1:9/x", "--server", "http://127.0.0.1:9")
    assert res.returncode == 2
    assert "--shell and --url" in one_line(res.stderr)


def test_node_whose_raft_port_is_taken_exits_2_with_one_line(tmp_path: Path) -> None:
    base = free_port_base(3)
    write_cluster_configs(tmp_path, 3, base)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 100))  # n1's Raft port
        taken.listen()
        res = raftcron("node", "--config", str(tmp_path / "n1.toml"))
    assert res.returncode == 2
    assert f"cannot listen for Raft on 127.0.0.1:{base + 100}" in one_line(res.stderr)


def test_restore_from_a_directory_says_so(tmp_path: Path) -> None:
    res = raftcron("restore", "--from", str(tmp_path), "--data-dir", str(tmp_path / "d"))
    assert res.returncode == 2
    assert "is a directory, not a backup file" in one_line(res.stderr)
