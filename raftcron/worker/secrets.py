"""Secrets a worker holds for the jobs it runs (`raftcron worker --secrets-file`).

A job's HTTP target may name a secret instead of holding it: a header value or the body
`{"secret": "billing-api"}`. The worker resolves the name just before the run, from a
JSON file that maps `"<tenant>/<name>"` to the value:

    {"billing/billing-api": "Bearer s3cr3t", "shop/stripe": "sk_live_..."}

A job resolves names of its own tenant only (a job of tenant `shop` naming `billing-api`
looks up `shop/billing-api`), so one tenant's job cannot send another tenant's secret to
a host of its choosing. The value never enters the Raft log or any API answer.

The file must be readable by its owner only (mode 0600 or stricter): the worker refuses
to start otherwise. It is re-read when it changes, so a secret added later is found by
the next attempt. An unknown name fails the attempt before anything is sent, with a
message naming the secret; the run is retried as any failure is (`max_attempts`, with
backoff), which is what lets a secret added meanwhile take effect.
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
from collections.abc import Mapping
from typing import Any

from raftcron.core.secrets import is_secret_ref

# Header names whose values are credentials even when given literally: scrubbed from what
# a run reports back (its output is readable by non-admins).
SENSITIVE_HEADER = re.compile(r"auth|token|secret|key|cookie|password|session", re.I)
MIN_SCRUB_LEN = 4  # shorter values would blank out unrelated output


class SecretsError(Exception):
    """The secrets file is unusable, or a job names a secret it does not hold."""


class SecretsFile:
    """The worker's secrets, re-read when the file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._values: dict[str, str] = {}
        self._load()  # a worker with an unusable file does not start

    def _load(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError as e:
            raise SecretsError(f"cannot read secrets file {self.path!r}: {e.strerror}") from None
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise SecretsError(f"secrets file {self.path!r} is readable by group or others "
                               f"(mode {stat.S_IMODE(st.st_mode):04o}): chmod 600 it")
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            raise SecretsError(f"cannot read secrets file {self.path!r}: {e}") from None
        if not isinstance(data, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
            raise SecretsError(f"secrets file {self.path!r} must be a JSON object mapping "
                               '"<tenant>/<name>" to string values')
        self._values, self._stamp = data, stamp

    def lookup(self, tenant: str, name: str) -> str:
        self._load()
        value = self._values.get(f"{tenant}/{name}")
        if value is None:
            raise SecretsError(f"unknown secret {name!r}: this worker's secrets file has no "
                               f"{tenant + '/' + name!r}")
        return value


def resolve_target(target: Mapping[str, Any], tenant: str,
                   secrets: SecretsFile | None) -> tuple[dict[str, Any], list[str]]:
    """The target with its secret references replaced by their values, and the strings to
    scrub from the run's output (resolved secrets, URL credentials, credential headers).
    Raises SecretsError for a reference this worker cannot resolve."""
    resolved = copy.deepcopy(dict(target))
    http = resolved.get("http")
    if not isinstance(http, dict):
        return resolved, []
    scrub: list[str] = []

    def value_of(value: Any) -> Any:
        if not is_secret_ref(value):
            return value
        if secrets is None:
            raise SecretsError(f"the target names secret {value['secret']!r} but this worker "
                               "has no --secrets-file")
        found = secrets.lookup(tenant, value["secret"])
        scrub.append(found)
        return found

    headers = http.get("headers") or {}
    http["headers"] = {k: value_of(v) for k, v in headers.items()}
    scrub += [v for k, v in http["headers"].items()
              if isinstance(v, str) and SENSITIVE_HEADER.search(k)]
    if http.get("body") is not None:
        http["body"] = value_of(http["body"])
    netloc = str(http.get("url", "")).split("//", 1)[-1].split("/", 1)[0]
    userinfo, at, _ = netloc.rpartition("@")
    if at:
        scrub += [userinfo, *userinfo.split(":", 1)]
    scrub += [v.rsplit(" ", 1)[1] for v in scrub if " " in v]  # "Bearer <token>": the token
    return resolved, [s for s in scrub if len(s) >= MIN_SCRUB_LEN]


def scrub(text: str, values: list[str]) -> str:
    """`text` with every secret value replaced by `***` (longest first)."""
    for value in sorted(set(values), key=len, reverse=True):
        text = text.replace(value, "***")
    return text
