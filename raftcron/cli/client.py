"""A small API client for the CLI: tries each server URL until one answers."""

from __future__ import annotations

import time
from typing import Any

import httpx


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field

    def __str__(self) -> str:
        where = f" ({self.field})" if self.field else ""
        status = f" [{self.status} {self.code}]" if self.status else ""  # 0: no answer
        return f"{self.message}{where}{status}"


class Client:
    def __init__(self, servers: list[str], timeout: float = 15.0, token: str | None = None
                 ) -> None:
        self.servers = [s.rstrip("/") for s in servers]
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(timeout=timeout, headers=headers)

    def request(self, method: str, path: str, *, json: Any = None,
                params: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
                retries: int = 10) -> Any:
        last: Exception | None = None
        for attempt in range(retries):
            for server in self.servers:
                try:
                    resp = self.http.request(method, server + path, json=json, params=params,
                                             headers=headers)
                except httpx.TransportError as e:
                    last = e
                    continue
                if resp.status_code == 503:
                    last = self._error(resp)
                    continue
                if resp.status_code >= 400:
                    raise self._error(resp)
                return resp.json()
            time.sleep(min(0.2 * (attempt + 1), 1.0))
        if isinstance(last, ApiError):
            raise last
        raise ApiError(0, "unreachable",
                       f"no server answered ({', '.join(self.servers)}): {last}")

    @staticmethod
    def _error(resp: httpx.Response) -> ApiError:
        try:
            err = resp.json()["error"]
            message = str(err.get("message", ""))
            if resp.status_code == 401:
                message += "; pass --token or set RAFTCRON_TOKEN"
            return ApiError(resp.status_code, err.get("code", ""), message, err.get("field"))
        except (ValueError, KeyError, TypeError):
            return ApiError(resp.status_code, "http_error", resp.text[:200])

    def close(self) -> None:
        self.http.close()
