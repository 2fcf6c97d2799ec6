"""Fixtures shared by the system and browser tests: a real three-node cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raftcron.testing import LocalCluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    c = LocalCluster(tmp_path)
    c.start()
    c.wait_leader(timeout=30)
    c.wait_serving()
    try:
        yield c
    finally:
        c.close()
