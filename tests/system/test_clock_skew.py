"""A node whose wall clock is far off the others' never fires early and never leads for
long (ARCHITECTURE invariant 6). The skew is real: time-machine moves the node process's
`time.time()` through a sitecustomize module (as the chaos suite does)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job, assert_every_second_once, ts

pytestmark = pytest.mark.system

CLOCK_DIR = Path(__file__).resolve().parents[2] / "chaos" / "clock"
SKEW_S = 30


def test_fast_clock_node_never_fires_early(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("time_machine", reason="needs the chaos extra (time-machine)")
    offset_file = tmp_path / "n1.offset"
    offset_file.write_text(str(SKEW_S))
    runs = tmp_path / "runs.txt"
    c = LocalCluster(tmp_path)
    try:
        monkeypatch.setenv("PYTHONPATH", f"{CLOCK_DIR}{os.pathsep}"
                           f"{os.environ.get('PYTHONPATH', '')}")
        monkeypatch.setenv("CHAOS_CLOCK_FILE", str(offset_file))
        c.start("n1")
        monkeypatch.delenv("CHAOS_CLOCK_FILE")
        monkeypatch.delenv("PYTHONPATH")
        c.start("n2")
        c.start("n3")
        leader = c.wait_leader(timeout=30)
        add_job(c, leader, "tick", target={
            "shell": f'echo "$(date +%s.%N) $RAFTCRON_SCHEDULED_FOR" >> {runs}'})
        c.start_worker("w1")
        # Shuffle leadership a few times so the fast node gets its chances to lead.
        for _ in range(3):
            time.sleep(4)
            leader = c.wait_leader(timeout=30)
            if leader != "n1":
                c.signal(leader, signal.SIGSTOP)
                try:
                    c.wait_leader(timeout=30, among=[n for n in c.procs if n != leader])
                finally:
                    c.signal(leader, signal.SIGCONT)
        time.sleep(5)
        view = wait_until(lambda: c.cluster_view("n1"), 10, message="n1's view")
        assert view["clock"]["trusted"] is False
        assert abs(view["clock"]["skew_ms"] - SKEW_S * 1000) < 2000
        # The fast node does not keep the leadership.
        wait_until(lambda: c.leader() not in (None, "n1"), 15, message="a trusted leader")
        # Liveness, eventually: while a paused healthy node leaves the other one unable to
        # confirm its clock with a majority (one peer 30 s off, one silent), nothing ticks.
        wait_until(lambda: runs.exists() and len(runs.read_text().splitlines()) >= 5, 30,
                   message="five runs executed")
        executed = [line.split() for line in runs.read_text().splitlines()]
        early = [(float(real), at) for real, at in executed if float(real) < ts(at) - 0.2]
        assert not early, f"runs before their instant: {early[:5]}"
        occs = c.occurrences(c.leader() or "n2", "tick")
        settled = [o for o in occs if ts(o["scheduled_for"]) < time.time() - 3]
        assert_every_second_once(settled)
    finally:
        c.close()
