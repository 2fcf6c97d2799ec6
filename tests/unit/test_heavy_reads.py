"""HeavyReads: one CPU-heavy computation per node at a time, shared by the callers asking
for the same key, and resting as long as it ran before the next one starts."""

from __future__ import annotations

import asyncio
import threading

from raftcron.api.heavy import HeavyReads


async def test_concurrent_callers_of_one_key_share_one_computation() -> None:
    gate = HeavyReads()
    release = threading.Event()
    calls = []

    def compute() -> str:
        calls.append(1)
        release.wait(10)
        return "digest"

    callers = [asyncio.create_task(gate.run("digest", compute)) for _ in range(20)]
    await asyncio.sleep(0.05)
    release.set()
    assert await asyncio.gather(*callers) == ["digest"] * 20
    assert len(calls) == 1 and gate.computations == 1


async def test_different_keys_never_compute_at_the_same_time() -> None:
    gate = HeavyReads(sleep=lambda s: asyncio.sleep(0))
    running = 0
    most = 0
    guard = threading.Lock()

    def compute(n: int) -> int:
        nonlocal running, most
        with guard:
            running += 1
            most = max(most, running)
        threading.Event().wait(0.01)
        with guard:
            running -= 1
        return n

    results = await asyncio.gather(*(gate.run(("herd", n), compute, n) for n in range(8)))
    assert results == list(range(8))
    assert most == 1 and gate.computations == 8


async def test_the_next_computation_rests_as_long_as_the_last_one_ran() -> None:
    now = [100.0]
    rests: list[float] = []

    async def sleep(seconds: float) -> None:
        rests.append(seconds)
        now[0] += seconds

    gate = HeavyReads(clock=lambda: now[0], sleep=sleep)

    def compute(cost: float) -> float:
        now[0] += cost  # the computation "takes" this long
        return cost

    assert await gate.run("a", compute, 5.0) == 5.0
    assert rests == []
    assert await gate.run("b", compute, 2.0) == 2.0
    assert rests == [5.0]  # heavy reads take at most half the time
    assert await gate.run("c", compute, 1.0) == 1.0
    assert rests == [5.0, 2.0]


async def test_a_caller_that_goes_away_does_not_cancel_it_for_the_others() -> None:
    gate = HeavyReads()
    release = threading.Event()

    def compute() -> int:
        release.wait(10)
        return 7

    leaving = asyncio.create_task(gate.run("k", compute))
    staying = asyncio.create_task(gate.run("k", compute))
    await asyncio.sleep(0.05)
    leaving.cancel()
    release.set()
    assert await staying == 7
    assert gate.computations == 1


async def test_an_error_reaches_every_caller_and_the_next_call_computes_again() -> None:
    gate = HeavyReads()
    attempts = []

    def compute() -> int:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("disk")
        return 1

    try:
        await gate.run("k", compute)
    except OSError:
        pass
    else:
        raise AssertionError("the error must reach the caller")
    assert await gate.run("k", compute) == 1
    assert len(attempts) == 2


async def test_a_kept_result_answers_until_it_is_stale() -> None:
    now = [0.0]
    gate = HeavyReads(clock=lambda: now[0], sleep=lambda s: asyncio.sleep(0))
    calls = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert await gate.run("k", compute, keep_s=30) == 1
    now[0] = 29.0
    assert await gate.run("k", compute, keep_s=30) == 1
    assert gate.kept("k") == 1
    now[0] = 31.0
    assert gate.kept("k") is None
    assert await gate.run("k", compute, keep_s=30) == 2
