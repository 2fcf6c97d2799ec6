"""A node trusts its clock only when a majority of the cluster agrees with it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from raftcron.core.model import parse_job
from raftcron.leader.clock import ClockGuard
from raftcron.leader.planner import JobRecord
from raftcron.leader.ticker import Ticker


def guard_with(offsets: list[float], size: int = 3) -> ClockGuard:
    g = ClockGuard([f"http://p{i}" for i in range(len(offsets))], size)
    for i, off in enumerate(offsets):
        g.record(f"http://p{i}", 1000.0, 1002.0 + off, 1004.0)  # rtt 4 ms
    return g


def test_agreeing_peers_trust_the_clock() -> None:
    g = guard_with([3.0, -40.0])
    assert g.trusted() and abs(g.skew_ms() or 0) < 50


def test_a_fast_node_is_not_trusted_by_two_agreeing_peers() -> None:
    g = guard_with([-16_000.0, -16_010.0])  # both peers are 16 s behind this node
    assert not g.trusted()
    assert g.skew_ms() == 16_005


def test_one_bad_peer_does_not_stop_a_good_node() -> None:
    assert guard_with([10.0, 300_000.0]).trusted()


def test_with_no_measurement_the_clock_is_trusted() -> None:
    assert ClockGuard(["http://p0", "http://p1"], 3).trusted()


def test_the_tightest_round_trip_wins() -> None:
    g = ClockGuard(["http://p0"], 3)
    g.record("http://p0", 0.0, 5_000.0, 2_000.0)  # rtt 2 s: offset 4 s, imprecise
    g.record("http://p0", 0.0, 1_001.0, 2.0)  # rtt 2 ms: offset 1000 ms
    assert round(g.fresh_offsets()[0]) == 1000


class _NeverPropose:
    async def propose_leader(self, cmd: object) -> dict:  # pragma: no cover - must not run
        raise AssertionError("an untrusted clock proposed a claim")


def test_an_untrusted_ticker_claims_nothing_until_trusted() -> None:
    now = 1_767_225_600_000
    ticker = Ticker(1, _NeverPropose(), lambda: None, clock=lambda: now)  # type: ignore[arg-type]
    spec = parse_job({"id": "j", "schedule": "* * * * * *", "target": {"shell": "true"}})
    ticker.planner.upsert(JobRecord("j", 1, False, now - 5_000, spec.to_spec()))
    ticker.gate = lambda: False
    asyncio.run(ticker.tick_once())
    assert ticker.clock_blocked and ticker.last_tick_ms is None
    ticker.gate = lambda: True
    with pytest.raises(AssertionError, match="untrusted clock proposed"):
        asyncio.run(ticker.tick_once())  # due instants exist: a trusted ticker proposes


def test_a_distrusted_clock_stays_distrusted_when_measurements_go_stale() -> None:
    g = guard_with([-16_000.0, -16_000.0])
    assert not g.trusted()
    for sample in g.samples.values():
        sample.at -= 60  # peers unreachable for a minute
    assert not g.fresh_offsets() and not g.trusted()


def test_a_gated_ticker_waits_instead_of_spinning() -> None:
    """Overdue instants and an untrusted clock must not starve the event loop."""
    now = 1_767_225_600_000
    ticker = Ticker(1, _NeverPropose(), lambda: None, clock=lambda: now)  # type: ignore[arg-type]
    spec = parse_job({"id": "j", "schedule": "* * * * * *", "target": {"shell": "true"}})
    ticker.planner.upsert(JobRecord("j", 1, False, now - 60_000, spec.to_spec()))
    ticker.gate = lambda: False

    async def scenario() -> int:
        async def no_reload(job_ids: object) -> None:
            return None

        ticker._reload = no_reload  # type: ignore[method-assign]
        beats = 0
        task = asyncio.ensure_future(ticker.run())

        async def heartbeat() -> None:
            nonlocal beats
            for _ in range(5):
                await asyncio.sleep(0.05)
                beats += 1

        await asyncio.wait_for(heartbeat(), 2)
        task.cancel()
        return beats

    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(asyncio.run(scenario())),
                              daemon=True)
    runner.start()
    runner.join(10)
    assert result == [5], "the event loop was starved by a spinning ticker"


def test_a_step_of_the_own_wall_clock_is_distrusted_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    g = ClockGuard(["http://p0", "http://p1"], 3)
    wall = [1_000_000.0]
    mono = [500.0]
    monkeypatch.setattr("raftcron.leader.clock.time.time", lambda: wall[0])
    monkeypatch.setattr("raftcron.leader.clock.time.monotonic", lambda: mono[0])
    for url in g.peer_urls:
        g.record(url, wall[0] * 1000 - 2, wall[0] * 1000, wall[0] * 1000 + 2)
    assert g.trusted()
    wall[0] += 1.0
    mono[0] += 1.0  # time passes normally: still trusted
    assert g.trusted()
    wall[0] += 8.0  # the wall clock jumps 8 s ahead; monotonic does not
    assert not g.trusted()


def test_a_peer_measured_far_off_replaces_a_tighter_but_older_sample() -> None:
    g = ClockGuard(["http://p0", "http://p1"], 3)
    for url in g.peer_urls:
        g.record(url, 0.0, 1.0, 2.0)  # rtt 2 ms, offset 0
    assert g.trusted()
    for url in g.peer_urls:
        g.record(url, 0.0, -16_000.0 + 10.0, 20.0)  # rtt 20 ms: looser, but 16 s apart
    assert not g.trusted()
