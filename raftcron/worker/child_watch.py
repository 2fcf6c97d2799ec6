"""How the worker's event loop learns that a job's process exited.

Python 3.11's asyncio waits for every child in a thread of its own (ThreadedChildWatcher):
each spawn starts a thread, and the event loop blocks until that thread runs, which beside
busy threads takes a GIL switch interval or more. With 32 runs in flight that thread work
took more of the worker's CPU than forking did (bench/worker.py --profile). Linux's pidfds
(kernel 5.3+) let the loop watch exits like any other descriptor, with no thread; Python
3.12 and later use them by default, so this only changes 3.11.

`RAFTCRON_WORKER_CHILD_WATCHER=threaded` keeps asyncio's threads (an escape hatch, and
the other half of bench/worker.py's side-by-side).
"""

from __future__ import annotations

import asyncio
import os
import sys
import warnings

ENV_VAR = "RAFTCRON_WORKER_CHILD_WATCHER"
# What watch_children_with_pidfds chose in this process ("asyncio": it was not called).
chosen = "asyncio"


def pidfds_work() -> bool:
    """Whether this kernel and Python can open a pidfd (a probe on this very process)."""
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


def watch_children_with_pidfds(loop: asyncio.AbstractEventLoop) -> str:
    """Make `loop` (running) watch child exits through pidfds where that is not already
    the default; the watcher in use afterwards: "pidfd", "default" (3.12+, which picks
    pidfds itself where they work) or "threaded" (no pidfds here: asyncio's own).
    Logs nothing: a worker whose configuration is refused prints one line and no more."""
    global chosen
    chosen = _choose(loop)
    return chosen


def _choose(loop: asyncio.AbstractEventLoop) -> str:
    if sys.version_info >= (3, 12):
        return "default"
    if os.environ.get(ENV_VAR) == "threaded" or not pidfds_work():
        return "threaded"
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(loop)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_child_watcher(watcher)
    return "pidfd"
