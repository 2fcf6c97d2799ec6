from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from raftcron.testing import LocalCluster


def ts(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())


def add_job(c: LocalCluster, nid: str, job_id: str, cron: str = "* * * * * *",
            **extra: Any) -> dict[str, Any]:
    body = {"id": job_id, "schedule": {"cron": cron}, "target": {"shell": "true"}, **extra}
    resp = c.post(nid, "/v1/jobs", body)
    assert resp.status_code == 201, resp.text
    return resp.json()


def assert_every_second_once(occs: list[dict[str, Any]], *, covering: tuple[float, float]
                             | None = None, at_least: int = 1) -> list[int]:
    """Scheduled occurrences of a per-second job: no duplicate, no hole, at least
    `at_least` of them, and (with `covering=(lo, hi)`) every second from before lo to after
    hi recorded. An empty or short list fails: "every second once" of nothing proves
    nothing."""
    sched = [o for o in occs if o["kind"] == "scheduled"]
    counts = Counter(o["scheduled_for"] for o in sched)
    dups = {k: v for k, v in counts.items() if v > 1}
    assert not dups, f"duplicate occurrences: {dups}"
    instants = sorted(ts(o["scheduled_for"]) for o in sched)
    assert len(instants) >= at_least, f"only {len(instants)} scheduled occurrences"
    holes = [(a, b) for a, b in zip(instants, instants[1:], strict=False) if b - a != 1]
    assert not holes, f"missing instants between {holes}"
    if covering is not None:
        lo, hi = covering
        assert instants[0] < lo and instants[-1] > hi, (
            f"instants {instants[0]}..{instants[-1]} do not span {lo:.1f}..{hi:.1f}")
    return instants


def sleep_until_past(instant: int) -> None:
    time.sleep(max(0.0, instant - time.time()))


@contextmanager
def serving_cluster(root: Path, configure: Callable[[LocalCluster], None] | None = None,
                    nodes: int = 3) -> Iterator[LocalCluster]:
    """A started cluster (three nodes unless told) with a leader and every node answering
    HTTP; closed on exit. `configure` edits the cluster (e.g. its Raft options) before it
    starts."""
    c = LocalCluster(root, nodes=nodes)
    if configure is not None:
        configure(c)
    c.start()
    try:
        c.wait_leader(timeout=30)
        c.wait_serving()
        yield c
    finally:
        c.close()


def as_from_a_terminal() -> None:
    """`preexec_fn` for a process a test stops with SIGINT, as Ctrl-C in a terminal would.

    A command started in the background by a non-interactive shell (`pytest ... &`, as
    .ci/run starts one of its two sessions) has SIGINT ignored, and its children inherit
    that: Python then installs no KeyboardInterrupt handler, and SIGINT does nothing. A
    terminal user's process has the default disposition; so does this one."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
