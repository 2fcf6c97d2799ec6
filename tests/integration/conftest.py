"""Fixtures shared by the state-machine tests of leases (ack, ahead, sweep)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_machine import Node


@pytest.fixture
def led(tmp_path: Path) -> Iterator[Node]:
    """A state machine on a real SQLite file whose epoch 1 has begun (this node leads).
    Modules with a `led` of their own (test_machine, test_isolation_machine) keep theirs."""
    n = Node(tmp_path / "state.db")
    assert n.begin(1)["ok"]
    yield n
    n.conn.close()
