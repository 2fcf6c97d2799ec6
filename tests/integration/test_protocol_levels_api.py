"""The API on a state at protocol level 1 (a cluster with a node of the previous build):
every request that would write a level-2 entry is refused with 409 naming the feature,
before anything is proposed; level-1 writes work as before; the permission checks come
first (a principal that may not act learns nothing of the level); once the level is
committed the same requests work. Real app, codec, state machine and tokens, in-process."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from raftcron.api import context
from raftcron.core import commands as c
from raftcron.core import identity, protocol
from raftcron.core.model import parse_job
from raftcron.state.digest import digest
from raftcron.testing import commit_protocol_level
from tests.integration.inprocess import InProcessNode, api_client

T0 = 1_767_225_600_000
AT = T0 + 60_000
RUN = identity.scheduled_occurrence_id("invoices", AT)
JOB = {"id": "new", "tenant": "acme", "schedule": "0 9 * * *", "target": {"shell": "true"}}
CALENDAR = {"tenant": "acme", "timezone": "UTC", "exclude": [{"date": "2030-12-25"}]}


class OldCluster:
    """One in-process node whose state has no committed level, with a queued run."""

    def __init__(self, root: Path) -> None:
        self.node = InProcessNode(root, level=None)
        self.tokens = self.node.require_tokens(root)
        self.apply(c.BeginEpoch(1, "n1", T0))
        spec = parse_job({**JOB, "id": "invoices", "schedule": "* * * * *"}).to_spec()
        assert self.apply(c.PutJob("put-invoices", T0, spec, True))["ok"]
        assert self.apply(c.Claim(1, AT, [["invoices", 1, AT, AT, "fire"]]))["ok"]

    def apply(self, cmd: c.Command) -> dict[str, Any]:
        return self.node.machine.apply(self.node.machine.last_applied + 1, cmd)

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


def spy_on_proposals(node: InProcessNode) -> list[c.Command]:
    proposed: list[c.Command] = []
    propose = node.proposer.propose

    async def spy(cmd: c.Command, timeout: float = 8.0) -> dict[str, Any]:
        proposed.append(cmd)
        return await propose(cmd, timeout)

    node.proposer.propose = spy  # type: ignore[method-assign]
    return proposed


@pytest.fixture
def cluster(tmp_path: Path) -> OldCluster:
    return OldCluster(tmp_path)


GATED: list[tuple[str, str, Any, str, str | None]] = [
    ("PUT", "/v1/calendars/holidays", CALENDAR, "calendars", None),
    ("POST", "/v1/jobs:pause", {"tenant": "acme", "note": "freeze"}, "bulk pause", None),
    ("POST", "/v1/jobs:resume", {"tenant": "acme", "note": "thaw"}, "bulk pause", None),
    ("POST", f"/v1/occurrences/{RUN}/cancel", {"note": "wrong month"}, "cancel", None),
    ("PUT", "/v1/concurrency-groups/db", {"tenant": "acme", "limit": 2},
     "concurrency groups", None),
    ("POST", "/v1/jobs", {**JOB, "labels": {"team": "billing"}}, "labels", "labels"),
    ("POST", "/v1/jobs", {**JOB, "calendars": ["holidays"]}, "calendars", "calendars"),
    ("POST", "/v1/jobs", {**JOB, "concurrency_group": "db"}, "concurrency groups",
     "concurrency_group"),
    ("POST", "/v1/jobs", {**JOB, "max_duration_s": 60}, "run bounds", "max_duration_s"),
    ("POST", "/v1/jobs", {key: v for key, v in JOB.items() if key != "schedule"}
     | {"schedules": ["0 9 * * *", "0 12 * * 6"]}, "several schedules", "schedules"),
    ("PUT", "/v1/jobs/invoices", {**JOB, "id": "invoices", "schedule": "* * * * *",
                                  "start_deadline_s": 30}, "run bounds", "start_deadline_s"),
    ("POST", "/v1/jobs:batchCreate", {"jobs": [JOB, {**JOB, "id": "n2", "labels": {"a": "b"}}]},
     "labels", "labels"),
]


@pytest.mark.parametrize(("method", "path", "body", "feature", "field"), GATED,
                         ids=[f"{g[0]} {g[1]} {g[3]}" for g in GATED])
async def test_a_level_2_write_is_refused_naming_the_feature(
        cluster: OldCluster, method: str, path: str, body: Any, feature: str,
        field: str | None) -> None:
    before = digest(cluster.node.writer)
    proposed = spy_on_proposals(cluster.node)
    async with api_client(cluster.node) as client:
        resp = await client.request(method, path, json=body, headers=cluster.auth("ops"))
    assert resp.status_code == 409, resp.text
    err = resp.json()["error"]
    assert err == {"code": "cluster_not_upgraded",
                   "message": f"{feature} needs protocol level 2: cluster not fully "
                              "upgraded (level 1 of 2)",
                   **({"field": field} if field else {}),
                   "feature": feature, "cluster_level": 1, "required_level": 2}
    # Refused before proposing (a barrier a route reads behind is level 1), nothing written.
    assert [p for p in proposed if protocol.required(p) is not None] == []
    assert digest(cluster.node.writer) == before


async def test_level_1_writes_work_as_before(cluster: OldCluster) -> None:
    async with api_client(cluster.node) as client:
        resp = await client.post("/v1/jobs", json=JOB, headers=cluster.auth("acme-bot"))
        assert resp.status_code == 201, resp.text
        resp = await client.post("/v1/jobs/new/pause", headers=cluster.auth("acme-bot"))
        assert resp.status_code == 200, resp.text
    # Written as the previous build writes them: no `who`, and no history of edits (that
    # build has no such table; the states must stay alike until the level is raised).
    assert cluster.node.writer.execute("SELECT count(*) FROM job_history").fetchone()[0] == 0


@pytest.mark.parametrize(("who", "method", "path", "body", "status"), [
    ("other-bot", "POST", f"/v1/occurrences/{RUN}/cancel", {"note": "x"}, 404),
    ("reader", "POST", f"/v1/occurrences/{RUN}/cancel", {"note": "x"}, 403),
    ("reader", "PUT", "/v1/calendars/holidays", CALENDAR, 403),
    ("other-bot", "PUT", "/v1/calendars/holidays", CALENDAR, 403),
    ("runner", "PUT", "/v1/concurrency-groups/db", {"tenant": "acme", "limit": 2}, 403),
    (None, "PUT", "/v1/calendars/holidays", CALENDAR, 401),
])
async def test_the_wrong_principal_is_refused_first(
        cluster: OldCluster, who: str | None, method: str, path: str, body: Any,
        status: int) -> None:
    """The level is not a way around, or a window into, the permission checks."""
    headers = cluster.auth(who) if who else {}
    async with api_client(cluster.node) as client:
        resp = await client.request(method, path, json=body, headers=headers)
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["code"] != "cluster_not_upgraded"


async def test_once_the_level_is_committed_the_same_requests_work(cluster: OldCluster) -> None:
    assert cluster.apply(c.SetClusterLevel(1, T0, 2))["raised"]
    async with api_client(cluster.node) as client:
        resp = await client.put("/v1/calendars/holidays", json=CALENDAR,
                                headers=cluster.auth("acme-bot"))
        assert resp.status_code == 201, resp.text
        resp = await client.post(f"/v1/occurrences/{RUN}/cancel", json={"note": "x"},
                                 headers=cluster.auth("acme-bot"))
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "cancelled"


async def test_a_node_speaking_level_1_refuses_them_even_at_level_2(cluster: OldCluster) -> None:
    """Never above what the node itself reads (the emulated previous build)."""
    assert cluster.apply(c.SetClusterLevel(1, T0, 2))["raised"]
    cluster.node.protocol_level = 1
    async with api_client(cluster.node) as client:
        resp = await client.put("/v1/calendars/holidays", json=CALENDAR,
                                headers=cluster.auth("ops"))
    assert resp.status_code == 409, resp.text
    assert "(level 1 of 2)" in resp.json()["error"]["message"]


async def test_a_write_waits_for_a_raise_every_member_already_announced(
        cluster: OldCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A brand-new cluster: every member announced level 2 and the leader's raise is about
    to be applied here. The write waits for it instead of being refused."""
    monkeypatch.setattr(cluster.node, "members_speak", lambda level: level <= 2)

    async def raise_soon() -> None:
        await asyncio.sleep(0.4)
        assert cluster.apply(c.SetClusterLevel(1, T0, 2))["raised"]

    async with api_client(cluster.node) as client:
        raising = asyncio.create_task(raise_soon())
        resp = await client.put("/v1/calendars/holidays", json=CALENDAR,
                                headers=cluster.auth("acme-bot"))
        await raising
    assert resp.status_code == 201, resp.text


