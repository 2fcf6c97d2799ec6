"""The real API app over a real SQLite state, in-process, without Raft.

`InProcessNode` stands in for `raftcron.node.Node` where the API uses it: its proposer
encodes each command with the real codec and applies it at the next index through the
real state machine, as a one-node cluster would after commit. Requests go through
`httpx.ASGITransport`; the app's lifespan (its read connection) runs around them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from raftcron.api.app import create_app
from raftcron.auth import create_token
from raftcron.cluster.levels import ClusterLevels
from raftcron.config import NodeConfig
from raftcron.core import commands as c
from raftcron.core.protocol import PROTOCOL_LEVEL
from raftcron.state import db
from raftcron.state.cluster_level import committed_level
from raftcron.state.machine import StateMachine
from raftcron.testing import commit_protocol_level


class InProcessProposer:
    def __init__(self, machine: StateMachine) -> None:
        self.machine = machine

    async def propose(self, cmd: c.Command, timeout: float = 8.0) -> dict[str, Any]:
        return self.machine.apply_bytes(self.machine.last_applied + 1, c.encode(cmd))


class InProcessNode:
    """The parts of `Node` the API reads: config, proposer, a reader, a status."""

    def __init__(self, root: Path, level: int | None = PROTOCOL_LEVEL) -> None:
        """`level`: the protocol level the state starts committed at (None: none, as in a
        state written before levels existed)."""
        root.mkdir(parents=True, exist_ok=True)
        secret = root / "secret"
        secret.write_text("in-process-test-secret-0123456789")
        self.config = NodeConfig(node_id="n1", data_dir=str(root), raft_addr="127.0.0.1:1",
                                 http_host="127.0.0.1", http_port=1, secret_file=str(secret),
                                 auth_off=True)
        self.writer = db.open_writer(self.config.db_path)
        # By default a one-node cluster of this build: its leader committed this level.
        self.protocol_level = PROTOCOL_LEVEL
        if level is not None:
            commit_protocol_level(self.writer, level)
        # As `Node` does: the committed level is held in memory, read from the state at
        # start and noted on every applied SetClusterLevel.
        self.levels = ClusterLevels(self.protocol_level, committed_level(self.writer))
        self.machine = StateMachine(self.writer, listener=self._on_applied)
        self.proposer = InProcessProposer(self.machine)
        self.app: Starlette | None = None  # the app of the running `api_client`

    def open_reader(self) -> sqlite3.Connection:
        return db.open_reader(self.config.db_path)

    def _on_applied(self, cmd: c.Command, result: dict[str, Any]) -> None:
        if isinstance(cmd, c.SetClusterLevel) and result.get("ok"):
            self.levels.note_committed(int(result.get("level", 0)))

    def writable_level(self) -> int:
        """As `Node.writable_level`, but never above `protocol_level`, which a test may
        lower to emulate a node of an older build."""
        return min(self.levels.writable(), self.protocol_level)

    def members_speak(self, level: int) -> bool:
        """No peers are heard from in-process: a level not committed is not waited for."""
        return False

    def stamp_ms(self) -> int | None:
        """A one-node cluster's own clock is the cluster's time."""
        return int(time.time() * 1000)

    def require_tokens(self, root: Path) -> dict[str, str]:
        """Turn authentication on with a tokens file of the usual principals: `ops`
        (admin), `acme-bot` and `other-bot` (tenants acme and other), `reader` (read) and
        `runner` (worker). Returns each one's token by name."""
        tokens = str(root / "tokens.json")
        made = {name: create_token(tokens, scopes, name) for name, scopes in {
            "ops": ["admin"], "acme-bot": ["tenant:acme"], "other-bot": ["tenant:other"],
            "reader": ["read"], "runner": ["worker"]}.items()}
        self.config = dataclasses.replace(self.config, auth_off=False, tokens_file=tokens)
        return made

    def close(self) -> None:
        self.writer.close()


@contextlib.asynccontextmanager
async def api_client(node: InProcessNode) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client wired to the node's app, inside the app's lifespan."""
    app = node.app = create_app(node)  # type: ignore[arg-type]  # the part of Node it uses
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
            yield client


def api_fixture(owner: str, attr: str | None = "node") -> Any:
    """A pytest fixture named `api`: an `api_client` on the `InProcessNode` held by the
    fixture named `owner` (at its attribute `attr`, or the fixture itself if None), which
    closes that node afterwards. A test module binds it as `api = api_fixture("env")`."""

    @pytest.fixture(name="api")
    async def api(request: pytest.FixtureRequest) -> AsyncIterator[httpx.AsyncClient]:
        held = request.getfixturevalue(owner)
        node: InProcessNode = held if attr is None else getattr(held, attr)
        async with api_client(node) as client:
            yield client
        node.close()

    return api
