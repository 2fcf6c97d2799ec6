"""One digest mark, read from several nodes: their states compared at one exact index.

The harness proposes a mark through the leader (`POST /v1/digest/marks`) and then asks
each node for its digest at that mark (`GET /v1/digest/marks/{mark}`) until it answers,
within one bound for all of them. A node that has not applied the mark yet answers 404
and is asked again; one that never answers in time, or could not compute its digest, is
recorded with the error. The checker (chaos/checks_membership.py) compares the digests.
"""

from __future__ import annotations

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
