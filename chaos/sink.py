"""The fenced sink: a small HTTP service that records every job side effect.

A job's effect is `POST /effect` with headers naming the job, occurrence, attempt,
scheduled instant, worker and fencing token. The key is the occurrence's idempotency key.

The sink records every offer, in arrival order (`seq`), with its raw token, and answers
200 to each: it is the checker that decides, by replaying the offers against the token
fence, which writes were stale (chaos/checks_effects.py). Answering 200 to a stale offer
is on purpose: the late job of a superseded lease then exits 0 and its worker reports a
success with the old token, which the cluster must refuse (fencing, ARCHITECTURE.md 3.3);
had it been credited, the checker's `stale_write` fires. `prev_max` is the highest token
offered for the key before this one.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Sink:
    def __init__(self, log_path: str, base_offset_s: float) -> None:
        self.base_offset_s = base_offset_s
        self.highest: dict[str, int] = {}
        self.seq = 0
        self.lock = threading.Lock()
        self.log = open(log_path, "a", buffering=1)

    def record(self, h: dict[str, str]) -> dict[str, Any]:
        # Shell jobs name everything in X- headers; an HTTP target sends the lease's own
        # Idempotency-Key (the occurrence id) and X-Raftcron-Fencing-Token, and the checker
        # finds the attempt from the token.
        token = int(h.get("x-token") or h.get("x-raftcron-fencing-token") or -1)
        key = h.get("x-key") or h.get("idempotency-key") or h.get("x-occ") or ""
        wall = time.time()
        with self.lock:
            self.seq += 1
            prev = self.highest.get(key)
            self.highest[key] = max(token, prev if prev is not None else token)
            rec = {
                "event": "offer", "seq": self.seq, "response": 200,
                "wall": round(wall, 6), "cluster_wall": round(wall + self.base_offset_s, 6),
                "mono": round(time.monotonic(), 6), "key": key, "job": h.get("x-job"),
                "occurrence": h.get("x-occ") or key, "attempt": h.get("x-attempt"),
                "scheduled_for": h.get("x-sched"), "worker": h.get("x-worker"),
                "token": token, "prev_max": prev,
                "replay": bool(prev is not None and token == prev),
            }
            self.log.write(json.dumps(rec, sort_keys=True) + "\n")
        return rec

    def start(self, h: dict[str, str]) -> dict[str, Any]:
        """A job process starting, posted before anything else it does (a slow job's
        sleep comes after it): the early-start check judges this arrival, not the effect
        at the end. No token fence: a start is not an effect."""
        wall = time.time()
        with self.lock:
            self.seq += 1
            rec = {"event": "start", "seq": self.seq, "wall": round(wall, 6),
                   "cluster_wall": round(wall + self.base_offset_s, 6),
                   "job": h.get("x-job"), "occurrence": h.get("x-occ"),
                   "attempt": h.get("x-attempt"), "scheduled_for": h.get("x-sched"),
                   "worker": h.get("x-worker"), "token": int(h.get("x-token") or -1)}
            self.log.write(json.dumps(rec, sort_keys=True) + "\n")
        return rec

    def hold(self, h: dict[str, str], phase: str) -> dict[str, Any]:
        """A concurrency-group job's process starting or ending (chaos/checks_groups.py):
        numbered in the same arrival order as the offers."""
        with self.lock:
            self.seq += 1
            wall = time.time()
            rec = {"event": "hold", "seq": self.seq, "phase": phase, "group": h.get("x-group"),
                   "wall": round(wall, 6), "cluster_wall": round(wall + self.base_offset_s, 6),
                   "scheduled_for": h.get("x-sched"), "job": h.get("x-job"),
                   "occurrence": h.get("x-occ"), "attempt": h.get("x-attempt"),
                   "token": int(h.get("x-token") or -1), "worker": h.get("x-worker")}
            self.log.write(json.dumps(rec, sort_keys=True) + "\n")
        return rec


def make_handler(sink: Sink) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            if self.path.startswith("/effect"):
                rec = sink.record({k.lower(): v for k, v in self.headers.items()})
                body = json.dumps(rec).encode()
                self.send_response(200)
            elif self.path.startswith("/start"):
                rec = sink.start({k.lower(): v for k, v in self.headers.items()})
                body = json.dumps(rec).encode()
                self.send_response(200)
            elif self.path.startswith("/hold?phase="):
                rec = sink.hold({k.lower(): v for k, v in self.headers.items()},
                                self.path.split("=", 1)[1])
                body = json.dumps(rec).encode()
                self.send_response(200)
            else:
                body = b"{}"
                self.send_response(404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--base-offset", type=float, default=0.0)
    args = ap.parse_args()
    sink = Sink(args.log, args.base_offset)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(sink))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
