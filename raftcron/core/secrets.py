"""Secrets in job targets: what is shown back, and references resolved on the worker.

An HTTP target's header values and the credentials in its URL (`user:pass@`) are secrets:
every principal but admin reads them as `"***"` (`redact_target`). A job can also name a
secret instead of holding it: a header value (or the body) `{"secret": "billing-api"}`
is resolved by the worker from its secrets file, so the value never enters the Raft log.
References are not secrets themselves and are shown as they are.

An edit that sends `"***"` back keeps the stored value (`restore_redacted`), but only when
the request still goes to exactly the same URL: a client that cannot read a secret must
not be able to send it somewhere else, where it could read it.

Pure: no I/O.
"""

from __future__ import annotations

import copy
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from raftcron.core.errors import ValidationError

REDACTED = "***"
SECRET_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def is_secret_ref(value: Any) -> bool:
    """`{"secret": "<name>"}`: a reference to a secret held by the worker."""
    if not isinstance(value, dict) or set(value) != {"secret"}:
        return False
    name = value["secret"]
    return isinstance(name, str) and bool(SECRET_NAME_RE.fullmatch(name))


def _split_userinfo(url: str) -> tuple[str | None, str]:
    """(userinfo or None, the URL without it)."""
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return None, url
    return userinfo, urlunsplit(parts._replace(netloc=host))


def _with_userinfo(url: str, userinfo: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{parts.netloc}"))


def redact_url(url: str) -> str:
    """The URL with its credentials, if any, replaced by `***`."""
    userinfo, bare = _split_userinfo(url)
    return url if userinfo is None else _with_userinfo(bare, REDACTED)


def redact_target(target: dict[str, Any]) -> dict[str, Any]:
    """A copy of `target` safe to show to a non-admin: header values and URL credentials
    are `***`; secret references are kept (they are names, not values)."""
    http = target.get("http")
    if not isinstance(http, dict):
        return target
    shown = dict(http)
    if isinstance(shown.get("url"), str):
        shown["url"] = redact_url(shown["url"])
    headers = shown.get("headers")
    if isinstance(headers, dict):
        shown["headers"] = {k: (copy.deepcopy(v) if is_secret_ref(v) else REDACTED)
                            for k, v in headers.items()}
    return {**target, "http": shown}


def _redacted_header_names(http: dict[str, Any]) -> list[str]:
    headers = http.get("headers") or {}
    return [k for k, v in headers.items() if v == REDACTED]


def holds_redacted(target: dict[str, Any]) -> bool:
    """Whether a target sent by a client holds a `***` placeholder."""
    http = target.get("http")
    if not isinstance(http, dict):
        return False
    userinfo, _ = _split_userinfo(str(http.get("url", "")))
    return userinfo == REDACTED or bool(_redacted_header_names(http))


def restore_redacted(target: dict[str, Any], stored: dict[str, Any] | None,
                     field: str = "target") -> dict[str, Any]:
    """`target` with each `***` placeholder replaced by the stored job's value.

    Raises ValidationError (naming the field) when there is nothing to keep: no stored job,
    no such header in it, or a URL that is not exactly the stored one."""
    http = target.get("http")
    if not isinstance(http, dict) or not holds_redacted(target):
        return target
    stored_http = (stored or {}).get("http")
    stored_url = stored_http.get("url") if isinstance(stored_http, dict) else None
    restored = dict(http)
    userinfo, _ = _split_userinfo(http["url"])
    if userinfo == REDACTED:
        if stored_url is None or redact_url(stored_url) != http["url"]:
            raise ValidationError(f"{field}.http.url", "holds the redacted credentials '***': "
                                  "send them again to change the URL")
        restored["url"] = stored_url
    names = _redacted_header_names(http)
    if names:
        stored_headers: dict[str, Any] = {}
        if isinstance(stored_http, dict):
            stored_headers = stored_http.get("headers") or {}
        for name in names:
            if stored_url is None or name not in stored_headers:
                raise ValidationError(f"{field}.http.headers.{name}", "is the redacted value "
                                      "'***' but there is no stored value to keep: send it")
            if restored["url"] != stored_url:
                raise ValidationError(f"{field}.http.headers.{name}", "is the redacted value "
                                      "'***', which is kept only while the URL stays the "
                                      "same: send the value again")
        restored["headers"] = {k: (copy.deepcopy(stored_headers[k]) if v == REDACTED else v)
                               for k, v in http["headers"].items()}
    return {**target, "http": restored}
