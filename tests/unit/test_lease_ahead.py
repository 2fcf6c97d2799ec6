"""The start-time arithmetic of runs leased ahead, and the worker's clock check (core.ahead,
worker.clock, worker.client.Lease, the clock in a lease answer: api.workers.AheadLeaseAnswer)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from raftcron.api import workers as workers_api
from raftcron.core.ahead import (
    CLOCK_TOLERANCE_MS,
    HERD_CLAIMS_PER_S,
    HERD_LEASES_PER_S,
    MAX_HERD_LEAD_S,
    OFFSET_FRESH_S,
    SKEWED,
    UNMEASURED,
    OffsetSample,
    ahead_refusal,
    herd_claim_lead_ms,
    herd_lead_ms,
    start_delay_s,
)
from raftcron.worker.client import Lease
from raftcron.worker.clock import WorkerClock

LEASE = {"attempt_id": "j@x~1", "occurrence_id": "j@x", "job_id": "j",
         "scheduled_for": "2026-01-01T00:00:00Z", "attempt": 1, "fencing_token": 7,
         "idempotency_key": "j@x", "target": {"shell": "true"}, "max_runtime_s": None,
         "heartbeat_interval_s": 10}


def test_start_delay_counts_from_the_servers_time_and_is_never_negative():
    assert start_delay_s(10_000, 8_500) == 1.5
    assert start_delay_s(10_000, 10_000) == 0.0
    assert start_delay_s(10_000, 10_250) == 0.0  # already due: at once


def test_a_lease_ahead_starts_on_the_monotonic_clock_from_its_receipt():
    lease = Lease.from_dict({**LEASE, "start_at_ms": 50_000}, server_now_ms=48_200,
                            received_mono_s=100.0)
    assert lease.start_mono_s == pytest.approx(101.8)
    # A lease that is not ahead starts at once.
    assert Lease.from_dict(LEASE).start_mono_s is None


def test_a_lease_ahead_without_the_servers_time_is_malformed():
    with pytest.raises(ValueError):
        Lease.from_dict({**LEASE, "start_at_ms": 50_000}, server_now_ms=None,
                        received_mono_s=100.0)


def test_offset_sample_measures_the_midpoint_and_half_the_round_trip():
    s = OffsetSample.measure(sent_wall_ms=1_000, server_ms=1_350, received_wall_ms=1_100,
                             received_mono_s=5.0)
    assert (s.offset_ms, s.error_ms, s.at_mono_s) == (300, 50, 5.0)
    assert s.wall_minus_mono_ms == 1_100 - 5_000


def _sample(offset_ms: float, error_ms: float = 10, wall_ms: float = 1_000_000,
            mono_s: float = 100.0) -> OffsetSample:
    return OffsetSample(offset_ms, error_ms, mono_s, wall_ms - mono_s * 1000)


def test_refusal_fails_closed_without_a_fresh_measurement():
    assert ahead_refusal(None, 1_000_000, 100.0) == UNMEASURED
    s = _sample(0)
    assert ahead_refusal(s, 1_000_000, 100.0) is None
    later = OFFSET_FRESH_S + 1
    assert ahead_refusal(s, 1_000_000 + later * 1000, 100.0 + later) == UNMEASURED


def test_refusal_when_the_worker_clock_stepped_since_it_was_measured():
    s = _sample(0)
    # 1 s passed on both clocks: fine. The wall clock 1 s further than the monotonic: not.
    assert ahead_refusal(s, 1_001_000, 101.0) is None
    assert ahead_refusal(s, 1_002_000, 101.0) == UNMEASURED
    assert ahead_refusal(s, 1_000_000, 101.0) == UNMEASURED  # stepped back


@pytest.mark.parametrize(("offset", "error", "why"), [
    (0, 10, None), (CLOCK_TOLERANCE_MS - 10, 10, None), (CLOCK_TOLERANCE_MS - 10, 11, SKEWED),
    (-(CLOCK_TOLERANCE_MS + 1), 0, SKEWED), (5_000, 5, SKEWED)])
def test_refusal_when_off_the_servers_clock_by_more_than_the_tolerance(offset, error, why):
    assert ahead_refusal(_sample(offset, error), 1_000_000, 100.0) == why


class _Clocks:
    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.mono = 100.0


def test_worker_clock_probe_keeps_the_tightest_sample_and_a_failed_probe_drops_it():
    clocks = _Clocks()
    wc = WorkerClock(wall_ms=lambda: clocks.wall, mono_s=lambda: clocks.mono)
    assert wc.refusal() == UNMEASURED
    answers = iter([(40, 1_000_100), (4, 1_000_200), (20, 1_000_050)])  # (rtt ms, server ms)

    async def server_clock() -> float:
        rtt, server = next(answers)
        clocks.wall += rtt
        return server

    asyncio.run(wc.probe(server_clock))
    assert wc.sample is not None and wc.sample.error_ms == 2
    assert wc.refusal() is None

    async def failing() -> float:
        raise OSError("connection refused")

    asyncio.run(wc.probe(failing))
    assert wc.sample is None and wc.refusal() == UNMEASURED


def test_worker_clock_far_off_the_server_refuses():
    clocks = _Clocks()
    wc = WorkerClock(wall_ms=lambda: clocks.wall, mono_s=lambda: clocks.mono)

    async def server_clock() -> float:
        return clocks.wall + 5_000  # the server is 5 s ahead of this worker

    asyncio.run(wc.probe(server_clock))
    assert wc.refusal() == SKEWED


def test_a_lease_answers_server_time_far_off_drops_the_sample():
    clocks = _Clocks()
    wc = WorkerClock(wall_ms=lambda: clocks.wall, mono_s=lambda: clocks.mono)

    async def server_clock() -> float:
        return clocks.wall

    asyncio.run(wc.probe(server_clock))
    wc.check_lease_time(clocks.wall + 100)
    assert wc.refusal() is None
    wc.check_lease_time(clocks.wall - 2_000)  # a slow answer: it only delays the start
    assert wc.refusal() is None
    wc.check_lease_time(clocks.wall + CLOCK_TOLERANCE_MS + 1)
    assert wc.refusal() == UNMEASURED


def test_own_clock_reading_of_the_instant_is_corrected_and_gone_after_a_step():
    clocks = _Clocks()
    wc = WorkerClock(wall_ms=lambda: clocks.wall, mono_s=lambda: clocks.mono)

    async def server_clock() -> float:
        return clocks.wall + 200  # the server is 200 ms ahead; zero round trip

    asyncio.run(wc.probe(server_clock))
    # T is 1.2 s from now on the server's clock: 1.2 s from now on the monotonic clock.
    assert wc.not_before_mono(int(clocks.wall) + 200 + 1_200) == pytest.approx(
        clocks.mono + 1.2)
    clocks.wall += 3_000  # the wall clock jumps 3 s; the monotonic clock does not
    assert wc.not_before_mono(int(clocks.wall) + 1_000) is None


def test_a_run_starts_at_the_later_of_the_servers_and_its_own_reading():
    """The leader's clock jumped 1 s ahead (its guard has not noticed yet): timed from the
    server's time alone the run would start 1 s early; the worker's own clock holds it."""
    from raftcron.worker.runner import Worker

    clocks = _Clocks()
    w = Worker(["http://127.0.0.1:9"], ["default"], 1, "w")
    w.clock = WorkerClock(wall_ms=lambda: clocks.wall, mono_s=lambda: clocks.mono)

    async def server_clock() -> float:
        return clocks.wall

    asyncio.run(w.clock.probe(server_clock))
    start_at = int(clocks.wall) + 1_500
    jumped = Lease.from_dict({**LEASE, "start_at_ms": start_at},
                             server_now_ms=int(clocks.wall) + 1_000,
                             received_mono_s=clocks.mono)
    assert jumped.start_mono_s == pytest.approx(clocks.mono + 0.5)
    sample = w.clock.sample
    assert w._not_before_own_clock(jumped, sample).start_mono_s == pytest.approx(
        clocks.mono + 1.5)
    # The other way round (this worker's clock behind the server's reading): the server's.
    late = Lease.from_dict({**LEASE, "start_at_ms": start_at},
                           server_now_ms=int(clocks.wall) - 1_000,
                           received_mono_s=clocks.mono)
    assert w._not_before_own_clock(late, sample).start_mono_s == pytest.approx(
        clocks.mono + 2.5)
    # Chaos seed 1801: the leader's clock jumped 131 s ahead; its answer made the worker
    # drop its sample, and the runs were then timed by the server's reading alone and
    # started 0.54 s early. They are timed by the sample the poll was made with.
    far = Lease.from_dict({**LEASE, "start_at_ms": start_at},
                          server_now_ms=int(clocks.wall) + 131_000,
                          received_mono_s=clocks.mono)
    w.clock.check_lease_time(int(clocks.wall) + 131_000)
    assert w.clock.sample is None
    assert w._not_before_own_clock(far, sample).start_mono_s == pytest.approx(
        clocks.mono + 1.5)
    # No reading of its own (its clock stepped during the poll): not started at all.
    clocks.wall += 5_000
    assert w._not_before_own_clock(far, sample) is None


def test_reported_times_follow_the_monotonic_clock_across_a_wall_step():
    """A run's start is read from the last good sample and the monotonic clock: a step of
    the wall clock (even one that drops the sample) does not move it."""
    clocks = _Clocks()
    wc = WorkerClock(wall_ms=lambda: clocks.wall, mono_s=lambda: clocks.mono)
    assert wc.cluster_now_ms() == round(clocks.wall)  # before any sample: the wall clock

    async def server_clock() -> float:
        return clocks.wall + 300  # the server is 300 ms ahead; zero round trip

    asyncio.run(wc.probe(server_clock))
    cluster = clocks.wall + 300
    assert wc.cluster_now_ms() == round(cluster)
    clocks.mono += 1.5
    clocks.wall += 1_500 + 16_000  # 1.5 s pass and the wall clock jumps 16 s ahead
    assert wc.cluster_now_ms() == round(cluster + 1_500)
    assert wc.refusal() == UNMEASURED  # the step stops it leasing ahead
    wc.check_lease_time(clocks.wall + 300 + CLOCK_TOLERANCE_MS + 1)  # drops the sample
    assert wc.sample is None
    assert wc.cluster_now_ms() == round(cluster + 1_500)

    async def failing() -> float:
        raise OSError("connection refused")

    asyncio.run(wc.probe(failing))  # a failed probe keeps the last good basis
    clocks.mono += 0.5
    assert wc.cluster_now_ms() == round(cluster + 2_000)
    asyncio.run(wc.probe(server_clock))  # a new sample becomes the basis
    assert wc.cluster_now_ms() == round(clocks.wall + 300)


def test_a_herds_lead_is_the_configured_one_or_as_long_as_leasing_it_takes() -> None:
    wide = 60_000  # lease_ahead_herd_max_s = 60
    assert herd_lead_ms(HERD_LEASES_PER_S * 4, 10_000, wide) == 10_000  # 4 s of leasing
    assert herd_lead_ms(HERD_LEASES_PER_S * 40, 10_000, wide) == 40_000
    assert herd_lead_ms(HERD_LEASES_PER_S * 40 + 1, 10_000, wide) == 40_001  # rounded up
    assert herd_lead_ms(10**9, 10_000, wide) == MAX_HERD_LEAD_S * 1000
    assert herd_lead_ms(10**9, 10_000, 10**9) == MAX_HERD_LEAD_S * 1000
    assert herd_lead_ms(HERD_LEASES_PER_S * 40, 10_000, 10_000) == 10_000  # the default
    assert herd_lead_ms(HERD_LEASES_PER_S * 40, 10_000, 25_000) == 25_000
    # Claimed the configured lead ahead, or the lead plus the claims' time beyond it.
    assert herd_claim_lead_ms(HERD_CLAIMS_PER_S, 10_000, wide) == 10_000
    assert herd_claim_lead_ms(100_000, 10_000, 10_000) == 10_000
    assert herd_claim_lead_ms(100_000, 10_000, wide) == (
        100_000 * 1000 // HERD_LEASES_PER_S + 100_000 * 1000 // HERD_CLAIMS_PER_S)


def _sent(answer: Any) -> tuple[dict[bytes, bytes], bytes]:
    """The headers and body `answer` sends (an ASGI send that keeps them)."""
    messages: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    asyncio.run(answer({"type": "http"}, receive, send))
    return dict(messages[0]["headers"]), messages[1]["body"]


@pytest.mark.parametrize(("built", "sent"), [
    (1_796_530_722_452, 1_796_530_724_252),  # the answer waited 1.8 s to be sent
    (999, 1_000),  # one more digit (a test clock): the length follows
])
def test_a_lease_answer_reads_the_servers_clock_as_it_is_sent(
        monkeypatch: pytest.MonkeyPatch, built: int, sent: int) -> None:
    """The body is encoded when the Lease commits; its `server_now_ms` is read again when
    the answer goes out, so a worker counting from the receipt starts no run late by the
    time the answer waited in between (never early: it is read before the sending)."""
    clock = iter((built, sent))
    monkeypatch.setattr(workers_api, "now_ms", lambda: next(clock))
    # A lease that holds the key too: only the answer's own, last key is read again.
    leases = [{**LEASE, "start_at_ms": 50_000, "target": {"server_now_ms": 1}}]
    answer = workers_api.AheadLeaseAnswer(leases)
    assert json.loads(answer.body)["server_now_ms"] == built
    headers, body = _sent(answer)
    assert json.loads(body) == {"leases": leases, "server_now_ms": sent}
    assert int(headers[b"content-length"]) == len(body)


def test_a_lease_answer_whose_body_does_not_end_in_its_stamp_is_sent_as_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers_api, "now_ms", lambda: 1_796_530_722_452)
    answer = workers_api.AheadLeaseAnswer([LEASE])
    built = answer.body = answer.body[:-1] + b',"later":1}'
    monkeypatch.setattr(workers_api, "now_ms", lambda: 1_796_530_724_252)
    _, body = _sent(answer)
    assert body == built
