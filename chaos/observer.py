"""What retention will remove, seen before it goes: the observer thread of a chaos run.

Every node prunes finished history older than the retention (chaos/procs.RETENTION_S), so
the final reads no longer hold the start of a five-minute run. Every PERIOD_S the observer
reads the occurrences whose instant lies in a band of ages [BAND_OLD_S, BAND_YOUNG_S]
(from one node that answers, trying each in turn), with the attempts of the quota tenant's
occurrences, and writes them to `observed.jsonl`. An occurrence is pruned at the earliest
when it finished a retention ago, and it finished at the earliest a claim lookahead (1 s)
before its instant, so it is still there at any age below RETENTION_S - 1. The band's
young edge lies 40 s below the retention, more than the period: every instant is read at
least once at an age where nothing can have pruned it yet, and the checker
(chaos/checks_retention.py) knows each pruned occurrence's last state.

The checker calls any instant no successful observation's band covered unobserved (the
run is then no evidence). So successive bands overlap by `BAND_S - PERIOD_S` (45 s), and
an observation that no node answered (a majority killed, every node catching up: 30 s in
one ci run, which left a 20 ms gap when the bands were 45 s wide) is tried again after
RETRY_S, not a whole period later.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from chaos.procs import RETENTION_S, Processes
from chaos.workload import QUOTA_TENANT

PERIOD_S = 15.0
RETRY_S = 2.0
BAND_YOUNG_S = RETENTION_S - 40.0
BAND_OLD_S = RETENTION_S + 20.0
BAND_S = BAND_OLD_S - BAND_YOUNG_S
PAGE = 500


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


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
        self.base_offset_s = base_offset_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="observer", daemon=True)
        self.http = httpx.Client(timeout=5.0, headers=procs.auth_headers())
        self._turn = 0

    def start(self) -> None:
        self.path.touch()
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.http.close()

    def _loop(self) -> None:
        with open(self.path, "a", buffering=1) as f:
            while not self.stop.is_set():
                began = time.monotonic()
                seen = self.observe_once()
                f.write(json.dumps(seen) + "\n")
                self.stop.wait(next_wait_s(seen["node"] is not None,
                                           time.monotonic() - began))

    def observe_once(self) -> dict[str, Any]:
        """One read of the band, from the first node (in rotation) that answers whole."""
        at = time.time() + self.base_offset_s
        since, until = at - BAND_OLD_S, at - BAND_YOUNG_S
        ids = self.procs.ids[self._turn:] + self.procs.ids[:self._turn]
        self._turn = (self._turn + 1) % len(self.procs.ids)
        errors: dict[str, str] = {}
        for nid in ids:
            try:
                occs = self._occurrences(nid, since, until)
                attempts = self._attempts(nid, [o for o in occs if o["tenant"] == QUOTA_TENANT
                                               and o["attempts"]])
            except (httpx.HTTPError, ValueError, KeyError) as e:
                errors[nid] = type(e).__name__
                continue
            return {"cluster_wall": round(at, 3), "node": nid, "since": round(since, 3),
                    "until": round(until, 3), "occurrences": occs, "attempts": attempts,
                    "errors": errors}
        return {"cluster_wall": round(at, 3), "node": None, "since": round(since, 3),
                "until": round(until, 3), "errors": errors}

    def _occurrences(self, nid: str, since: float, until: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cursor = None
        while True:
            # Consistent: a node that is still catching up (back from a partition or a
            # kill) would answer from its stale state and miss what retention then prunes.
            params = {"since": _iso(since), "until": _iso(until), "limit": PAGE,
                      "consistent": "true", **({"cursor": cursor} if cursor else {})}
            r = self.http.get(self.procs.urls[nid] + "/v1/occurrences", params=params)
            r.raise_for_status()
            page = r.json()
            out += page["occurrences"]
            cursor = page["next_cursor"]
            if not cursor:
                return out

    def _attempts(self, nid: str, occs: list[dict[str, Any]]) -> dict[str, Any]:
        def one(occ_id: str) -> tuple[str, Any]:
            r = self.http.get(self.procs.urls[nid] + "/v1/occurrences/"
                              + quote(occ_id, safe=""))
            r.raise_for_status()
            return occ_id, r.json()["attempt_list"]

        with ThreadPoolExecutor(4) as pool:
            return dict(pool.map(one, [o["id"] for o in occs]))
