"""The final reads' GET helper: a 404 is an answer (retention prunes occurrences while the
reads run); other failures are retried."""

from __future__ import annotations

import httpx

from chaos.reads import _get


def client(statuses: list[int]) -> tuple[httpx.Client, list[int]]:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        status = statuses[min(len(calls), len(statuses) - 1)]
        calls.append(status)
        return httpx.Response(status, json={"ok": status == 200})

    return httpx.Client(transport=httpx.MockTransport(handler)), calls


def test_a_404_is_answered_at_once() -> None:
    http, calls = client([404])
    assert _get(http, "http://n1/v1/occurrences/x") is None
    assert calls == [404]


def test_a_503_is_retried_until_an_answer() -> None:
    http, calls = client([503, 200])
    assert _get(http, "http://n1/v1/occurrences/x") == {"ok": True}
    assert calls == [503, 200]
