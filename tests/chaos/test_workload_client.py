"""How the chaos client records a try: a refusal made before anything was proposed is a
definite failure in the history (the checker may count it as not applied), and is tried
again."""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest

from chaos.workload import Client


class Procs:
    ids = ["n1"]
    urls = {"n1": "http://n1"}

    def node_pid(self, node: str) -> int:
        return 1

    def auth_headers(self) -> dict[str, str]:
        return {}


class History:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def new_id(self) -> int:
        return len(self.records) + 1

    def write(self, process: str, type_: str, f: str, **fields: Any) -> None:
        self.records.append({"type": type_, "f": f, **fields})


@pytest.mark.parametrize("code", ["no_leader", "clock_unconfirmed"])
def test_a_503_refused_before_proposing_is_a_failure_and_is_retried(code: str) -> None:
    answers = [httpx.Response(503, json={"error": {"code": code, "message": "x"}}),
               httpx.Response(201, json={"id": "j"})]
    history = History()
    client = Client(Procs(), history, random.Random(1))  # type: ignore[arg-type]
    client.http = httpx.Client(transport=httpx.MockTransport(lambda _: answers.pop(0)))
    assert client.retried("put_job", "POST", "/v1/jobs", body={}) == ("ok", {"id": "j"})
    assert [r["type"] for r in history.records] == ["invoke", "fail", "invoke", "ok"]


def test_another_503_may_have_been_applied() -> None:
    history = History()
    client = Client(Procs(), history, random.Random(1))  # type: ignore[arg-type]
    client.http = httpx.Client(transport=httpx.MockTransport(lambda _: httpx.Response(
        503, json={"error": {"code": "unknown_outcome", "message": "x"}})))
    assert client.request("put_job", "POST", "/v1/jobs")[0] == "info"
