"""HTTP target headers: what no request can carry is refused when the job is written, with
the header named (issue 40 §6), instead of a job whose every run fails at the worker."""

from __future__ import annotations

from typing import Any

import h11
import pytest

from raftcron.core.errors import ValidationError
from raftcron.core.model import parse_job


def job_with(headers: dict[str, Any]) -> dict[str, Any]:
    return {"id": "h", "schedule": {"cron": "0 9 * * *"},
            "target": {"http": {"url": "https://hooks.example/x", "headers": headers}}}


def h11_sends(name: str, value: str) -> bool:
    """Whether the worker's HTTP stack (h11 under httpx, ASCII-encoded) can send it."""
    try:
        raw = value.encode("ascii")
        h11.Connection(h11.CLIENT).send(h11.Request(
            method="GET", target="/", headers=[("Host", "x"), (name.encode("ascii"), raw)]))
    except (h11.LocalProtocolError, UnicodeEncodeError):
        return False
    return True


VALID = [("X-A", "1"), ("Authorization", "Bearer abc.def"), ("x-empty", ""),
         ("X-Tab", "a\tb"), ("X-Spaces", "a  b c"), ("!#$%&'*+-.^_`|~09azAZ", "v"),
         ("X-Quote", '"q" (c) ,;:=?@[]{}\\/')]
INVALID = [
    ("X Y:", "1", "header name 'X Y:' is not an HTTP token"),
    ("", "1", "header name '' is not an HTTP token"),
    ("X-A:", "1", "header name 'X-A:' is not an HTTP token"),
    ("X\u00e9", "1", "header name 'Xé' is not an HTTP token"),
    ("X-Nul", "a\x00b", "'X-Nul' holds the control character U+0000"),
    ("X-Cr", "a\rb", "'X-Cr' holds the control character U+000D"),
    ("X-Lf", "a\nb", "'X-Lf' holds the control character U+000A"),
    ("X-Esc", "a\x1bb", "'X-Esc' holds the control character U+001B"),
    ("X-Del", "a\x7fb", "'X-Del' holds the control character U+007F"),
    ("X-Utf", "caf\u00e9", "'X-Utf' holds the non-ASCII character U+00E9"),
    ("X-Lead", " a", "'X-Lead' starts or ends with a space or tab"),
    ("X-Trail", "a\t", "'X-Trail' starts or ends with a space or tab"),
]


@pytest.mark.parametrize(("name", "value"), VALID)
def test_sendable_headers_are_accepted(name: str, value: str) -> None:
    assert h11_sends(name, value)
    job = parse_job(job_with({name: value}))
    assert job.target["http"]["headers"] == {name: value}


@pytest.mark.parametrize(("name", "value", "message"), INVALID)
def test_unsendable_headers_are_refused_by_name(name: str, value: str, message: str
                                                ) -> None:
    # (Most of them h11 refuses to send; it lets other control characters such as ESC
    # and DEL through, which a receiver may not.)
    with pytest.raises(ValidationError) as ei:
        parse_job(job_with({"X-Fine": "ok", name: value}))
    assert ei.value.field == "target.http.headers"
    assert message in ei.value.message, ei.value.message


def test_a_secret_reference_is_checked_by_its_name_only() -> None:
    job = parse_job(job_with({"Authorization": {"secret": "api-key"}}))
    assert job.target["http"]["headers"] == {"Authorization": {"secret": "api-key"}}
    with pytest.raises(ValidationError, match="'X Y' is not an HTTP token"):
        parse_job(job_with({"X Y": {"secret": "api-key"}}))
