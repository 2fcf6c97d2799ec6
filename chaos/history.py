"""The run's history: one JSONL line per client or nemesis operation event."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any


class History:
    """Append-only JSONL writer shared by the driver, the monitor and the nemesis threads.

    Every line carries the seed, wall and monotonic time, the process kind (`client`,
    `nemesis`, `monitor`, `harness`) and the event type (`invoke`, `ok`, `fail`, `info`,
    `start`, `stop`, `observe`, `note`). `info` means the outcome is unknown.
    """

    def __init__(self, path: Path, seed: int, base_offset_s: float) -> None:
        self.path = path
        self.seed = seed
        self.base_offset_s = base_offset_s
        self._lock = threading.Lock()
        self._f = open(path, "a", buffering=1)
        self._next_id = 0

    def new_id(self) -> int:
        with self._lock:
            self._next_id += 1
            return self._next_id

    def write(self, process: str, type_: str, f: str, **fields: Any) -> dict[str, Any]:
        wall = time.time()
        rec = {
            "seed": self.seed, "process": process, "type": type_, "f": f,
            "wall": round(wall, 6), "cluster_wall": round(wall + self.base_offset_s, 6),
            "mono": round(time.monotonic(), 6), "harness_pid": os.getpid(), **fields,
        }
        line = json.dumps(rec, sort_keys=True, default=str)
        with self._lock:
            self._f.write(line + "\n")
        return rec

    def close(self) -> None:
        with self._lock:
            self._f.close()


def read_history(path: Path) -> list[dict[str, Any]]:
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out
