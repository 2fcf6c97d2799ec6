"""Notification channels: named, per-tenant destinations a job's `notify` list names.

    PUT /v1/channels/ops  {"slack": {"webhook_url": "https://hooks.example/T0/B0/xyz"}}
    PUT /v1/channels/mail {"email": {"host": "smtp.example.com", "port": 587,
                                     "starttls": true, "from": "cron@example.com",
                                     "to": ["ops@example.com"], "username": "cron",
                                     "password": {"secret": "..."}}}
    PUT /v1/channels/hook {"webhook": {"url": "https://example.com/hook"}}

and a job: `"notify": ["https://example.com/hook", {"channel": "ops"}]`.

A channel is exactly one of slack, email or webhook. Names are cluster-wide, like
calendars and job ids; a job names only channels of its own tenant. The e-mail password
is held in the replicated state (the leader sends the mail) and is never shown back:
every reader gets `{"secret": "***"}`, and a PUT that sends `{"secret": "***"}` keeps the
stored one while host, port and username stay the same. A Slack webhook URL is a credential
too: only admins read it; others get its host.

Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from raftcron.core.delivery import redact_url, url_origin
from raftcron.core.errors import ValidationError
from raftcron.core.model import MAX_URL_LEN, NAME_RE, is_http_url
from raftcron.core.notify_refs import receiver_of
from raftcron.core.secrets import REDACTED
from raftcron.core.tenant_policy import TenantPolicy, Violation, host_allowed, url_violation

KINDS = ("slack", "email", "webhook")
# The events a channel gets (a webhook URL in `notify` gets every event of the job).
EVENTS = ("occurrence.failed", "alert.raised", "job.recovered")
MAX_RECIPIENTS = 20
MAX_SECRET = 1024
MAX_HOST = 253
DEFAULT_SMTP_PORT = 587
# An address: a local part of RFC 5322 dot-atom characters (ASCII: no spaces, controls,
# angle brackets or commas; one address, not a list or a display name: headers are built
# from them) @ a host. Spelled without `\s`, which Python and the schema's ECMA-262 engine
# read differently (U+0085).
EMAIL_RE = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9.-]{1,253}$")
HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*"
                     r"[A-Za-z0-9])?)*\.?$|^\[?[0-9A-Fa-f:.]+\]?$")
USERNAME_RE = re.compile(r"^[^\s\x00-\x1f\x7f]{1,256}$")
_EMAIL_KEYS = {"host", "port", "starttls", "from", "to", "username", "password"}


@dataclass(frozen=True, slots=True)
class Channel:
    """A validated channel; `config` is the canonical body of its kind (the password in
    clear): what travels in commands and is stored."""

    name: str
    tenant: str
    kind: str
    config: dict[str, Any] = field(default_factory=dict)
    # A calendar of the tenant: while it excludes the instant a message is written, the
    # message is held, and one summary of what was held goes out when that window ends
    # (leader.channels). None: never muted; left out of the spec then.
    mute: str | None = None

    def to_spec(self) -> dict[str, Any]:
        spec = {"name": self.name, "tenant": self.tenant, self.kind: dict(self.config)}
        if self.mute is not None:
            spec["mute"] = self.mute
        return spec

    @staticmethod
    def from_spec(d: dict[str, Any]) -> Channel:
        kind = next(k for k in KINDS if k in d)
        return Channel(d["name"], d["tenant"], kind, dict(d[kind]), d.get("mute"))

    def to_api(self, admin: bool) -> dict[str, Any]:
        """What a reader sees: never the password; a Slack URL only for an admin."""
        shown = dict(self.config)
        if self.kind == "email" and "password" in shown:
            shown["password"] = {"secret": REDACTED}
        if self.kind == "slack" and not admin:
            shown["webhook_url"] = redacted_slack_url(shown["webhook_url"])
        if self.kind == "webhook" and not admin:  # credentials, query and fragment
            shown["url"] = redact_url(shown["url"])
        return {"name": self.name, "tenant": self.tenant, "kind": self.kind,
                self.kind: shown, "mute": self.mute}

    @property
    def receiver(self) -> str:
        return receiver_of(self.name)

    def origin(self) -> str:
        """The server a delivery goes to (the unit of the outbox's per-host cap)."""
        if self.kind == "email":
            return f"smtp://{self.config['host']}:{self.config['port']}"
        return url_origin(self.config["webhook_url" if self.kind == "slack" else "url"])


def redacted_slack_url(url: str) -> str:
    """scheme://host/*** : the path of an incoming-webhook URL is its token."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/{REDACTED}"


def _object(value: Any, path: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationError(path, "must be a JSON object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ValidationError(f"{path}.{unknown[0]}", "unknown field")
    return value


def _url(value: Any, path: str, stored: str | None) -> str:
    if stored is not None and value == redacted_slack_url(stored):
        return stored  # the redacted form a non-admin read, sent back: keep the URL
    if not is_http_url(value):
        raise ValidationError(path, f"must be an http(s) URL of at most {MAX_URL_LEN} "
                              "characters")
    return value


def _email(value: Any, stored: dict[str, Any] | None) -> dict[str, Any]:
    data = _object(value, "email", _EMAIL_KEYS)
    host = data.get("host")
    if not isinstance(host, str) or len(host) > MAX_HOST or not HOST_RE.fullmatch(host):
        raise ValidationError("email.host", "is required: a host name or IP address")
    port = data.get("port", DEFAULT_SMTP_PORT)
    if type(port) is float and port.is_integer():
        port = int(port)  # JSON Schema's integer: 25.0 is one
    if type(port) is not int or not 1 <= port <= 65535:
        raise ValidationError("email.port", "must be an integer from 1 to 65535")
    starttls = data.get("starttls", True)
    if not isinstance(starttls, bool):
        raise ValidationError("email.starttls", "must be true or false")
    sender = data.get("from")
    if not isinstance(sender, str) or not EMAIL_RE.fullmatch(sender):
        raise ValidationError("email.from", "is required: one address, name@host")
    to = data.get("to")
    if not isinstance(to, list) or not 1 <= len(to) <= MAX_RECIPIENTS:
        raise ValidationError("email.to", f"is required: a list of 1 to {MAX_RECIPIENTS} "
                              "addresses")
    for i, addr in enumerate(to):
        if not isinstance(addr, str) or not EMAIL_RE.fullmatch(addr):
            raise ValidationError(f"email.to.{i}", "must be one address, name@host")
    out: dict[str, Any] = {"host": host, "port": port, "starttls": starttls,
                           "from": sender, "to": list(to)}
    username = data.get("username")
    if username is not None:
        if not isinstance(username, str) or not USERNAME_RE.fullmatch(username):
            raise ValidationError("email.username", "must be 1-256 characters, no spaces "
                                  "or control characters")
        out["username"] = username
    if "password" in data:
        out["password"] = _password(data["password"], out, stored)
    if ("username" in out) != ("password" in out):
        raise ValidationError("email.password" if "username" in out else "email.username",
                              "username and password go together")
    if "password" in out and not starttls:
        raise ValidationError("email.starttls", "must be true when a password is given: "
                              "it is never sent in clear")
    return out


def _password(value: Any, new: dict[str, Any], stored: dict[str, Any] | None) -> dict[str, Any]:
    ref = _object(value, "email.password", {"secret"})
    secret = ref.get("secret")
    if not isinstance(secret, str) or not 1 <= len(secret) <= MAX_SECRET:
        raise ValidationError("email.password.secret", f"is required: 1 to {MAX_SECRET} "
                              "characters")
    if secret != REDACTED:
        return {"secret": secret}
    if stored is None or "password" not in stored or any(
            stored.get(k) != new.get(k) for k in ("host", "port", "username")):
        raise ValidationError("email.password.secret", "is the redacted value '***', which "
                              "keeps the stored password only while host, port and username stay "
                              "the same: send the password")
    return dict(stored["password"])


def parse_channel(data: Any, name: str, stored: Channel | None = None) -> Channel:
    """A validated channel from client JSON (`stored`: the channel it replaces, whose
    password a redacted one keeps); errors name the field."""
    body = _object(data, "body", {"tenant", "mute", *KINDS})
    tenant = body.get("tenant", "default")
    if not isinstance(tenant, str) or not NAME_RE.fullmatch(tenant):
        raise ValidationError("tenant", "must be 1-64 characters of A-Z a-z 0-9 . _ -")
    given = [k for k in KINDS if k in body]
    if len(given) != 1:
        raise ValidationError(given[1] if given else "slack",
                              "give exactly one of slack, email or webhook")
    kind = given[0]
    old = stored.config if stored is not None and stored.kind == kind and \
        stored.tenant == tenant else None
    if kind == "slack":
        cfg = _object(body["slack"], "slack", {"webhook_url"})
        config = {"webhook_url": _url(cfg.get("webhook_url"), "slack.webhook_url",
                                      (old or {}).get("webhook_url"))}
    elif kind == "webhook":
        cfg = _object(body["webhook"], "webhook", {"url"})
        stored_url = (old or {}).get("url")
        config = {"url": stored_url if stored_url is not None
                  and cfg.get("url") == redact_url(stored_url) != stored_url
                  else _url(cfg.get("url"), "webhook.url", None)}
    else:
        config = _email(body["email"], old)
    mute = body.get("mute")
    if mute is not None and (not isinstance(mute, str) or not NAME_RE.fullmatch(mute)):
        raise ValidationError("mute", "must be null or the name of a calendar of the "
                              "channel's tenant")
    return Channel(name, tenant, kind, config, mute)


def policy_violation(policy: TenantPolicy, ch: Channel) -> Violation | None:
    """Where the tenant's host policy refuses the channel (None: it may be reached)."""
    if not policy.is_set:
        return None
    if ch.kind == "email":
        why = host_allowed(policy, ch.config["host"])
        return Violation("email.host", why) if why else None
    key = "webhook_url" if ch.kind == "slack" else "url"
    why = url_violation(policy, ch.config[key])
    return Violation(f"{ch.kind}.{key}", why) if why else None
