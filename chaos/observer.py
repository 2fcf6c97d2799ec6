"""What retention will remove, seen before it goes: the observer thread of a chaos run.

Every node prunes finished history older than the retention (chaos/procs.RETENTION_S), so
the final reads no longer hold the start of a five-minute run. Every PERIOD_S the observer
reads, on every member, the occurrences whose instant lies in a band of ages
[BAND_OLD_S, BAND_YOUNG_S] with every attempt of each (status, token, worker, times),
straight from the member's own state file (chaos/observe_db.py), and writes one line per
member to `observed.jsonl` (`node` null and an `error` for a member it could not read).
An occurrence is pruned at the earliest when it finished a retention ago, and it finished
at the earliest a claim lookahead (1 s) before its instant, so it is still there at any
age below RETENTION_S - 1. The band's young edge lies 40 s below the retention, more than
the period: every instant is read at least once at an age where nothing can have pruned it
yet, and the checker knows each pruned occurrence's last state and attempts on each member
(chaos/checks_retention.py, chaos/checks_observed.py).

The checker calls any instant no successful observation's band covered unobserved (the
run is then no evidence). So successive bands overlap by `BAND_S - PERIOD_S` (45 s), and
an observation that no member answered (a majority killed, every node catching up: 30 s
in one ci run, which left a 20 ms gap when the bands were 45 s wide) is tried again after
RETRY_S, not a whole period later.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from chaos.observe_db import db_path, read_band
from chaos.procs import RETENTION_S, Processes

PERIOD_S = 15.0
RETRY_S = 2.0
BAND_YOUNG_S = RETENTION_S - 40.0
BAND_OLD_S = RETENTION_S + 20.0
BAND_S = BAND_OLD_S - BAND_YOUNG_S


def next_wait_s(answered: bool, elapsed_s: float) -> float:
    """Seconds until the next observation: a period after the start of one that a node
    answered, RETRY_S after one that no node answered."""
    if not answered:
        return RETRY_S
    return max(0.0, PERIOD_S - elapsed_s)


class Observer:
    def __init__(self, procs: Processes, out: Path, base_offset_s: float) -> None:
        self.procs = procs
        self.path = out / "observed.jsonl"
        self.nodes_dir = out / "nodes"
        self.base_offset_s = base_offset_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="observer", daemon=True)

    def start(self) -> None:
        self.path.touch()
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)

    def _loop(self) -> None:
        with open(self.path, "a", buffering=1) as f:
            while not self.stop.is_set():
                began = time.monotonic()
                lines = self.observe_once()
                for line in lines:
                    f.write(json.dumps(line) + "\n")
                answered = any(line["node"] is not None for line in lines)
                self.stop.wait(next_wait_s(answered, time.monotonic() - began))

    def observe_once(self, at: float | None = None) -> list[dict[str, Any]]:
        """One read of the band on every current member: a line per member."""
        at = time.time() + self.base_offset_s if at is None else at
        since, until = at - BAND_OLD_S, at - BAND_YOUNG_S
        band = {"cluster_wall": round(at, 3), "since": round(since, 3),
                "until": round(until, 3)}
        out = []
        for nid in list(self.procs.ids):
            try:
                occs, attempts = read_band(db_path(self.nodes_dir, nid), since, until)
            except (sqlite3.Error, OSError) as e:
                out.append({**band, "node": None, "member": nid,
                            "error": f"{type(e).__name__}: {e}"})
                continue
            out.append({**band, "node": nid, "source": "state-file", "occurrences": occs,
                        "attempts": attempts})
        return out
