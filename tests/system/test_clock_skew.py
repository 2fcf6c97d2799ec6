"""A node whose wall clock is far off the others' never fires early and does not stop the
cluster (ARCHITECTURE invariants 6 and 7). The skew is real: time-machine moves the node
process's `time.time()` through a sitecustomize module (as the chaos suite does).

The fast node is made the first leader on purpose, not by luck: it starts first, has the
shortest election timeout (the healthy nodes wait 1.5-2.5 s before standing), and the
longest log (it led the cluster's first life and went down last). So it leads from the
first moment of its process, with a due job in its state and no clock measured yet: the
moment where a guard that trusts an unmeasured clock fires 30 s early.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from raftcron.testing import LocalCluster, self_signed_cert, wait_until
from tests.system.helpers import add_job, assert_every_second_once, ts

pytestmark = pytest.mark.system

CLOCK_DIR = Path(__file__).resolve().parents[2] / "chaos" / "clock"
SKEW_S = 30
FAST = "n1"
HEALTHY = ["n2", "n3"]
# A claim more than this late is a misfire (policy `skip`): an instant the cluster did not
# fire within a few seconds shows up as skipped instead of as a late run.
MISFIRE_GRACE_S = 10
SETTLE_S = 5  # instants in the first seconds after the restart may be skipped
OBSERVE_S = 25


def _metric(c: LocalCluster, nid: str, name: str) -> float | None:
    text = c.http.get(c.urls[nid] + "/metrics").text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found[1]) if found else None


def _fast_node_leads_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           tls: bool) -> None:
    pytest.importorskip("time_machine", reason="needs the chaos extra (time-machine)")
    offset_file = tmp_path / f"{FAST}.offset"
    runs = tmp_path / "runs.txt"
    c = LocalCluster(tmp_path)
    if tls:
        c.enable_tls(*self_signed_cert(tmp_path))
    c.set_raft_options(FAST, raftMinTimeout=0.3, raftMaxTimeout=0.35)
    for nid in HEALTHY:
        c.set_raft_options(nid, raftMinTimeout=1.5, raftMaxTimeout=2.5)

    def start_fast_node() -> None:
        with monkeypatch.context() as env:
            env.setenv("PYTHONPATH", f"{CLOCK_DIR}{os.pathsep}"
                       f"{os.environ.get('PYTHONPATH', '')}")
            env.setenv("CHAOS_CLOCK_FILE", str(offset_file))
            c.start(FAST)
        wait_until(lambda: c.cluster_view(FAST), 30, message="the fast node serving")

    def fast_node_leads() -> bool:
        # It stands first (0.3 s against 1.5 s) and wins the election.
        return wait_until(lambda: (c.cluster_view(FAST) or {}).get("role") == "leader", 30,
                          interval=0.05, message=f"{FAST} leading")

    try:
        # First life, clock right: n1 leads and the job runs.
        offset_file.write_text("0")
        start_fast_node()
        c.start("n2")
        fast_node_leads()
        c.start("n3")
        c.wait_serving()
        add_job(c, "n2", "tick", misfire_policy="skip", misfire_grace_s=MISFIRE_GRACE_S,
                target={"shell": f'echo "$(date +%s.%N) $RAFTCRON_SCHEDULED_FOR" >> {runs}'})
        c.start_worker("w1")
        wait_until(lambda: runs.exists() and len(runs.read_text().splitlines()) >= 2, 30,
                   message="the job running")
        # Down, the leader last (its log is the longest: the others will vote for it).
        for nid in (*HEALTHY, FAST):
            c.kill(nid)
        # Second life: n1's clock is 30 s fast from its first instant, and it leads
        # first, with a due job in its state and nothing measured yet.
        offset_file.write_text(str(SKEW_S))
        start_fast_node()
        c.start("n2")
        assert fast_node_leads()
        restarted_s = time.time()
        c.start("n3")
        # The fast node hands over (its clock is never confirmed) and a healthy one leads.
        healthy = c.wait_leader(timeout=30, among=HEALTHY)
        fast_view: dict[str, Any] = wait_until(
            lambda: c.cluster_view(FAST), 10, message="the fast node's view")
        assert fast_view["role"] != "leader" and fast_view["leader_duties"] is False
        time.sleep(max(0.0, restarted_s + OBSERVE_S - time.time()))

        # No run started before its instant by the real clock.
        executed = [line.split() for line in runs.read_text().splitlines()]
        assert executed, "nothing ran"
        early = [(float(real), at) for real, at in executed if float(real) < ts(at)]
        assert not early, f"runs before their instant: {early[:5]}"
        # Every instant after the first seconds fired (none skipped as missed), once.
        end_s = time.time() - 3
        occs = c.occurrences(healthy, "tick")
        settled = [o for o in occs if ts(o["scheduled_for"]) < end_s]
        assert_every_second_once(settled)
        wanted = set(range(int(restarted_s) + SETTLE_S, int(end_s)))
        ran = {ts(at) for _, at in executed}
        missing = sorted(wanted - ran)
        assert not missing, f"instants not fired: {missing[:10]} " + str(
            [(o["scheduled_for"], o["status"], o.get("reason")) for o in settled
             if ts(o["scheduled_for"]) in missing][:10])
        # The fast clock never reached the state: the newest committed time is not ahead.
        committed = _metric(c, healthy, "raftcron_committed_clock_timestamp_seconds")
        assert committed is not None and committed <= time.time() + 1.5, committed
        # It led in both lives, and says so in its log too.
        led = re.findall(r"term \d+: leader", (tmp_path / f"{FAST}.log").read_text())
        assert len(led) >= 2, led
        # Its clock is measured 30 s off and never confirmed; the healthy leader's is.
        fast_view = wait_until(lambda: c.cluster_view(FAST), 10, message="the fast view")
        assert fast_view["clock"]["confirmed"] is False
        assert fast_view["clock"]["last_confirmed_at"] is None
        assert abs(fast_view["clock"]["skew_ms"] - SKEW_S * 1000) < 2000
        healthy_view = wait_until(lambda: c.cluster_view(healthy), 10, message="the view")
        assert healthy_view["clock"]["confirmed"] is True
        assert healthy_view["clock"]["last_confirmed_at"] is not None
        # The probes reached both peers (over HTTPS when TLS is on) and measured the skew.
        offsets = healthy_view["clock"]["peers"]
        assert set(offsets) == {c.urls[n] for n in c.ids if n != healthy}, offsets
        assert abs(offsets[c.urls[FAST]] - SKEW_S * 1000) < 2000
        # An operator sees it in /metrics and /readyz of the node with the bad clock.
        assert _metric(c, FAST, "raftcron_clock_confirmed") == 0
        assert _metric(c, healthy, "raftcron_clock_confirmed") == 1
        ready = c.http.get(c.urls[FAST] + "/readyz")
        assert ready.status_code == 503
        assert any("clock is not confirmed" in p for p in ready.json()["problems"]), ready.text
    finally:
        c.close()


def test_a_fast_first_leader_never_fires_early_and_hands_over(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fast_node_leads_first(tmp_path, monkeypatch, tls=False)


def test_a_fast_first_leader_with_tls_and_a_self_signed_certificate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fast_node_leads_first(tmp_path, monkeypatch, tls=True)
