"""No-op pollers (bench.common.noop_poller) spread over processes of their own.

Real workers are processes of their own. One process playing all of them shares one event
loop and one core among them, so one poller's check or start can wait on another's work.
`run_pollers(processes=K)` runs the pollers in K processes (round robin) and merges what
they saw. At the 100,000 herd the difference is small once the leader reads its clock as
it sends a lease answer (a lease answer's delivery: at most 96-150 ms in 16 processes,
230 ms in one; bench/results/herd-100k.txt). Before that, answers reached the pollers up
to 1.8-2.9 s after their stamp in both cases: the wait was on the leader.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from bench.common import Received, noop_poller


@dataclass(frozen=True)
class PollerPlan:
    """What every poller is told: where to poll, for which queue, until when."""

    urls: list[str]
    queue: str
    headers: dict[str, str]
    total: int  # the pollers stop once this many runs completed across all of them
    done_by: float  # ... or at this wall time
    wait_s: float = 1.0
    ahead: bool = True
    acknowledge: bool = True


def merge(into: Received, other: Received) -> None:
    into.leases.extend(other.leases)
    into.completed += other.completed
    into.ahead_ids |= other.ahead_ids
    into.received_last = max(into.received_last, other.received_last)
    into.answer_delay_max = max(into.answer_delay_max, other.answer_delay_max)
    into.checks.extend(other.checks)


def _stop_when_all_done(plan: PollerPlan, seen: Received,
                        completed: Synchronized) -> Callable[[], bool]:  # type: ignore[type-arg]
    """The poller's stop test, adding this process's new completions to the shared count."""
    added = 0

    def finished() -> bool:
        nonlocal added
        if seen.completed > added:
            with completed.get_lock():
                completed.value += seen.completed - added
            added = seen.completed
        return completed.value >= plan.total or time.time() > plan.done_by

    return finished


async def _poll(plan: PollerPlan, names: list[str], seen: Received,
                stop: Callable[[], bool]) -> None:
    """One poller per name in this event loop, all recording into `seen`."""
    await asyncio.gather(*(noop_poller(plan.urls, name, plan.queue, stop, seen, plan.headers,
                                       wait_s=plan.wait_s, ahead=plan.ahead,
                                       acknowledge=plan.acknowledge) for name in names))


def _process_main(plan: PollerPlan, names: list[str], completed: Any, out: Any) -> None:
    seen = Received()
    asyncio.run(_poll(plan, names, seen, _stop_when_all_done(plan, seen, completed)))
    out.put(seen)


async def run_pollers(plan: PollerPlan, names: list[str], processes: int) -> Received:
    """Run one poller per name in `processes` processes (1: in this event loop) until the
    plan's total completed or its deadline; what they all saw."""
    if processes <= 1:
        seen = Received()
        await _poll(plan, names, seen, lambda: seen.completed >= plan.total
                    or time.time() > plan.done_by)
        return seen
    ctx = mp.get_context("spawn")  # no fork of a process with threads and sockets
    completed = ctx.Value("q", 0)
    out = ctx.Queue()
    groups = [names[i::processes] for i in range(min(processes, len(names)))]
    procs = [ctx.Process(target=_process_main, args=(plan, group, completed, out),
                         name=f"pollers-{i}") for i, group in enumerate(groups)]
    for proc in procs:
        proc.start()
    return await asyncio.to_thread(_collect, plan, procs, out)


def _collect(plan: PollerPlan, procs: list[Any], out: Any) -> Received:
    """Every process's result, merged; read before joining (a child exits only once its
    result is taken). A child that exits without one fails the run at once."""
    merged = Received()
    results = 0
    give_up = plan.done_by + 60
    while results < len(procs):
        try:
            merge(merged, out.get(timeout=1.0))
            results += 1
        except queue.Empty:
            dead = [f"{p.name} (exit {p.exitcode})" for p in procs if p.exitcode]
            if dead or time.time() > give_up:
                raise RuntimeError(f"a poller process gave no result: "
                                   f"{dead or 'none exited'}") from None
    for proc in procs:
        proc.join()
    return merged
