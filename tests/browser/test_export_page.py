"""The status page offers the jobs export: a file `raftcron apply -f` reads back unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from raftcron.testing import LocalCluster
from tests.browser.test_status_page import open_page
from tests.system.helpers import add_job
from tests.system.test_cli import raftcron

pytestmark = pytest.mark.system


def test_the_page_downloads_the_jobs_file_and_apply_reads_it_back(
        cluster: LocalCluster, browser: Any, tmp_path: Path) -> None:
    c = cluster
    leader = c.wait_leader()
    add_job(c, leader, "exported-a", cron="0 9 * * *", tenant="exports")
    add_job(c, leader, "exported-b", cron="*/5 * * * *", tenant="exports",
            target={"http": {"url": "https://x.example/h", "headers": {"X-Key": "k3y"}}})
    page = browser.new_page()
    try:
        open_page(page, c.urls[leader] + "/", c.admin_token)
        page.get_by_label("Export jobs as").select_option("yaml")
        with page.expect_download() as got:
            page.get_by_role("button", name="Download jobs file").click()
        path = tmp_path / "jobs.yaml"
        got.value.save_as(path)
        assert got.value.suggested_filename == "jobs.yaml"
    finally:
        page.close()
    text = path.read_text()
    ids = {j["id"] for j in yaml.safe_load(text)["jobs"]}
    assert {"exported-a", "exported-b"} <= ids
    assert "k3y" not in text
    mine = tmp_path / "exports.yaml"
    mine.write_text(yaml.safe_dump({"jobs": [
        j for j in yaml.safe_load(text)["jobs"] if j["tenant"] == "exports"]}))
    run = raftcron("apply", "-f", str(mine), "--tenant", "exports", "--server",
                   c.urls[leader], token=c.admin_token)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "0 changed (2 unchanged)"
