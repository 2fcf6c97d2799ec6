"""`raftcron import`: crontabs and Kubernetes CronJobs as jobs files (pure importers).

Real-world inputs (Debian's stock /etc/crontab, a crontab with every odd feature, CronJobs
in the documentation's shape); every job imported is accepted by the API's parser, every
line or field not mapped is in the report, and the next fire times are those cron (cronsim,
an implementation of Debian cron's rules) would give.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml
from cronsim import CronSim

from raftcron.core.importers.cronjob import import_cronjobs
from raftcron.core.importers.crontab import import_crontab, job_id_for, split_percent
from raftcron.core.model import parse_job
from raftcron.core.schedule import compile_schedule

FIXTURES = Path(__file__).parent.parent / "fixtures" / "imports"
START = int(datetime(2026, 3, 20, tzinfo=UTC).timestamp())  # a Berlin DST change ahead


MACROS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
          "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *"}


def cron_fires(cron: str, tz: str, n: int) -> list[int]:
    it = CronSim(MACROS.get(cron, cron), datetime.fromtimestamp(START, ZoneInfo(tz)))
    return [int(next(it).timestamp()) for _ in range(n)]


def our_fires(schedule: dict[str, str], n: int) -> list[int]:
    compiled = compile_schedule(schedule["cron"], schedule["timezone"])
    out = []
    for fire in compiled.iter_between(START, START + 400 * 86_400):
        out.append(fire)
        if len(out) == n:
            break
    return out


def test_debians_stock_etc_crontab() -> None:
    got = import_crontab((FIXTURES / "debian-etc-crontab").read_text(), name="/etc/crontab",
                         system=True)
    assert [j["schedule"]["cron"] for j in got.jobs] == [
        "17 * * * *", "25 6 * * *", "47 6 * * 7", "52 6 1 * *"]
    for job in got.jobs:
        parse_job(job)
        assert job["labels"] == {"source": "crontab", "cron-user": "root"}
        # The user field is not part of the command; PATH is exported; SHELL=/bin/sh is
        # the worker's own.
        shell = job["target"]["shell"]
        assert shell.startswith("export PATH=/usr/local/sbin:/usr/local/bin:/sbin:/bin:")
        assert "root" not in shell.splitlines()[-1] and "run-parts" in shell
        assert "exec /bin/sh" not in shell
    assert sum("runs as user root" in n.message for n in got.notes) == 4
    for job in got.jobs:
        assert our_fires(job["schedule"], 5) == cron_fires(job["schedule"]["cron"], "UTC", 5)


def test_every_odd_feature_of_a_user_crontab() -> None:
    got = import_crontab((FIXTURES / "odd-crontab").read_text(), name="odd", timezone="UTC")
    by_cron = {j.get("schedule", {}).get("cron"): j for j in got.jobs}
    for job in got.jobs:
        parse_job(job)
    notes = {n.where: (n.severity, n.message) for n in got.notes}
    assert notes["odd:2"][0] == "note" and "MAILTO=ops@example.com" in notes["odd:2"][1]
    assert notes["odd:14"][0] == "refused" and "@reboot" in notes["odd:14"][1]
    assert notes["odd:23"][0] == "refused" and "Mars/Olympus" in notes["odd:23"][1]
    assert notes["odd:27"][0] == "refused" and "61" in notes["odd:27"][1]
    assert notes["odd:28"] == ("refused", "needs five time fields and a command")
    # SHELL runs the command; other assignments are exported, quotes stripped.
    poll = by_cron["*/15 9-17 * * mon-fri"]["target"]["shell"]
    assert poll.splitlines() == ["export GREETING='hello world'",
                                 "export PATH=/usr/local/bin:/usr/bin:/bin",
                                 "exec /bin/bash -c '/usr/local/bin/poll --quiet'"]
    assert by_cron["@hourly"] and by_cron["@daily"]
    # The same command on two lines under CRON_TZ: one job, two schedules, in Berlin.
    invoices = next(j for j in got.jobs if "send-invoices" in j["target"]["shell"])
    assert [(s["cron"], s["timezone"]) for s in invoices["schedules"]] == [
        ("0 9 * * 1-5", "Europe/Berlin"), ("0 9 * * 6", "Europe/Berlin")]
    # After the bad zone, the entries stay in the last good one.
    after = next(j for j in got.jobs if "after-bad-zone" in j["target"]["shell"])
    assert after["schedule"]["timezone"] == "Europe/Berlin"
    for job in got.jobs:
        for s in job.get("schedules", [job.get("schedule")]):
            assert our_fires(s, 8) == cron_fires(s["cron"], s["timezone"], 8), s


def test_percent_is_standard_input_as_cron_means_it(tmp_path: Path) -> None:
    assert split_percent("cat") == ("cat", None)
    assert split_percent("mail -s hi x%Dear,%bye%") == ("mail -s hi x", "Dear,\nbye\n")
    assert split_percent(r"date +\%Y%in") == ("date +%Y", "in")
    got = import_crontab("0 8 * * * tr a-z A-Z > out%one%two\n* * * * * printf \\%s x > p\n",
                         name="pct")
    for job in got.jobs:
        subprocess.run(["/bin/sh", "-c", job["target"]["shell"]], cwd=tmp_path, check=True)
    assert (tmp_path / "out").read_text() == "ONE\nTWO"
    assert (tmp_path / "p").read_text() == "x"


def test_ids_are_stable_and_come_from_the_command() -> None:
    text = (FIXTURES / "odd-crontab").read_text()
    first = [j["id"] for j in import_crontab(text).jobs]
    assert first == [j["id"] for j in import_crontab(text).jobs]
    assert len(set(first)) == len(first)
    assert job_id_for("/usr/bin/backup", None) != job_id_for("/usr/bin/backup", "root")
    assert job_id_for("/usr/bin/backup", None).startswith("cron-usr-bin-backup-")
    # A command of no word characters still gets a valid id.
    parse_job({"id": job_id_for("%%%", None), "schedule": "* * * * *",
               "target": {"shell": "true"}})


@pytest.mark.parametrize("text", ["", "\n\n# only comments\n", "FOO=bar\n"])
def test_an_empty_crontab_imports_nothing_and_says_nothing_wrong(text: str) -> None:
    got = import_crontab(text)
    assert got.jobs == [] and not [n for n in got.notes if n.severity == "refused"]


def test_a_huge_crontab_line_is_refused_by_the_parser_not_crashed_on() -> None:
    got = import_crontab("* * * * * " + "x" * 100_000 + "\n" + "(" * 200_000 + "\n")
    assert len(got.notes) >= 1
    for job in got.jobs:
        with pytest.raises(Exception):  # noqa: B017 - the API's own refusal, whichever
            parse_job(job)


def test_kubernetes_cronjobs_in_the_documentations_shape() -> None:
    docs = list(yaml.safe_load_all((FIXTURES / "cronjobs.yaml").read_text()))
    got = import_cronjobs(docs, name="k8s.yaml")
    assert [j["id"] for j in got.jobs] == ["hello", "billing.nightly-report"]
    for job in got.jobs:
        parse_job(job)
    hello, report = got.jobs
    assert hello["target"] == {"shell": "/bin/sh -c 'date; echo Hello from the Kubernetes "
                                        "cluster'"}
    assert hello["max_attempts"] == 7  # backoffLimit's default 6, plus the first try
    assert report["schedule"] == {"cron": "30 2 * * 1-5", "timezone": "Europe/Berlin"}
    assert report["paused"] is True and report["overlap_policy"] == "forbid"
    assert report["misfire_policy"] == "run_once" and report["misfire_grace_s"] == 200
    assert report["max_runtime_s"] == 3600 and report["max_attempts"] == 3
    assert report["labels"] == {"team": "billing", "source": "cronjob"}
    assert report["target"]["shell"] == ("python -m report --since yesterday --title "
                                         "'Nightly report'")
    text = "\n".join(str(n) for n in got.notes)
    for expected in ("busybox:1.28", "container env is not imported",
                     "app.kubernetes.io/name", "kind 'ConfigMap' is not a CronJob",
                     "spec.successfulJobsHistoryLimit has no counterpart",
                     "pod spec.restartPolicy", "container imagePullPolicy",
                     "entrypoint-only", "no command or args"):
        assert expected in text, expected
    # Kubernetes reads the schedule as cron does (robfig/cron, standard five fields).
    for job in got.jobs:
        s = job["schedule"]
        assert our_fires(s, 6) == cron_fires(s["cron"], s["timezone"], 6)


@pytest.mark.parametrize("doc", [None, [], "text", {"kind": "CronJob"},
                                 {"kind": "CronJob", "metadata": {"name": "x"}},
                                 {"kind": "CronJob", "metadata": {"name": "x"},
                                  "spec": {"schedule": "nope"}}])
def test_broken_manifests_are_reported_not_crashed_on(doc: object) -> None:
    got = import_cronjobs([doc], name="bad.yaml")
    assert got.jobs == []
    assert doc is None or any(n.severity == "refused" for n in got.notes)
