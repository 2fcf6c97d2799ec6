"""DNS rebinding: for a tenant with a policy the worker checks the addresses a target's
host resolves to, and connects to the one it checked. DNS is replaced here (unit test);
the HTTP server is real, on loopback."""

from __future__ import annotations

import asyncio
import ipaddress
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from raftcron.worker import egress
from raftcron.worker.client import Lease
from raftcron.worker.executors import execute


class _Echo(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        _Echo.hits.append(self.headers["Host"])
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"reached " + self.headers["Host"].encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[int]:
    httpd = HTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Echo.hits = []
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()


def fake_dns(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[str]]) -> None:
    async def resolve(host: str, port: int) -> list[Any]:
        return [ipaddress.ip_address(a) for a in answers[host]]

    monkeypatch.setattr(egress, "resolve", resolve)


def lease(url: str, rule: dict[str, Any] | None) -> Lease:
    return Lease.from_dict({
        "attempt_id": "j@x~1", "occurrence_id": "j@x", "job_id": "j",
        "scheduled_for": "2026-01-01T00:00:00Z", "attempt": 1, "fencing_token": 1,
        "idempotency_key": "j@x", "target": {"http": {"url": url, "method": "POST"}},
        "max_runtime_s": 10, "heartbeat_interval_s": 10, "http_rule": rule})


def test_a_public_name_resolving_to_loopback_is_not_reached(
        monkeypatch: pytest.MonkeyPatch, server: int) -> None:
    fake_dns(monkeypatch, {"rebind.example.com": ["127.0.0.1"]})
    url = f"http://rebind.example.com:{server}/"
    result = asyncio.run(execute(lease(url, {"http_hosts": ["*.example.com"]})))
    assert result.outcome == "failed" and "private address 127.0.0.1" in result.output
    result = asyncio.run(execute(lease(url, {"http_hosts": None})))
    assert result.outcome == "failed" and "private address" in result.output
    assert _Echo.hits == []


def test_a_listed_host_is_reached_at_the_address_that_was_checked(
        monkeypatch: pytest.MonkeyPatch, server: int) -> None:
    fake_dns(monkeypatch, {"db.example.com": ["127.0.0.1"]})
    url = f"http://db.example.com:{server}/"
    result = asyncio.run(execute(lease(url, {"http_hosts": ["db.example.com"]})))
    assert result.outcome == "succeeded", result.output
    assert _Echo.hits == [f"db.example.com:{server}"]  # connected to 127.0.0.1, Host kept


def test_without_a_rule_the_worker_behaves_as_before(server: int) -> None:
    result = asyncio.run(execute(lease(f"http://127.0.0.1:{server}/", None)))
    assert result.outcome == "succeeded" and _Echo.hits == [f"127.0.0.1:{server}"]


def test_a_resolution_failure_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(host: str, port: int) -> list[Any]:
        raise OSError("no such host")

    monkeypatch.setattr(egress, "resolve", broken)
    result = asyncio.run(execute(lease("https://gone.example.com/", {"http_hosts": None})))
    assert result.outcome == "failed" and "cannot resolve" in result.output


def test_pinning_keeps_sni_and_host_for_https(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_dns(monkeypatch, {"api.example.com": ["93.184.216.34", "10.0.0.1"]})
    with pytest.raises(egress.EgressRefused, match="10.0.0.1"):  # one private answer
        asyncio.run(egress.pin("https://api.example.com/x", {"http_hosts": None}))
    fake_dns(monkeypatch, {"api.example.com": ["93.184.216.34"]})
    pinned = asyncio.run(egress.pin("https://api.example.com/x?q=1", {"http_hosts": None}))
    assert pinned == egress.Pinned("https://93.184.216.34/x?q=1", "api.example.com",
                                   "api.example.com")
