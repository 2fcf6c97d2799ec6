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
    try:  # a setup that fails stops its processes too (a leak outlived a CI run)
        c.wait_leader(timeout=30)
        c.wait_serving()
        yield c
    finally:
        c.close()
