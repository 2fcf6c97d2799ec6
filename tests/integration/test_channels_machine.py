"""The state machine on real SQLite: channels, a job's channel references, and the
`job.recovered` event (state.channels)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raftcron.core import commands as c
from raftcron.core.channels import parse_channel
from raftcron.core.protocol import NOTIFY_CHANNELS, required
from tests.integration.test_machine import MIN, T0, Node
from tests.integration.test_run_alerts import run

SLACK = {"slack": {"webhook_url": "https://hooks.example/T/B/x"}}


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path / "state.db")
    n.begin(1)
    return n


def put(n: Node, name: str, body: dict) -> dict:
    return n.apply(c.PutChannel(n.rid(), T0, parse_channel(body, name).to_spec()))


def recovered(n: Node) -> list[dict]:
    return [json.loads(p) for (p,) in n.q(
        "SELECT payload FROM outbox WHERE event = 'job.recovered' ORDER BY id")]


def test_names_are_cluster_wide_and_a_named_channel_is_not_deleted(node: Node) -> None:
    assert put(node, "ops", SLACK)["created"]
    assert put(node, "ops", SLACK)["created"] is False
    taken = put(node, "ops", {**SLACK, "tenant": "acme"})
    assert taken["rejected"] == "already_exists" and taken["field"] == "name"
    node.create("j", notify=[{"channel": "ops"}])
    busy = node.apply(c.DeleteChannel(node.rid(), T0, "ops"))
    assert busy["rejected"] == "conflict" and busy["jobs"] == ["j"]
    hidden = node.apply(c.DeleteChannel(node.rid(), T0, "ops", tenants=["acme"]))
    assert hidden["rejected"] == "not_found"
    assert node.apply(c.DeleteJob(node.rid(), T0, "j"))["ok"]
    assert node.apply(c.DeleteChannel(node.rid(), T0, "ops"))["deleted"]


def test_a_job_names_only_its_own_tenants_existing_channels(node: Node) -> None:
    assert put(node, "acme-ops", {**SLACK, "tenant": "acme"})["ok"]
    r = node.apply(c.PutJob(node.rid(), T0, {**_spec("j"), "notify": [
        "https://example.com/h", {"channel": "acme-ops"}]}, True))
    assert r["rejected"] == "invalid_reference" and r["field"] == "notify.1.channel"
    r = node.apply(c.PutJob(node.rid(), T0, {**_spec("j"), "notify": [{"channel": "x"}]},
                            True))
    assert r["field"] == "notify.0.channel"


def test_first_success_after_a_failure_is_one_recovery(node: Node) -> None:
    assert put(node, "ops", SLACK)["ok"]
    node.create("j", now=T0, max_attempts=1, notify=[{"channel": "ops"}])
    run(node, "j", T0 + MIN, 1)
    assert recovered(node) == []  # no trouble before: a success is no recovery
    run(node, "j", T0 + 2 * MIN, 1, "failed")
    run(node, "j", T0 + 3 * MIN, 1, "failed")
    run(node, "j", T0 + 4 * MIN, 1)
    run(node, "j", T0 + 5 * MIN, 1)
    got = recovered(node)
    assert len(got) == 1 and got[0]["after"] == "occurrence.failed"
    assert got[0]["since_ms"] == T0 + 2 * MIN + 1000
    assert node.q("SELECT * FROM channel_trouble") == []


def test_jobs_without_channels_write_nothing_new(node: Node) -> None:
    node.create("plain", now=T0, max_attempts=1, notify=["https://example.com/h"])
    run(node, "plain", T0 + MIN, 1, "failed")
    run(node, "plain", T0 + 2 * MIN, 1)
    assert recovered(node) == [] and node.q("SELECT * FROM channel_trouble") == []


def test_channel_features_need_level_2() -> None:
    assert required(c.PutChannel("r", 1, {})).level == 2
    assert required(c.DeleteChannel("r", 1, "x")).level == 2
    assert required(c.PutJob("r", 1, {**_spec("j"), "notify": [{"channel": "a"}]},
                             True)) == NOTIFY_CHANNELS
    assert required(c.PutJob("r", 1, {**_spec("j"), "notify": ["https://a.b/"]}, True)) is None


def _spec(job_id: str) -> dict:
    from raftcron.core.model import parse_job
    return parse_job({"id": job_id, "schedule": {"cron": "* * * * *"},
                      "target": {"shell": "true"}}).to_spec()
