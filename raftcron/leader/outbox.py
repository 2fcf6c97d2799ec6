"""Outbox delivery: the leader POSTs each committed outbox row to the webhook receivers.

A row is written in the same transaction as the state change that caused it (an alert
raised or resolved, an occurrence failed), so reading it from the applied state means it
is committed: nothing is sent for a change that did not happen.

Receivers are the cluster-wide `webhooks` plus, for events that name a job, the job's
`notify` URLs. The body is JSON (`{"id", "event", "created_at", "data"}`, compact, sorted
keys) and every request carries `Idempotency-Key: <outbox id>-<created ms>` and
`X-Raftcron-Signature: sha256=<hex HMAC-SHA256 of the exact body bytes>`.

The outcome of each delivery round is committed with `AckOutbox` (a failure increments
the row's replicated attempt count, which drives the backoff, so a new leader continues
the same schedule). A row stays pending until every receiver answered 2xx; delivery is at
least once: after a failover, or when one receiver of several failed, a receiver can see
the same row again, always with the same idempotency key and the same body.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from raftcron.cluster.proposer import Proposer
from raftcron.core.commands import AckOutbox
from raftcron.core.timefmt import ms_to_iso
from raftcron.leader.ticker import LostEpoch, now_ms
from raftcron.state.db import ThreadReader
from raftcron.state.tenants import allowed_notify_urls

log = logging.getLogger("raftcron.outbox")

POLL_S = 0.5
BATCH = 100
PARALLEL = 16
TIMEOUT_S = 5.0
BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 300.0

PENDING_SQL = (
    "SELECT id, event, payload, attempts, created_ms FROM outbox WHERE status = 'pending' "
    "ORDER BY id LIMIT ?"
)


def backoff_s(attempts: int) -> float:
    """Delay before the next round after `attempts` failed rounds: 1, 2, 4, … ≤ 300 s."""
    if attempts <= 0:
        return 0.0
    return min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** min(attempts - 1, 20))


def webhook_body(outbox_id: int, event: str, payload: dict[str, Any], created_ms: int) -> bytes:
    """The exact bytes sent (and signed); identical on every leader for the same row."""
    return json.dumps(
        {"id": outbox_id, "event": event, "created_at": ms_to_iso(created_ms), "data": payload},
        sort_keys=True, separators=(",", ":"),
    ).encode()


def sign(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def idempotency_key(outbox_id: int, created_ms: int) -> str:
    """Unique over the cluster's history: ids are never reused since the outbox counter
    (state.context), and a database written before it may have reused the id of a pruned
    row, but never at the same creation time."""
    return f"{outbox_id}-{created_ms}"


def webhook_headers(outbox_id: int, created_ms: int, event: str, secret: bytes,
                    body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Idempotency-Key": idempotency_key(outbox_id, created_ms),
        "X-Raftcron-Event": event,
        "X-Raftcron-Signature": sign(secret, body),
        "User-Agent": "raftcron-webhook/1",
    }


@dataclass(frozen=True)
class Row:
    id: int
    event: str
    payload: dict[str, Any]
    attempts: int
    created_ms: int
    targets: tuple[str, ...]


class OutboxDelivery:
    def __init__(self, epoch: int, proposer: Proposer,
                 open_reader: Callable[[], sqlite3.Connection],
                 webhooks: tuple[str, ...], secret: bytes,
                 client: httpx.AsyncClient | None = None,
                 clock: Callable[[], int] = now_ms,
                 on_result: Callable[[str], None] | None = None) -> None:
        self.epoch = epoch
        self.proposer = proposer
        self.open_reader = open_reader
        self.webhooks = webhooks
        self.secret = secret
        self.client = client
        self.clock = clock
        self.on_result = on_result
        self.wakeup = asyncio.Event()
        # (outbox id, url) answered 2xx during this epoch: not sent again by this leader.
        self.sent: set[tuple[int, str]] = set()
        self.next_try: dict[int, float] = {}

    def notify(self) -> None:
        self.wakeup.set()

    async def run(self) -> None:
        own = self.client is None
        client = self.client or httpx.AsyncClient(timeout=TIMEOUT_S)
        reader = ThreadReader(self.open_reader, "outbox")
        try:
            while True:
                self.wakeup.clear()
                rows = await reader.run(self._pending)
                mono = time.monotonic()
                due = [r for r in rows if self.next_try.get(r.id, 0.0) <= mono]
                for i in range(0, len(due), PARALLEL):
                    await asyncio.gather(*(self._deliver(client, r) for r in due[i:i + PARALLEL]))
                if not due or len(rows) < BATCH:
                    try:
                        await asyncio.wait_for(self.wakeup.wait(), POLL_S)
                    except TimeoutError:
                        pass
        finally:
            reader.close()
            if own:
                await client.aclose()

    def _pending(self, conn: sqlite3.Connection) -> list[Row]:
        rows = []
        specs: dict[str, tuple[str, ...]] = {}
        for oid, event, payload_text, attempts, created in conn.execute(PENDING_SQL, (BATCH,)):
            payload = json.loads(payload_text)
            targets = list(self.webhooks)
            job_id = payload.get("job_id")
            if isinstance(job_id, str):
                if job_id not in specs:
                    got = conn.execute("SELECT json_extract(spec, '$.notify'), tenant "
                                       "FROM jobs WHERE id = ?", (job_id,)).fetchone()
                    urls = tuple(json.loads(got[0])) if got and got[0] else ()
                    # The tenant's current policy, not the one the job was saved under.
                    specs[job_id] = allowed_notify_urls(conn, got[1], urls) if urls else ()
                targets += specs[job_id]
            rows.append(Row(oid, event, payload, attempts, created,
                            tuple(dict.fromkeys(targets))))
            if oid not in self.next_try:
                # Continue the backoff the previous leader recorded in the row.
                self.next_try[oid] = time.monotonic() + backoff_s(attempts)
        return rows

    async def _deliver(self, client: httpx.AsyncClient, row: Row) -> None:
        body = webhook_body(row.id, row.event, row.payload, row.created_ms)
        headers = webhook_headers(row.id, row.created_ms, row.event, self.secret, body)
        errors: list[str] = []
        for url in row.targets:
            if (row.id, url) in self.sent:
                continue
            try:
                resp = await client.post(url, content=body, headers=headers, timeout=TIMEOUT_S)
            except httpx.HTTPError as e:
                errors.append(f"{url}: {type(e).__name__}")
                self._count("error")
                continue
            if 200 <= resp.status_code < 300:
                self.sent.add((row.id, url))
                self._count("delivered")
            else:
                errors.append(f"{url}: HTTP {resp.status_code}")
                self._count("error")
        delivered = not errors
        result = await self.proposer.propose_leader(AckOutbox(
            self.epoch, self.clock(), row.id, delivered, "; ".join(errors)))
        if not result.get("ok"):
            if result.get("rejected") == "stale_epoch":
                raise LostEpoch(result.get("message", ""))
            log.info("ack of outbox row %d refused: %s", row.id, result.get("message"))
            self.next_try.pop(row.id, None)
            return
        if delivered:
            self.next_try.pop(row.id, None)
            self.sent = {s for s in self.sent if s[0] != row.id}
        else:
            self.next_try[row.id] = time.monotonic() + backoff_s(row.attempts + 1)
            log.info("outbox row %d not delivered (%s); next try in %.0f s", row.id,
                     "; ".join(errors), backoff_s(row.attempts + 1))

    def _count(self, result: str) -> None:
        if self.on_result is not None:
            self.on_result(result)
