"""Reads of one node's own state, as the final reads and the departure read take them."""

from __future__ import annotations

import time
from typing import Any

import httpx


def _get(http: httpx.Client, url: str, **kw: Any) -> Any:
    """The JSON of a 200 answer, retried a few times; None at once on a 404 (a definite
    answer: retention prunes occurrences while the final reads run)."""
    for _ in range(5):
        try:
            r = http.get(url, **kw)
            if r.status_code == 200:
                return r.json()
            if r.status_code == 404:
                return None
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    return None


def read_node(http: httpx.Client, base: str) -> dict[str, Any]:
    """One node's cluster view, tenants, jobs and every occurrence (its own state, no
    barrier); `occurrences_incomplete` when a page could not be read."""
    node: dict[str, Any] = {"cluster": _get(http, base + "/v1/cluster"),
                            "tenants": (_get(http, base + "/v1/tenants") or {}).get("tenants")}
    for key in ("jobs", "occurrences"):
        rows: list[dict[str, Any]] = []
        cursor = None
        while True:
            params = {"limit": 500, **({"cursor": cursor} if cursor else {})}
            page = _get(http, f"{base}/v1/{key}", params=params)
            if not page:
                if key == "occurrences":
                    node["occurrences_incomplete"] = True
                break
            rows += page[key]
            cursor = page["next_cursor"]
            if not cursor:
                break
        node[key] = rows
    return node


def read_attempts_checked(http: httpx.Client, base: str, occ_ids: list[str]
                          ) -> tuple[dict[str, Any], list[str]]:
    """occurrence id -> its attempt list (None where the read failed), 8 at a time, and the
    occurrences that were gone (404: retention pruned them between the two reads)."""
    from concurrent.futures import ThreadPoolExecutor
    from urllib.parse import quote

    gone: list[str] = []

    def one(occ_id: str) -> tuple[str, Any]:
        url = base + "/v1/occurrences/" + quote(occ_id, safe="")
        for _ in range(5):
            try:
                r = http.get(url)
                if r.status_code == 200:
                    return occ_id, r.json().get("attempt_list")
                if r.status_code == 404:
                    gone.append(occ_id)
                    return occ_id, None
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.5)
        return occ_id, None

    with ThreadPoolExecutor(8) as pool:
        out = dict(pool.map(one, occ_ids))
    return out, sorted(gone)


def read_attempts(http: httpx.Client, base: str, occ_ids: list[str]) -> dict[str, Any]:
    """occurrence id -> its attempt list (None where the read failed or found nothing)."""
    return read_attempts_checked(http, base, occ_ids)[0]
