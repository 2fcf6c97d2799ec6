"""One digest mark, read from several nodes: their states compared at one exact index.

The harness proposes a mark through the leader (`POST /v1/digest/marks`) and then asks
each node for its digest at that mark (`GET /v1/digest/marks/{mark}`) until it answers,
within one bound for all of them. A node that has not applied the mark yet answers 404
and is asked again; one that never answers in time, or could not compute its digest, is
recorded with the error. The checker (chaos/checks_membership.py) compares the digests.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

READ_TIMEOUT_S = 20.0
# Making a mark can take a proposal's 8 s and the node's own digest wait (10 s,
# api.digest_marks.LOCAL_WAIT_S).
MAKE_TIMEOUT_S = 30.0
POLL_S = 0.2


def compare_at_mark(http: httpx.Client, leader_url: str, urls: dict[str, str],
                    timeout_s: float = READ_TIMEOUT_S) -> dict[str, Any]:
    """Make a mark through `leader_url` and read it from every node of `urls` (node id ->
    base URL). Never raises: `{"mark", "index", "digests": {node: {"index", "digest"} or
    {"error"}}}`, or `{"error"}` when no mark was made."""
    try:
        resp = http.post(f"{leader_url}/v1/digest/marks", timeout=MAKE_TIMEOUT_S)
        made = resp.json() if resp.status_code == 201 else None
    except (httpx.HTTPError, ValueError) as e:
        return {"error": f"making the mark: {type(e).__name__}: {e}"}
    if not isinstance(made, dict) or not made.get("mark"):
        return {"error": f"making the mark: HTTP {resp.status_code} {resp.text[:200]}"}
    mark = made["mark"]
    waiting = dict(urls)
    last: dict[str, str] = {nid: "not asked" for nid in urls}
    digests: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    while waiting:
        for nid, url in list(waiting.items()):
            answer, problem = _read(http, url, mark)
            if answer is not None:
                digests[nid] = answer
                del waiting[nid]
            else:
                last[nid] = problem
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    for nid in waiting:
        digests[nid] = {"error": f"no digest within {timeout_s:.0f} s: {last[nid]}"}
    return {"mark": mark, "index": made.get("index"), "digests": digests}


def _read(http: httpx.Client, url: str, mark: str) -> tuple[dict[str, Any] | None, str]:
    """(the node's final answer, or None and why it is not there yet: 404 while the node
    has not applied or digested the mark, 5xx or no answer while it is busy or down)."""
    try:
        resp = http.get(f"{url}/v1/digest/marks/{mark}", timeout=2)
        body = resp.json()
    except (httpx.HTTPError, ValueError) as e:
        return None, f"{type(e).__name__}: {e}"
    if resp.status_code == 404 or resp.status_code >= 500:  # not applied here yet
        return None, f"HTTP {resp.status_code} {resp.text[:200]}"
    if resp.status_code != 200 or not isinstance(body, dict):  # asking again cannot help
        return {"error": f"HTTP {resp.status_code} {resp.text[:200]}"}, ""
    if body.get("digest") is None:
        return {"index": body.get("index"),
                "error": body.get("error") or "answered without a digest"}, ""
    return {"index": body.get("index"), "digest": body["digest"]}, ""


# Marks made while the faults run (chaos/checks_marks.py): often enough for several in a
# ci run's five minutes of faults, seldom enough that reading one (up to READ_TIMEOUT_S)
# never overlaps the next.
MARK_EVERY_S = 40.0


class Marker:
    """A thread that makes a digest mark every MARK_EVERY_S through whichever node leads
    and records each member's digest at it: a `marks` `digest-mark` line in the history.
    A mark it could not make (no leader) is recorded with its error, and the next one is
    tried a period later."""

    def __init__(self, procs: Any, history: Any) -> None:
        self.procs = procs
        self.history = history
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="digest-marks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self.stop.set()
        self._thread.join(READ_TIMEOUT_S + MAKE_TIMEOUT_S + 10)

    def _loop(self) -> None:
        with httpx.Client(timeout=10, headers=self.procs.auth_headers()) as http:
            while not self.stop.wait(MARK_EVERY_S):
                leader = self.procs.leader()
                if leader is None:
                    self.history.write("marks", "note", "digest-mark", error="no leader")
                    continue
                urls = {n: self.procs.urls[n] for n in self.procs.ids}
                compared = compare_at_mark(http, self.procs.urls[leader], urls)
                self.history.write("marks", "note", "digest-mark", leader=leader, **compared)
