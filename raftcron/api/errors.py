"""Errors as HTTP: `{"error": {"code", "message", "field"}}` and the status map."""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from raftcron.core import errors
from raftcron.core.errors import ValidationError

MAX_BODY_BYTES = 1 << 20

REJECTION_STATUS = {
    errors.NOT_FOUND: 404,
    errors.ALREADY_EXISTS: 409,
    errors.VERSION_CONFLICT: 412,
    errors.STALE_TOKEN: 409,
    errors.LEASE_EXPIRED: 409,
    errors.FOREIGN_LEASE: 409,
    errors.CONFLICT: 409,
    errors.INVALID_STATE: 409,
    errors.STALE_EPOCH: 503,
    errors.QUOTA_EXCEEDED: 403,
    errors.POLICY_DENIED: 403,
    errors.RATE_LIMITED: 429,
    errors.FORBIDDEN: 403,
    errors.IDEMPOTENCY_KEY_REUSED: 422,
}


class HTTPError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers or {}
        self.extra = extra or {}


def error_response(status: int, code: str, message: str, field: str | None = None,
                   headers: dict[str, str] | None = None,
                   extra: dict[str, Any] | None = None) -> JSONResponse:
    err: dict[str, Any] = {"code": code, "message": message}
    if field:
        err["field"] = field
    err.update(extra or {})
    return JSONResponse({"error": err}, status_code=status, headers=headers)


def rejection_error(result: dict[str, Any]) -> HTTPError:
    code = result.get("rejected", "rejected")
    message = result.get("message", code)
    extra: dict[str, Any] = {}
    headers: dict[str, str] = {}
    quota = result.get("quota")
    if isinstance(quota, str):
        extra["quota"] = quota
        if quota not in message:
            message = f"{message} (quota {quota})"
    if code == errors.RATE_LIMITED:
        headers["Retry-After"] = str(max(1, 60 - int(time.time()) % 60))
    return HTTPError(REJECTION_STATUS.get(code, 409), code, message, result.get("field"),
                     headers, extra)


async def json_body(request: Request, *, required: bool = True) -> Any:
    length = request.headers.get("content-length")
    declared_ok = length is None or (length.isascii() and length.isdigit())
    if not declared_ok or (length is not None and int(length) > MAX_BODY_BYTES):
        raise HTTPError(413, "too_large", f"request body exceeds {MAX_BODY_BYTES} bytes", "body")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise HTTPError(413, "too_large", f"request body exceeds {MAX_BODY_BYTES} bytes",
                            "body")
    if not raw.strip():
        if required:
            raise ValidationError("body", "a JSON object is required")
        return {}
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ValidationError("body", "is not valid JSON") from None
