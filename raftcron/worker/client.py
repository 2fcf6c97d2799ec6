"""HTTP client for the worker protocol, with failover across the cluster's servers.

Any node accepts worker requests (followers forward to the leader), so the client keeps a
preferred server and moves on to the next URL when a server refuses the connection, times
out, or answers with a retryable status (503 "no leader / outcome unknown", and other 5xx
or 429). One call makes at most one pass over the server list; callers decide whether and
how long to back off before another pass (`ServerUnavailable.retry_after` carries the
largest Retry-After seen).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from raftcron.core.ahead import start_delay_s

log = logging.getLogger("raftcron.worker")

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class ServerUnavailable(Exception):
    """No server gave an answer in one pass; the request's outcome is unknown."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ApiError(Exception):
    """A server answered with a non-retryable error (for example 400 or 401)."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field


@dataclass(frozen=True, slots=True)
class Lease:
    """One leased attempt, as returned by `POST /v1/leases`."""

    attempt_id: str
    occurrence_id: str
    job_id: str
    scheduled_for: str
    attempt: int
    fencing_token: int
    idempotency_key: str
    target: Mapping[str, Any]
    max_runtime_s: int | None
    heartbeat_interval_s: int
    tenant: str = ""
    """The job's tenant ("" from a node too old to say): its secret references resolve
    among that tenant's secrets only."""
    ack_timeout_s: int | None = None
    """Set when the server waits for this lease's acknowledgement (its first heartbeat)."""
    http_rule: Mapping[str, Any] | None = None
    """The tenant's host rule, checked again on the resolved addresses (worker.egress);
    None: the tenant has no policy."""
    start_at_ms: int | None = None
    """Leased ahead: the instant the run may start, the cluster's time."""
    start_mono_s: float | None = None
    """Leased ahead: the monotonic instant (this process's clock) before which the run must
    not start, from the lease's `start_at_ms` and the answer's `server_now_ms`
    (core.ahead). None: it may start at once."""
    upstream: Mapping[str, Any] | None = None
    """A chained job's run: the upstream run that started it (`job_id`, `occurrence_id`,
    `outcome`); None for every other run."""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], server_now_ms: Any = None,
                  received_mono_s: float | None = None) -> Lease:
        runtime = d.get("max_runtime_s")
        start_at = d.get("start_at_ms")
        start_mono = None
        if start_at is not None:
            if not isinstance(server_now_ms, int) or received_mono_s is None:
                raise ValueError("a lease with start_at_ms needs the answer's server_now_ms")
            start_mono = received_mono_s + start_delay_s(int(start_at), server_now_ms)
        return cls(
            attempt_id=str(d["attempt_id"]),
            occurrence_id=str(d["occurrence_id"]),
            job_id=str(d["job_id"]),
            scheduled_for=str(d["scheduled_for"]),
            attempt=int(d["attempt"]),
            fencing_token=int(d["fencing_token"]),
            idempotency_key=str(d["idempotency_key"]),
            target=d.get("target") or {},
            max_runtime_s=None if runtime is None else int(runtime),
            heartbeat_interval_s=max(1, int(d.get("heartbeat_interval_s") or 10)),
            tenant=str(d.get("tenant") or ""),
            ack_timeout_s=None if d.get("ack_timeout_s") is None else int(d["ack_timeout_s"]),
            http_rule=d.get("http_rule") if isinstance(d.get("http_rule"), Mapping) else None,
            start_at_ms=None if start_at is None else int(start_at),
            upstream=d.get("upstream") if isinstance(d.get("upstream"), Mapping) else None,
            start_mono_s=start_mono,
        )

    def ref(self) -> dict[str, Any]:
        """The `{"attempt_id", "fencing_token"}` pair used by heartbeats and releases."""
        return {"attempt_id": self.attempt_id, "fencing_token": self.fencing_token}

    def ids(self) -> str:
        return f"job={self.job_id} occurrence={self.occurrence_id} attempt={self.attempt_id}"


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _error_of(resp: httpx.Response) -> ApiError:
    code, message, field = "http_error", resp.text[:500], None
    try:
        err = resp.json().get("error") or {}
        code = str(err.get("code") or code)
        message = str(err.get("message") or message)
        field = err.get("field")
    except (ValueError, AttributeError):
        pass
    return ApiError(resp.status_code, code, message, field)