async def test_the_wait_is_bounded_and_never_taken_for_a_member_not_heard_from(
        cluster: OldCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context, "LEVEL_WAIT_S", 0.3)
    async with api_client(cluster.node) as client:
        monkeypatch.setattr(cluster.node, "members_speak", lambda level: True)
        t0 = time.monotonic()
        resp = await client.put("/v1/calendars/holidays", json=CALENDAR,
                                headers=cluster.auth("acme-bot"))
        waited = time.monotonic() - t0
        assert resp.status_code == 409 and waited >= 0.3, (resp.text, waited)
        monkeypatch.setattr(cluster.node, "members_speak", lambda level: False)
        resp = await client.put("/v1/calendars/holidays", json=CALENDAR,
                                headers=cluster.auth("acme-bot"))
        assert resp.status_code == 409, resp.text


async def test_a_write_takes_the_level_the_node_holds_not_a_read_of_the_state(
        cluster: OldCluster) -> None:
    """The API writes at the level the node holds in memory, not one read from SQLite: a
    level in the state that the node has not noted yet (as right after a snapshot install,
    before its refresh) is not used, the safe way round; once noted it is, at once."""
    proposed = spy_on_proposals(cluster.node)
    commit_protocol_level(cluster.node.writer, 2)  # in the state, not noted by the node
    async with api_client(cluster.node) as client:
        resp = await client.put("/v1/calendars/holidays", json=CALENDAR,
                                headers=cluster.auth("acme-bot"))
        assert resp.status_code == 409 and not proposed, resp.text
        cluster.node.levels.note_committed(2)
        resp = await client.put("/v1/calendars/holidays", json=CALENDAR,
                                headers=cluster.auth("acme-bot"))
    assert resp.status_code == 201, resp.text
