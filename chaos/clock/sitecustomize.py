"""Loaded by the node processes of a chaos run (this directory is put on PYTHONPATH).

It moves the wall clock (`time.time()`, `datetime.now()`) with time-machine and leaves
the monotonic clock alone (libfaketime hangs threaded Python). Two knobs:

- CHAOS_CLOCK_BASE: seconds added to the wall clock for the whole life of the process
  (every node of the run shares it: this is how a run is moved next to a DST transition);
- CHAOS_CLOCK_FILE: a file holding an extra offset in seconds, polled every 20 ms, so a
  nemesis can bump or strobe one node's clock at run time without restarting it.
"""

from __future__ import annotations

import os
import threading
import time


def _start() -> None:
    base = float(os.environ.get("CHAOS_CLOCK_BASE", "0") or 0)
    path = os.environ.get("CHAOS_CLOCK_FILE")
    if not base and not path:
        return
    from datetime import UTC, datetime, timedelta

    import time_machine

    dest = datetime.now(UTC) + timedelta(seconds=base)
    coords = time_machine.travel(dest, tick=True).start()
    # time-machine starts ticking at the first clock read, not at start(): read it now, or
    # the slow imports that follow would leave this process's clock behind the others'.
    time.time()
    if not path:
        return
    current = [0.0]

    def poll() -> None:
        while True:
            try:
                with open(path) as f:
                    text = f.read().strip()
                want = float(text) if text else 0.0
            except (OSError, ValueError):
                want = current[0]
            if want != current[0]:
                coords.shift(timedelta(seconds=want - current[0]))
                current[0] = want
            time.sleep(0.02)

    threading.Thread(target=poll, name="chaos-clock", daemon=True).start()


_start()
