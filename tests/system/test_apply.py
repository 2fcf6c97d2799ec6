"""Jobs as code on real nodes: `raftcron apply -f`, `export` and `import`, as a subprocess.

Create, change (field by field, secrets as ***), an idempotent second apply (`0 changed`),
prune (within the tenant and the selector only), a conflict (a job edited between the plan
and the apply is refused whole), an invalid file (nothing applied, exit 2 naming the file,
the job and the field), another tenant's token (refused), `export` then `apply` (0 changed),
and a crontab imported and applied, its next fire times those cron would give.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftcron.core.timefmt import parse_iso_ms
from raftcron.testing import LocalCluster
from tests.system.test_cli import TOKEN, one_line, raftcron

pytestmark = pytest.mark.system

JOBS_TOML = """
[[jobs]]
id = "report"
schedule = {cron = "0 9 * * 1-5", timezone = "Europe/Berlin"}
target = {shell = "echo report"}
labels = {team = "billing"}

[[jobs]]
id = "hook"
schedule = {cron = "*/5 * * * *"}
labels = {team = "billing"}
[jobs.target.http]
url = "https://hooks.example/run"
headers = {Authorization = "Bearer s3cret-value", X-Api = {secret = "billing-api"}}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, str]]:
    c = LocalCluster(Path(tmp_path_factory.mktemp("apply")))
    TOKEN["admin"] = c.admin_token
    c.start()
    try:
        c.wait_leader(timeout=30)
        c.wait_serving()
        yield c, ",".join(c.urls.values())
    finally:
        TOKEN.clear()
        c.close()


def jobs_of(c: LocalCluster, tenant: str) -> dict[str, dict]:
    page = c.http.get(c.urls[c.ids[0]] + "/v1/jobs",
                      params={"tenant": tenant, "limit": 500, "consistent": "true"}).json()
    return {j["id"]: j for j in page["jobs"]}


def test_create_change_idempotent_prune(cluster: tuple[LocalCluster, str],
                                        tmp_path: Path) -> None:
    c, server = cluster
    path = tmp_path / "jobs.toml"
    path.write_text(JOBS_TOML)
    dry = raftcron("apply", "-f", str(path), "--tenant", "billing", "--dry-run",
                   "--server", server)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == ["+ create report", "+ create hook",
                                       "2 to create, 0 to change, 0 to delete, 0 unchanged"]
    assert jobs_of(c, "billing") == {}, "a dry run changes nothing"
    first = raftcron("apply", "-f", str(path), "--tenant", "billing", "--server", server)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "applied: 2 created, 0 changed, 0 deleted"
    stored = jobs_of(c, "billing")
    assert set(stored) == {"report", "hook"}
    assert stored["hook"]["target"]["http"]["headers"]["X-Api"] == {"secret": "billing-api"}
    again = raftcron("apply", "-f", str(path), "--tenant", "billing", "--server", server)
    assert again.returncode == 0 and again.stdout.strip() == "0 changed (2 unchanged)"
    assert {j["version"] for j in jobs_of(c, "billing").values()} == {1}

    # A change, field by field; a changed secret is named, never shown.
    path.write_text(JOBS_TOML.replace("0 9 * * 1-5", "30 9 * * 1-5")
                    .replace("s3cret-value", "n3w-value"))
    changed = raftcron("apply", "-f", str(path), "--tenant", "billing", "--server", server)
    assert changed.returncode == 0, changed.stderr
    assert changed.stdout.splitlines() == [
        "~ change report",
        '    schedule.cron: "0 9 * * 1-5" → "30 9 * * 1-5"',
        "~ change hook",
        '    target.http.headers.Authorization: "***" → "***"',
        "0 to create, 2 to change, 0 to delete, 0 unchanged",
        "applied: 0 created, 2 changed, 0 deleted"]
    assert "n3w-value" not in changed.stdout + changed.stderr

    # Prune: only this tenant's jobs, and only those matching the selector.
    assert c.post(c.ids[0], "/v1/jobs", {"id": "stray", "tenant": "billing",
                                         "schedule": "0 0 * * *", "target": {"shell": "true"},
                                         "labels": {"team": "billing"}}).status_code == 201
    assert c.post(c.ids[0], "/v1/jobs", {"id": "other-team", "tenant": "billing",
                                         "schedule": "0 0 * * *", "target": {"shell": "true"},
                                         "labels": {"team": "ops"}}).status_code == 201
    assert c.post(c.ids[0], "/v1/jobs", {"id": "elsewhere", "tenant": "acme",
                                         "schedule": "0 0 * * *", "target": {"shell": "true"},
                                         "labels": {"team": "billing"}}).status_code == 201
    pruned = raftcron("apply", "-f", str(path), "--tenant", "billing", "--prune",
                      "--selector", "team=billing", "--server", server)
    assert pruned.returncode == 0, pruned.stderr
    assert "- delete stray" in pruned.stdout and "other-team" not in pruned.stdout
    assert set(jobs_of(c, "billing")) == {"report", "hook", "other-team"}
    assert set(jobs_of(c, "acme")) == {"elsewhere"}


