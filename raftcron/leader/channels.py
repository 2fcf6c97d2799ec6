"""Delivery to notification channels (core.channels), for leader.outbox.

Routing: a row of an event channels get (core.channels.EVENTS) that names a job is routed
to each channel the job's `notify` names, as receiver `channel:<name>`, signed (for a
webhook channel) with the key of the job's tenant. A channel of another tenant, or one its
tenant's current host policy refuses, is left out, as a refused notify URL is.

Sending: a Slack channel gets the incoming-webhook payload (text and blocks), an e-mail
channel one message over SMTP (STARTTLS, the certificate checked, then login when it has
a username), a webhook channel the signed body a notify URL gets. Each send is within
the outbox's delivery deadline and is its own task, so a channel that hangs holds only
its own deliveries; the outcome goes through the outbox's backoff and dead letters.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import aiosmtplib
import httpx

from raftcron.core import delivery
from raftcron.core.calendar import Calendar, window_end
from raftcron.core.channel_messages import (
    Facts,
    Message,
    email_message,
    held_summary,
    render,
    slack_payload,
)
from raftcron.core.channels import EVENTS, Channel, policy_violation
from raftcron.core.notify_refs import RECEIVER_PREFIX, channel_refs
from raftcron.state.tenants import policy_of

TIMEOUT_S = 5.0


def load_channel(conn: sqlite3.Connection, name: str) -> Channel | None:
    row = conn.execute("SELECT spec FROM channels WHERE name = ?", (name,)).fetchone()
    return None if row is None else Channel.from_spec(json.loads(row[0]))


def mute_until(conn: sqlite3.Connection, ch: Channel, created_ms: int) -> int | None:
    """When the mute window holding `created_ms` ends, for a channel whose mute calendar
    excludes that instant; None when the message is not muted (no calendar, not excluded,
    or the calendar gone or of another tenant). From replicated rows only."""
    if ch.mute is None:
        return None
    row = conn.execute("SELECT tenant, spec FROM calendars WHERE name = ?",
                       (ch.mute,)).fetchone()
    if row is None or row[0] != ch.tenant:
        return None
    cal = Calendar.from_spec(json.loads(row[1])).compiled()
    return window_end(cal, created_ms) if cal.excludes(created_ms) else None


def channel_routes(conn: sqlite3.Connection, event: str, tenant: str, notify: Any,
                   taken: set[str], created_ms: int) -> list[list[Any]]:
    """[[receiver, signer], ...] for the channels a job's `notify` names, when `event`
    is one channels get; [receiver, signer, until] for a channel muted at `created_ms`
    (the row's instant) until `until`. `taken`: receivers the row has already."""
    if event not in EVENTS:
        return []
    out: list[list[Any]] = []
    for _, name in channel_refs(notify):
        ch = load_channel(conn, name)
        if ch is None or ch.tenant != tenant or ch.receiver in taken:
            continue
        if policy_violation(policy_of(conn, tenant), ch) is not None:
            continue  # the tenant's current policy decides, as for notify URLs
        taken.add(ch.receiver)
        route: list[Any] = [ch.receiver, delivery.tenant_signer(tenant)]
        until = mute_until(conn, ch, created_ms)
        out.append(route if until is None else [*route, until])
    return out


def is_channel(receiver: str) -> bool:
    return receiver.startswith(RECEIVER_PREFIX)


def channel_name(receiver: str) -> str:
    return receiver.removeprefix(RECEIVER_PREFIX)


def facts_of(conn: sqlite3.Connection, event: str, payload: dict[str, Any],
             created_ms: int) -> Facts:
    """What a message says beyond the row: the job's tenant, the occurrence's instant."""
    tenant = sched = None
    job_id = payload.get("job_id")
    if isinstance(job_id, str):
        row = conn.execute("SELECT tenant FROM jobs WHERE id = ?", (job_id,)).fetchone()
        tenant = row[0] if row else None
    occ = payload.get("occurrence_id")
    if isinstance(occ, str):
        row = conn.execute("SELECT scheduled_for_ms, tenant FROM occurrences WHERE id = ?",
                           (occ,)).fetchone()
        if row is not None:  # the run's own tenant first (a job id may be re-created)
            sched, tenant = row[0], row[1]
    return Facts(event, payload, created_ms, tenant, sched)


def ssl_context() -> ssl.SSLContext:
    """The system's trust store (SSL_CERT_FILE / SSL_CERT_DIR when set), hostname checked."""
    return ssl.create_default_context()


async def send_slack(client: httpx.AsyncClient, url: str, message: Message,
                     key: str) -> str | None:
    body = json.dumps(slack_payload(message), sort_keys=True, separators=(",", ":")).encode()
    async with client.stream("POST", url, content=body, timeout=TIMEOUT_S, headers={
            "Content-Type": "application/json", "Idempotency-Key": key,
            "User-Agent": "raftcron-webhook/1"}) as resp:
        status = resp.status_code
    return None if 200 <= status < 300 else f"HTTP {status}"


async def send_email(config: dict[str, Any], message: Message, key: str,
                     created_ms: int) -> str | None:
    msg = email_message(message, config["from"], config["to"], key, created_ms)
    password = (config.get("password") or {}).get("secret")
    await aiosmtplib.send(
        msg, hostname=config["host"], port=config["port"], use_tls=False,
        start_tls=bool(config["starttls"]), tls_context=ssl_context(),
        username=config.get("username"), password=password, timeout=TIMEOUT_S)
    return None


async def send(client: httpx.AsyncClient, channel: Channel | None, message: Message,
               key: str, created_ms: int,
               post_webhook: Callable[[str], Awaitable[str | None]]) -> str | None:
    """Send one message to a channel: None when it was accepted, else why not."""
    if channel is None:
        return "the channel was deleted"
    try:
        if channel.kind == "slack":
            return await send_slack(client, channel.config["webhook_url"], message, key)
        if channel.kind == "email":
            return await send_email(channel.config, message, key, created_ms)
        return await post_webhook(channel.config["url"])
    except (httpx.HTTPError, aiosmtplib.SMTPException, OSError, ssl.SSLError) as e:
        return f"{type(e).__name__}: {str(e)[:200]}"


async def deliver(client: httpx.AsyncClient, channel: Channel | None, facts: Facts,
                  key: str, deadline_s: float,
                  post_webhook: Callable[[str], Awaitable[str | None]]) -> str | None:
    """One outbox row to one channel, within `deadline_s` in all."""
    try:
        async with asyncio.timeout(deadline_s):
            return await send(client, channel, render(facts), key, facts.created_ms,
                              post_webhook)
    except TimeoutError:
        return f"no answer within {deadline_s:g} s"



def with_channel(conn: sqlite3.Connection, d: Any) -> Any:
    """A due delivery (leader.outbox.Due) to a channel, with the channel and the facts
    its message says."""
    return replace(d, channel=load_channel(conn, channel_name(d.receiver)),
                   facts=facts_of(conn, d.event, d.payload, d.created_ms))


# At most this many held messages go into one summary (the rest follow in the next).
MAX_SUMMARIZED = 1000


def held_summaries(conn: sqlite3.Connection, due: list[Any], now_ms: int) -> list[Any]:
    """The due deliveries with those held for a muted channel replaced by one summary per
    (receiver, window end): a delivery standing for every one held to that instant."""
    out: list[Any] = []
    seen: set[tuple[str, int]] = set()
    for d in due:
        if d.held_ms is None or not is_channel(d.receiver):
            out.append(d)
            continue
        key = (d.receiver, d.held_ms)
        if key in seen:
            continue
        seen.add(key)
        group = tuple(
            (oid, facts_of(conn, event, json.loads(payload), created))
            for oid, event, payload, created in conn.execute(
                "SELECT d.outbox_id, o.event, o.payload, o.created_ms FROM outbox_deliveries d "
                "JOIN outbox o ON o.id = d.outbox_id WHERE d.receiver = ? AND d.held_ms = ? "
                "AND d.status = 'pending' AND d.next_ms <= ? ORDER BY d.outbox_id LIMIT ?",
                (d.receiver, d.held_ms, now_ms, MAX_SUMMARIZED)))
        out.append(replace(d, group=group or ((d.outbox_id, d.facts),)))
    return out


async def deliver_summary(client: httpx.AsyncClient, d: Any, key: str, deadline_s: float,
                          post_webhook: Callable[[str], Awaitable[str | None]]) -> str | None:
    """One summary of the messages held for a muted channel, within `deadline_s`."""
    message = held_summary(channel_name(d.receiver), d.channel.mute if d.channel else None,
                           d.held_ms, [facts for _, facts in d.group])
    try:
        async with asyncio.timeout(deadline_s):
            return await send(client, d.channel, message, key, d.created_ms, post_webhook)
    except TimeoutError:
        return f"no answer within {deadline_s:g} s"
