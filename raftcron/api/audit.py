"""The audit trail: every write (any request but GET/HEAD/OPTIONS) as one JSON line.

    {"audit": "raftcron", "time": "2026-12-01T10:00:00.123Z", "node": "n1",
     "principal": "team-a", "method": "PUT", "path": "/v1/jobs/x", "status": 403,
     "outcome": "denied", "request_id": "6f1c...", "idempotency_key": null}

`principal` is the token's name (null when the request had no valid token); `outcome` is
`ok` (2xx/3xx), `denied` (401/403), `rejected` (other 4xx) or `error` (5xx, or the
connection ended before an answer). `request_id` is also sent back as `X-Request-Id`.
Lines go to the file named by the node config's `audit_log` (appended, one write per
line), or, without it, to stderr prefixed with `raftcron-audit: `, for a log shipper.
Each node logs the requests it answers.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from typing import IO, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from raftcron.api.auth import STATE_KEY
from raftcron.auth import Principal

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
STDERR_PREFIX = "raftcron-audit: "
log = logging.getLogger("raftcron.audit")


def outcome_of(status: int | None) -> str:
    if status is None or status >= 500:
        return "error"
    if status in (401, 403):
        return "denied"
    return "rejected" if status >= 400 else "ok"


class AuditSink:
    """Where audit lines go: an append-only file, or stderr with a prefix."""

    def __init__(self, path: str | None = None, stream: IO[str] | None = None) -> None:
        self.path = path
        self._fd = (os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                    if path else None)
        self._stream = stream

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), sort_keys=True)
        try:
            if self._fd is not None:
                os.write(self._fd, (line + "\n").encode())  # O_APPEND: whole lines
            else:
                stream = self._stream or sys.stderr
                stream.write(STDERR_PREFIX + line + "\n")
                stream.flush()
        except OSError as e:  # a full disk must not take the API down; say so loudly
            log.error("cannot write the audit log: %s", e)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _iso(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


class AuditMiddleware:
    """Outermost middleware: sees the answer of the auth middleware (401/403) as well as
    the handlers'."""

    def __init__(self, app: ASGIApp, sink: AuditSink, node_id: str) -> None:
        self.app = app
        self.sink = sink
        self.node_id = node_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in READ_METHODS:
            await self.app(scope, receive, send)
            return
        request_id = uuid.uuid4().hex
        status: int | None = None

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"x-request-id", request_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            principal = scope.get("state", {}).get(STATE_KEY)
            key = None
            for name, value in scope.get("headers", []):
                if name == b"idempotency-key":
                    key = value.decode("latin-1")[:200]
            self.sink.write({
                "audit": "raftcron", "time": _iso(time.time()), "node": self.node_id,
                "principal": principal.name if isinstance(principal, Principal) else None,
                "method": scope["method"], "path": scope["path"], "status": status,
                "outcome": outcome_of(status), "request_id": request_id,
                "idempotency_key": key,
            })