class WorkerClient:
    """Posts worker protocol requests to whichever server answers.

    `transport` is for tests (`httpx.MockTransport`); production uses httpx's default.
    """

    def __init__(
        self,
        servers: list[str],
        *,
        token: str | None = None,
        timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        urls = [s.strip().rstrip("/") for s in servers if s and s.strip()]
        if not urls:
            raise ValueError("at least one server URL is required")
        self.servers = urls
        self.timeout_s = timeout_s
        self._preferred = 0
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            headers=headers, timeout=timeout_s, transport=transport, follow_redirects=False
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> WorkerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def current_server(self) -> str:
        return self.servers[self._preferred]

    async def post(
        self, path: str, body: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """One pass over the servers, starting with the one that answered last.

        Returns the decoded 2xx body; raises `ApiError` on a non-retryable answer and
        `ServerUnavailable` when every server failed or answered with a retryable status.
        """
        n = len(self.servers)
        retry_after: float | None = None
        failures: list[str] = []
        timeout = self.timeout_s if timeout_s is None else timeout_s
        for i in range(n):
            idx = (self._preferred + i) % n
            url = self.servers[idx] + path
            try:
                resp = await self._http.post(url, json=body, timeout=timeout)
            except httpx.TransportError as e:
                failures.append(f"{self.servers[idx]}: {type(e).__name__}: {e}")
                log.warning("request to %s failed: %s: %s", url, type(e).__name__, e)
                continue
            if resp.status_code in RETRYABLE_STATUS:
                ra = _retry_after(resp)
                if ra is not None:
                    retry_after = ra if retry_after is None else max(retry_after, ra)
                err = _error_of(resp)
                failures.append(f"{self.servers[idx]}: {resp.status_code} {err.code}")
                log.warning("%s answered %s (%s); trying another server",
                            url, resp.status_code, err.message)
                continue
            if resp.is_success:
                try:
                    data = resp.json()
                except ValueError:
                    failures.append(f"{self.servers[idx]}: undecodable response body")
                    log.warning("%s answered %s with a body that is not JSON",
                                url, resp.status_code)
                    continue
                if not isinstance(data, dict):
                    failures.append(f"{self.servers[idx]}: response body is not an object")
                    continue
                self._preferred = idx
                return data
            self._preferred = idx
            raise _error_of(resp)
        self._preferred = (self._preferred + 1) % n
        raise ServerUnavailable("no server answered: " + "; ".join(failures), retry_after)

    async def server_now_ms(self) -> float:
        """The current server's wall clock (`GET /healthz`), for the worker's clock check."""
        resp = await self._http.get(self.current_server + "/healthz", timeout=2.0)
        resp.raise_for_status()
        value = resp.json().get("now_ms")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("/healthz carries no now_ms")
        return float(value)

    async def lease(
        self, worker_id: str, queues: list[str], max_leases: int, wait_s: float,
        *, acknowledge: bool = True, ahead: bool = False, ahead_refused: str | None = None,
        on_server_time: Callable[[int], None] | None = None,
    ) -> list[Lease]:
        """Long-poll for up to `max_leases` leases.

        With `acknowledge` (the default) the caller promises to acknowledge each lease
        with a heartbeat at once: a poll whose response is lost leaves leases nobody
        acknowledges, and the server releases and leases them again, uncounted, after the
        job's `ack_timeout_s`. Without it they wait out their heartbeat timeout and use up
        an attempt.

        With `ahead` the caller starts each run no earlier than its `Lease.start_mono_s`
        (runs due within the server's `lease_ahead_s` may come before their instant);
        `ahead_refused` tells the server why a worker does not (core.ahead).
        `on_server_time` gets the answer's `server_now_ms`, when it has one.
        """
        body: dict[str, Any] = {"worker_id": worker_id, "queues": queues, "max": max_leases,
                                "wait_s": wait_s, "acknowledge": acknowledge}
        if ahead:
            body["ahead"] = True
        elif ahead_refused is not None:
            body["ahead_refused"] = ahead_refused
        data = await self.post("/v1/leases", body, timeout_s=wait_s + self.timeout_s)
        received = time.monotonic()
        server_now = data.get("server_now_ms")
        if isinstance(server_now, int) and not isinstance(server_now, bool):
            if on_server_time is not None:
                on_server_time(server_now)
        else:
            server_now = None
        leases = []
        for raw in data.get("leases") or []:
            try:
                leases.append(Lease.from_dict(raw, server_now, received))
            except (KeyError, TypeError, ValueError) as e:
                log.error("ignoring malformed lease %r: %s", raw, e)
        return leases

    async def heartbeat(
        self, worker_id: str, leases: list[Lease], *, timeout_s: float | None = None,
        before_start: bool = False, started: dict[str, int] | None = None,
    ) -> dict[str, dict[str, Any]]:
        """Batched heartbeat; returns each attempt's result keyed by attempt id.
        `before_start`: the check just before the instant of runs leased ahead. `started`:
        attempt id -> when its run started (ms, the cluster's clock), for those running."""
        started = started or {}
        body: dict[str, Any] = {"worker_id": worker_id, "attempts": [
            {**lease.ref(), **({"started_ms": started[lease.attempt_id]}
                               if lease.attempt_id in started else {})} for lease in leases]}
        if before_start:
            body["before_start"] = True
        data = await self.post("/v1/heartbeats", body, timeout_s=timeout_s)
        return _by_attempt(data)

    async def complete(
        self, worker_id: str, completions: list[dict[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        """One pass of a completion batch; retrying is the caller's job (see runner)."""
        body = {"worker_id": worker_id, "completions": completions}
        data = await self.post("/v1/completions", body)
        return _by_attempt(data)

    async def release(self, worker_id: str, leases: list[Lease]) -> dict[str, dict[str, Any]]:
        body = {"worker_id": worker_id, "attempts": [lease.ref() for lease in leases]}
        data = await self.post("/v1/releases", body)
        return _by_attempt(data)


def _by_attempt(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in data.get("results") or []:
        if isinstance(r, dict) and "attempt_id" in r:
            out[str(r["attempt_id"])] = r
    return out