def test_a_job_edited_between_plan_and_apply_is_refused_whole(
        cluster: tuple[LocalCluster, str]) -> None:
    c, _ = cluster
    url = c.urls[c.ids[1]] + "/v1/jobs:apply"
    base = {"tenant": "conflict", "jobs": [
        {"id": "c-a", "schedule": "0 1 * * *", "target": {"shell": "true"}},
        {"id": "c-b", "schedule": "0 2 * * *", "target": {"shell": "true"}}]}
    plan = c.http.post(url, json={**base, "dry_run": True}).json()
    assert c.http.post(url, json={**base, "expect": plan["expect"]}).status_code == 200
    new = {**base, "jobs": [{**base["jobs"][0], "queue": "q2"},
                            {**base["jobs"][1], "queue": "q2"},
                            {"id": "c-new", "schedule": "0 3 * * *", "target": {"shell": "true"}}]}
    plan = c.http.post(url, json={**new, "dry_run": True}).json()
    assert [x["id"] for x in plan["change"]] == ["c-a", "c-b"]
    # Someone else edits c-b after the plan was shown.
    edited = c.http.put(c.urls[c.ids[0]] + "/v1/jobs/c-b", json={
        "schedule": "0 4 * * *", "target": {"shell": "true"}, "tenant": "conflict"})
    assert edited.status_code == 200, edited.text
    refused = c.http.post(url, json={**new, "expect": plan["expect"]})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["field"] == "expect.c-b"
    after = jobs_of(c, "conflict")
    assert set(after) == {"c-a", "c-b"} and after["c-a"]["queue"] == "default"
    assert after["c-b"]["schedule"]["cron"] == "0 4 * * *"
    # A replayed plan with the same (stale) expect is refused again, not half-applied.
    assert c.http.post(url, json={**new, "expect": plan["expect"]}).status_code == 409


def test_an_invalid_file_changes_nothing_and_names_file_job_and_field(
        cluster: tuple[LocalCluster, str], tmp_path: Path) -> None:
    c, server = cluster
    good = tmp_path / "a-good.yaml"
    good.write_text("jobs:\n- id: fine\n  schedule: '0 0 * * *'\n  target: {shell: 'true'}\n")
    bad = tmp_path / "b-bad.json"
    bad.write_text(json.dumps({"jobs": [
        {"id": "ok", "schedule": "0 0 * * *", "target": {"shell": "true"}},
        {"id": "broken", "schedule": {"cron": "61 * * * *"}, "target": {"shell": "true"}}]}))
    run = raftcron("apply", "-f", str(tmp_path), "--tenant", "invalid", "--server", server)
    assert run.returncode == 2
    line = one_line(run.stderr)
    assert str(bad) in line and "jobs[1] (broken)" in line and "schedule.cron" in line
    assert jobs_of(c, "invalid") == {}
    for text, expected in (("[" * 200_000, "nested too deeply"), ("", "jobs"),
                           ("jobs = 3", "must be a list")):
        (tmp_path / "b-bad.json").unlink(missing_ok=True)
        weird = tmp_path / "w.toml" if "jobs =" in text else tmp_path / "w.json"
        weird.write_text(text)
        run = raftcron("apply", "-f", str(weird), "--server", server)
        if text == "":
            assert run.returncode == 2 and "Traceback" not in run.stderr
        else:
            assert run.returncode == 2 and expected in one_line(run.stderr), run.stderr
        weird.unlink()
    assert jobs_of(c, "invalid") == {}


