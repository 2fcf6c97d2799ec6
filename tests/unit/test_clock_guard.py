"""A node trusts its clock only when a majority of the cluster agrees with it."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import httpx
import pytest

from raftcron.core.model import parse_job
from raftcron.leader.clock import FRESH_S, ClockGuard
from raftcron.leader.planner import JobRecord
from raftcron.leader.ticker import Ticker


def guard_with(offsets: list[float], size: int = 3) -> ClockGuard:
    g = ClockGuard([f"http://p{i}" for i in range(len(offsets))], size)
    for i, off in enumerate(offsets):
        g.record(f"http://p{i}", 1000.0, 1002.0 + off, 1004.0)  # rtt 4 ms
    return g


def test_agreeing_peers_trust_the_clock() -> None:
    g = guard_with([3.0, -40.0])
    assert g.confirmed() and abs(g.skew_ms() or 0) < 50


def test_a_fast_node_is_not_trusted_by_two_agreeing_peers() -> None:
    g = guard_with([-16_000.0, -16_010.0])  # both peers are 16 s behind this node
    assert not g.confirmed()
    assert g.skew_ms() == 16_005


def test_one_bad_peer_does_not_stop_a_good_node() -> None:
    assert guard_with([10.0, 300_000.0]).confirmed()


def test_with_no_measurement_the_clock_is_not_confirmed() -> None:
    g = ClockGuard(["http://p0", "http://p1"], 3)
    assert not g.confirmed()
    assert g.describe()["confirmed"] is False and g.describe()["last_confirmed_at"] is None


def test_stale_samples_do_not_confirm() -> None:
    g = guard_with([3.0, -4.0])
    assert g.confirmed()
    for sample in g.samples.values():
        sample.at -= FRESH_S + 1  # measured, but longer ago than the freshness bound
    assert not g.confirmed()


def test_a_minority_agreeing_does_not_confirm() -> None:
    # Five nodes: this one and one peer agree, three peers are 20 s off.
    assert not guard_with([1.0, 20_000.0, 20_000.0, 20_000.0], size=5).confirmed()
    # One peer agreeing, the other not measured at all, in a five-node cluster.
    g = ClockGuard([f"http://p{i}" for i in range(4)], 5)
    g.record("http://p0", 1000.0, 1002.0, 1004.0)
    assert not g.confirmed()
    g.record("http://p1", 1000.0, 1002.0, 1004.0)
    assert g.confirmed()  # three of five


def test_one_agreeing_peer_confirms_when_the_other_is_down() -> None:
    g = ClockGuard(["http://p0", "http://p1"], 3)
    g.record("http://p0", 1000.0, 1002.0, 1004.0)
    g.record_error("http://p1", "ConnectError: refused")
    assert g.confirmed()


def probing_guard(handler: Callable[[httpx.Request], httpx.Response]) -> ClockGuard:
    """A guard whose two peers are probed once through `handler`."""
    g = ClockGuard(["http://p0", "http://p1"], 3)

    async def probe_all() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            await asyncio.gather(*(g._probe(client, u) for u in g.peer_urls))

    asyncio.run(probe_all())
    return g


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_probes_that_answer_confirm() -> None:
    g = probing_guard(lambda r: httpx.Response(200, json={"now_ms": _now_ms()}))
    assert g.confirmed() and g.describe()["last_confirmed_at"] is not None


@pytest.mark.parametrize("answer", [
    lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused", request=r)),
    lambda r: (_ for _ in ()).throw(RuntimeError("unexpected")),
    lambda r: httpx.Response(401, json={"now_ms": _now_ms()}),
    lambda r: httpx.Response(200, text="not json"),
    lambda r: httpx.Response(200, json={"now_ms": "soon"}),
    lambda r: httpx.Response(200, json=[1, 2]),
], ids=["refused", "raising", "http-401", "not-json", "no-number", "not-an-object"])
def test_a_failing_probe_is_not_a_confirmation(answer: Callable) -> None:
    g = probing_guard(answer)
    assert not g.confirmed()
    assert g.probe_errors_total() == 2
    assert all(e["count"] == 1 and e["last"] for e in g.describe()["probe_errors"].values())


def test_a_probe_error_discards_the_peers_earlier_sample() -> None:
    g = guard_with([3.0, 4.0])
    assert g.confirmed()
    g.record_error("http://p0", "ReadTimeout")
    g.record_error("http://p1", "ReadTimeout")
    assert not g.confirmed() and not g.samples


def test_probe_errors_are_logged_at_a_rate_limit(caplog: pytest.LogCaptureFixture) -> None:
    g = ClockGuard(["http://p0"], 3)
    with caplog.at_level(logging.WARNING, logger="raftcron.clock"):
        for _ in range(50):
            g.record_error("http://p0", "ConnectError: certificate verify failed")
    logged = [r for r in caplog.records if "clock probe of http://p0 failed" in r.message]
    assert len(logged) == 1 and "certificate verify failed" in logged[0].message
    assert g.errors["http://p0"].count == 50


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
    ticker.planner.upsert(JobRecord.from_spec("j", 1, False, now - 5_000, spec.to_spec()))
    ticker.gate = lambda: False
    asyncio.run(ticker.tick_once())
    assert ticker.clock_blocked and ticker.last_tick_ms is None
    ticker.gate = lambda: True
    with pytest.raises(AssertionError, match="untrusted clock proposed"):
        asyncio.run(ticker.tick_once())  # due instants exist: a trusted ticker proposes


def test_a_distrusted_clock_stays_distrusted_when_measurements_go_stale() -> None:
    g = guard_with([-16_000.0, -16_000.0])
    assert not g.confirmed()
    for sample in g.samples.values():
        sample.at -= 60  # peers unreachable for a minute
    assert not g.fresh_offsets() and not g.confirmed()


def test_a_gated_ticker_waits_instead_of_spinning() -> None:
    """Overdue instants and an untrusted clock must not starve the event loop."""
    now = 1_767_225_600_000
    ticker = Ticker(1, _NeverPropose(), lambda: None, clock=lambda: now)  # type: ignore[arg-type]
    spec = parse_job({"id": "j", "schedule": "* * * * * *", "target": {"shell": "true"}})
    ticker.planner.upsert(JobRecord.from_spec("j", 1, False, now - 60_000, spec.to_spec()))
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
    assert g.confirmed()
    wall[0] += 1.0
    mono[0] += 1.0  # time passes normally: still trusted
    assert g.confirmed()
    wall[0] += 8.0  # the wall clock jumps 8 s ahead; monotonic does not
    assert not g.confirmed()


def test_a_peer_measured_far_off_replaces_a_tighter_but_older_sample() -> None:
    g = ClockGuard(["http://p0", "http://p1"], 3)
    for url in g.peer_urls:
        g.record(url, 0.0, 1.0, 2.0)  # rtt 2 ms, offset 0
    assert g.confirmed()
    for url in g.peer_urls:
        g.record(url, 0.0, -16_000.0 + 10.0, 20.0)  # rtt 20 ms: looser, but 16 s apart
    assert not g.confirmed()


class _Guard:
    """A clock guard whose verdict the test sets."""

    def __init__(self) -> None:
        self.ok = False

    def confirmed(self) -> bool:
        return self.ok


def test_a_leader_begins_no_epoch_before_its_clock_is_confirmed() -> None:
    """`Node._begin_epoch` proposes `begin_epoch` (or anything) only once confirmed."""
    from raftcron.node import Node

    proposed: list[object] = []

    class _Proposer:
        async def propose_leader(self, cmd: object) -> dict:
            proposed.append(cmd)
            return {"ok": False, "rejected": "stale_epoch", "epoch": 99}

    node = SimpleNamespace(clock_guard=_Guard(), _role=(True, 7), stopping=False,
                           _beginning=7, proposer=_Proposer(),
                           config=SimpleNamespace(node_id="n1"))
    node._wait_clock_confirmed = lambda term: Node._wait_clock_confirmed(node, term)
    node._commit_begin_epoch = lambda term: Node._commit_begin_epoch(node, term)

    async def scenario() -> None:
        task = asyncio.ensure_future(Node._begin_epoch(node, 7))  # type: ignore[arg-type]
        await asyncio.sleep(0.5)
        assert proposed == [] and not task.done()  # not confirmed: nothing committed
        node.clock_guard.ok = True
        await asyncio.wait_for(task, 2)
        assert [type(p).__name__ for p in proposed] == ["BeginEpoch"]

    asyncio.run(scenario())


def test_a_leader_that_loses_the_term_unconfirmed_gives_up_beginning() -> None:
    from raftcron.node import Node

    node = SimpleNamespace(clock_guard=_Guard(), _role=(True, 7), stopping=False)

    async def scenario() -> bool:
        task = asyncio.ensure_future(Node._wait_clock_confirmed(node, 7))  # type: ignore[arg-type]
        await asyncio.sleep(0.3)
        node._role = (False, 8)  # handed over while waiting
        return await asyncio.wait_for(task, 2)

    assert asyncio.run(scenario()) is False


def test_a_hanging_peer_does_not_delay_the_others_probes() -> None:
    """Each peer is probed on its own: one that never answers (a paused node accepts TCP)
    does not hold back the measurement of the healthy one."""
    answered: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "hangs":
            await asyncio.sleep(30)
        answered.append(request.url.host)
        return httpx.Response(200, json={"now_ms": _now_ms()})

    g = ClockGuard(["http://hangs", "http://ok"], 3, period_s=0.05)

    async def scenario() -> None:
        task = asyncio.ensure_future(g.run(transport=httpx.MockTransport(handler)))
        await asyncio.sleep(0.5)
        task.cancel()

    asyncio.run(scenario())
    assert answered.count("ok") >= 3, answered
    assert set(g.samples) == {"http://ok"} and g.confirmed()


def _begin_epoch_node(proposer: object) -> SimpleNamespace:
    from raftcron.node import Node

    node = SimpleNamespace(clock_guard=_Guard(), _role=(True, 7), stopping=False,
                           proposer=proposer, config=SimpleNamespace(node_id="n1"))
    node.clock_guard.ok = True
    node._wait_clock_confirmed = lambda term: Node._wait_clock_confirmed(node, term)
    return node


def test_a_timed_out_begin_epoch_is_proposed_again_until_known() -> None:
    """The first proposal timed out but committed: the second is refused as not newer,
    with this term as the epoch, and the node takes that as begun (it used to give up,
    leaving a leader without duties until the next election)."""
    from raftcron.cluster.proposer import UNKNOWN_OUTCOME, ProposalError
    from raftcron.node import Node

    proposed: list[object] = []

    class _Proposer:
        async def propose_leader(self, cmd: object) -> dict:
            proposed.append(cmd)
            if len(proposed) == 1:
                raise ProposalError(UNKNOWN_OUTCOME, "leader command timed out",
                                    maybe_applied=True)
            return {"ok": False, "rejected": "stale_epoch", "epoch": 7, "clock_ms": 5}

    node = _begin_epoch_node(_Proposer())
    result = asyncio.run(Node._commit_begin_epoch(node, 7))  # type: ignore[arg-type]
    assert result == {"ok": False, "rejected": "stale_epoch", "epoch": 7, "clock_ms": 5}
    assert [type(p).__name__ for p in proposed] == ["BeginEpoch", "BeginEpoch"]


def test_begin_epoch_retries_stop_when_leadership_moves_on() -> None:
    from raftcron.cluster.proposer import UNKNOWN_OUTCOME, ProposalError
    from raftcron.node import Node

    calls = 0

    class _Proposer:
        async def propose_leader(self, cmd: object) -> dict:
            nonlocal calls
            calls += 1
            node._role = (False, 8)  # a newer term while this one was in flight
            raise ProposalError(UNKNOWN_OUTCOME, "leader command timed out",
                                maybe_applied=True)

    node = _begin_epoch_node(_Proposer())
    assert asyncio.run(Node._commit_begin_epoch(node, 7)) is None  # type: ignore[arg-type]
    assert calls == 1
