"""The worker watches its job processes through pidfds on Python 3.11 (raftcron.worker.
child_watch): exits are still seen, with their codes, and no thread is started per child."""

from __future__ import annotations

import asyncio
import sys
import threading
import warnings
from collections.abc import Iterator

import pytest

from raftcron.worker import child_watch
from raftcron.worker.executors import run_shell


@pytest.fixture
def default_watcher_after() -> Iterator[None]:
    yield
    if sys.version_info < (3, 12):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            asyncio.set_child_watcher(None)  # back to asyncio's own for the next test


def _run_children(env_value: str | None, monkeypatch: pytest.MonkeyPatch
                  ) -> tuple[str, list[tuple[int | None, str]], int]:
    if env_value is None:
        monkeypatch.delenv(child_watch.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(child_watch.ENV_VAR, env_value)
    threads_seen: list[int] = []

    async def main() -> tuple[str, list[tuple[int | None, str]]]:
        kind = child_watch.watch_children_with_pidfds(asyncio.get_running_loop())
        before = threading.active_count()
        # The children live long enough to be counted while they run.
        jobs = [run_shell(f"sleep 1; echo out-{i}; exit {i % 3}") for i in range(12)]
        gathered = asyncio.gather(*jobs)
        await asyncio.sleep(0.5)
        threads_seen.append(threading.active_count() - before)
        results = await gathered
        return kind, [(r.exit_code, r.output.strip()) for r in results]

    kind, results = asyncio.run(main())
    return kind, results, max(threads_seen)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ picks pidfds itself")
def test_exits_are_seen_through_pidfds_without_a_thread_a_child(
        monkeypatch: pytest.MonkeyPatch, default_watcher_after: None) -> None:
    if not child_watch.pidfds_work():
        pytest.fail("this kernel has no pidfds (Linux 5.3+); the worker would use threads")
    kind, results, extra_threads = _run_children(None, monkeypatch)
    assert kind == "pidfd"
    assert results == [(i % 3, f"out-{i}") for i in range(12)]
    assert extra_threads == 0


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ picks pidfds itself")
def test_the_escape_hatch_keeps_asyncios_threads(
        monkeypatch: pytest.MonkeyPatch, default_watcher_after: None) -> None:
    kind, results, extra_threads = _run_children("threaded", monkeypatch)
    assert kind == "threaded"
    assert results == [(i % 3, f"out-{i}") for i in range(12)]
    assert extra_threads == 12  # asyncio's waiter threads, one a child: what pidfds spare


def test_without_pidfds_the_worker_falls_back_to_threads(
        monkeypatch: pytest.MonkeyPatch, default_watcher_after: None) -> None:
    def no_pidfds(pid: int) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(child_watch.os, "pidfd_open", no_pidfds)
    assert not child_watch.pidfds_work()
    expected = "default" if sys.version_info >= (3, 12) else "threaded"
    kind, results, _ = _run_children(None, monkeypatch)
    assert kind == expected
    assert results == [(i % 3, f"out-{i}") for i in range(12)]