def test_another_tenants_token_cannot_apply_into_yours(
        cluster: tuple[LocalCluster, str], tmp_path: Path) -> None:
    c, server = cluster
    mine = c.create_token("tenant:mine", name="mine")
    theirs = c.create_token("tenant:theirs", name="theirs")
    reader = c.create_token("read", name="reader")
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps({"jobs": [
        {"id": "mine-1", "schedule": "0 0 * * *", "target": {"shell": "true"}}]}))
    ok = raftcron("apply", "-f", str(path), "--server", server, token=mine)
    assert ok.returncode == 0, ok.stderr
    assert set(jobs_of(c, "mine")) == {"mine-1"}, "a tenant token applies into its tenant"
    for token in (theirs, reader):
        run = raftcron("apply", "-f", str(path), "--tenant", "mine", "--prune", "--server",
                       server, token=token)
        assert run.returncode == 1 and "403" in one_line(run.stderr), run.stderr
    # A job id of another tenant in your file: refused, theirs untouched.
    path.write_text(json.dumps({"jobs": [
        {"id": "mine-1", "schedule": "0 5 * * *", "target": {"shell": "true"}}]}))
    run = raftcron("apply", "-f", str(path), "--server", server, token=theirs)
    assert run.returncode == 1 and "another tenant" in one_line(run.stderr)
    assert jobs_of(c, "mine")["mine-1"]["schedule"]["cron"] == "0 0 * * *"


@pytest.mark.parametrize("fmt", ["toml", "yaml", "json"])
def test_export_then_apply_is_zero_changed(cluster: tuple[LocalCluster, str], tmp_path: Path,
                                           fmt: str) -> None:
    c, server = cluster
    tenant = f"round-{fmt}"
    body = {"tenant": tenant, "jobs": [
        {"id": f"{tenant}-http", "schedules": [{"cron": "0 9 * * *", "timezone": "Asia/Tokyo"},
                                               {"cron": "0 18 * * 5", "name": "friday"}],
         "target": {"http": {"url": "https://u:p@example.com/x",
                             "headers": {"Authorization": "Bearer t"}}},
         "max_runtime_s": 30, "paused": True, "notify": ["https://n.example/h"]},
        {"id": f"{tenant}-sh", "schedule": "@daily", "target": {"shell": "echo 'a b'\nexit 0"}}]}
    url = c.urls[c.ids[0]] + "/v1/jobs:apply"
    plan = c.http.post(url, json={**body, "dry_run": True}).json()
    assert c.http.post(url, json={**body, "expect": plan["expect"]}).status_code == 200
    out = tmp_path / f"export.{fmt}"
    exported = raftcron("export", "--tenant", tenant, "--format", fmt, "--out", str(out),
                        "--server", server)
    assert exported.returncode == 0, exported.stderr
    assert "Bearer t" not in out.read_text() and "u:p@" not in out.read_text()
    again = raftcron("apply", "-f", str(out), "--tenant", tenant, "--server", server)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "0 changed (2 unchanged)"
    stored = c.http.get(c.urls[c.ids[0]] + f"/v1/jobs/{tenant}-http").json()
    assert stored["target"]["http"]["headers"]["Authorization"] == "Bearer t"


def test_a_crontab_imported_applied_and_fired_as_cron_would(
        cluster: tuple[LocalCluster, str], tmp_path: Path) -> None:
    c, server = cluster
    crontab = tmp_path / "crontab"
    crontab.write_text("CRON_TZ=Europe/Berlin\n*/2 * * * * echo tick\n"
                       "17 6 * * 1-5 /usr/bin/report%to ops%\n@reboot /bin/agent\n")
    out = tmp_path / "jobs.toml"
    imported = raftcron("import", "crontab", str(crontab), "--tenant", "imported",
                        "--out", str(out))
    assert imported.returncode == 0, imported.stderr
    assert "@reboot" in imported.stderr and "refused" in imported.stderr
    assert "import: 2 job(s) written, 1 refused" in imported.stderr
    applied = raftcron("apply", "-f", str(out), "--tenant", "imported", "--server", server)
    assert applied.returncode == 0, applied.stderr
    jobs = jobs_of(c, "imported")
    assert len(jobs) == 2
    for needle, cron in (("report", "17 6 * * 1-5"), ("tick", "*/2 * * * *")):
        job = next(j for j in jobs.values() if needle in j["target"]["shell"])
        detail = c.http.get(c.urls[c.ids[1]] + f"/v1/jobs/{job['id']}").json()
        nexts = [parse_iso_ms(f["utc"], "utc") // 1000 for f in detail["next_fire_times"]]
        # cronsim (Debian cron's rules) from just before the first: the same instants.
        assert len(nexts) == 5
        assert nexts == cron_fires_from(nexts[0] - 1, cron, "Europe/Berlin", len(nexts))
    reimport = raftcron("import", "crontab", str(crontab), "--tenant", "imported")
    assert reimport.returncode == 0 and reimport.stdout == out.read_text(), "stable ids"


def cron_fires_from(after: int, cron: str, tz: str, n: int) -> list[int]:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from cronsim import CronSim

    it = CronSim(cron, datetime.fromtimestamp(after, ZoneInfo(tz)))
    return [int(next(it).timestamp()) for _ in range(n)]
