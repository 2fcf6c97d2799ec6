"""The schedule engine as it was before croniter parsed the fields: the reference of
test_schedule_engine_diff and test_schedule_cronsim.

It is the frozen level-1 build's own copy (tests/fixtures/level1/raftcron/core/schedule.py,
byte for byte the engine of 4aaeeff and 5da59e1; its git blob id is pinned in
test_schedule_engine_diff), loaded here under a name of its own so that one copy serves
both the engine comparison and the apply-parity test.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = (Path(__file__).resolve().parents[1] / "fixtures" / "level1" / "raftcron" / "core"
         / "schedule.py")
_spec = importlib.util.spec_from_file_location("tests.unit.schedule_v1_engine", _PATH)
assert _spec is not None and _spec.loader is not None
_engine = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _engine  # dataclasses look their module up by name
_spec.loader.exec_module(_engine)
sys.modules[__name__] = _engine
