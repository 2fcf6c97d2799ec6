"""Errors as HTTP: `{"error": {"code", "message", "field"}}` and the status map."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from raftcron.core import errors
from raftcron.core.errors import ValidationError

MAX_BODY_BYTES = 1 << 20
# No request needs more than a few levels (a job is four deep); the parser itself would
# recurse until RecursionError on `[` x 200,000.
MAX_JSON_DEPTH = 32
# Parsing and checking take about 0.1-0.25 s per MiB: bodies above this size are parsed in
# a worker thread so that the event loop keeps serving meanwhile.
PARSE_INLINE_BYTES = 64 * 1024

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
    # A quota is state (what the tenant holds), not permission: 409, or 429 for the ones
    # that pass with time (rate_limited: max_fires_per_minute, max_pending_runs).
    errors.QUOTA_EXCEEDED: 409,
    errors.POLICY_DENIED: 403,
    errors.RATE_LIMITED: 429,
    errors.FORBIDDEN: 403,
    errors.IDEMPOTENCY_KEY_REUSED: 422,
    errors.NOT_UPGRADED: 409,
    errors.INVALID_REFERENCE: 400,
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
        # The quota's limit, what the tenant uses of it, and what the request asked for.
        extra.update({k: result[k] for k in ("limit", "used", "requested")
                      if isinstance(result.get(k), int)})
    if code == errors.NOT_UPGRADED:
        extra.update({k: result[k] for k in ("feature", "cluster_level", "required_level")
                      if k in result})
    if code == errors.RATE_LIMITED and quota == "max_pending_runs":
        headers["Retry-After"] = "30"  # passes as runs start, not at a minute's turn
    elif code == errors.RATE_LIMITED:
        headers["Retry-After"] = str(max(1, 60 - int(time.time()) % 60))
    return HTTPError(REJECTION_STATUS.get(code, 409), code, message, result.get("field"),
                     headers, extra)


async def json_body(request: Request, *, required: bool = True) -> Any:
    """The request's JSON body: the one reader for every route. At most MAX_BODY_BYTES
    (413), valid UTF-8 JSON nested at most MAX_JSON_DEPTH deep with finite numbers and no
    lone surrogates (400): what is accepted here can always be written back out."""
    length = request.headers.get("content-length")
    declared_ok = length is None or (length.isascii() and length.isdigit())
    if not declared_ok or (length is not None and int(length) > MAX_BODY_BYTES):
        raise HTTPError(413, "too_large", f"request body exceeds {MAX_BODY_BYTES} bytes", "body")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise HTTPError(413, "too_large", f"request body exceeds {MAX_BODY_BYTES} bytes",
                            "body")
    raw = b"".join(chunks)
    if not raw.strip():
        if required:
            raise ValidationError("body", "a JSON object is required")
        return {}
    # The body is checked against the schema /openapi.json declares for this operation
    # (api/schema_gate.py, set by create_app): the served document is what is enforced.
    gate = request.app.state.body_gate
    route_path = request.scope["route"].path
    if len(raw) > PARSE_INLINE_BYTES:  # a large body is parsed and checked off the loop
        return await asyncio.to_thread(_parse_and_check, raw, gate, request.method, route_path)
    return _parse_and_check(raw, gate, request.method, route_path)


def _parse_and_check(raw: bytes, gate: Any, method: str, route_path: str) -> Any:
    value = parse_json_body(raw)
    gate(method, route_path, value)
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValidationError("body", f"number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValidationError("body", f"{name} is not a JSON number")


def parse_json_body(raw: bytes) -> Any:
    """Decode `raw` under the rules of `json_body` (ValidationError on `body` otherwise).

    Each check runs in C loops, never once per value in Python: a 1 MiB body is checked
    in about the time it takes to parse."""
    try:
        # Strict UTF-8 first: json.loads(bytes) lets encoded surrogates through.
        text = raw.decode("utf-8")
        value = json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except RecursionError:
        raise ValidationError("body", f"is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValidationError:
        raise
    except (ValueError, UnicodeDecodeError):
        raise ValidationError("body", "is not valid JSON") from None
    _check_depth(text)
    if _SURROGATE_ESCAPE.search(text):
        _check_unicode(value)
    return value


# `\ud800`..`\udfff` escapes: the only way a lone surrogate gets into a decoded body.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


# JSON strings (unrolled: no backtracking), then everything but brackets.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DELTA = {"[": 1, "{": 1, "]": -1, "}": -1}


def _check_depth(text: str) -> None:
    """At most MAX_JSON_DEPTH levels, measured on the (already valid) text: strings cut
    out, then the running sum of opening and closing brackets, all in C loops."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if max(itertools.accumulate(map(_DELTA.__getitem__, brackets)), default=0) > \
            MAX_JSON_DEPTH:
        raise ValidationError("body", f"is nested deeper than {MAX_JSON_DEPTH} levels")


def _check_unicode(value: Any) -> None:
    """Every string (keys too) encodable as UTF-8: an escaped pair is fine, a lone
    surrogate is not, and no response could render it."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError("body", "holds a lone UTF-16 surrogate (not valid Unicode)"
                              ) from None
