"""Outbox delivery: the leader POSTs each committed outbox row to its webhook receivers.

A row is written in the same transaction as the state change that caused it (an alert
raised or resolved, an occurrence failed), so reading it from the applied state means it
is committed: nothing is sent for a change that did not happen.

Receivers are the cluster-wide `webhooks` plus, for events that name a job, the job's
`notify` URLs and, for the events channels get, the channels it names (leader.channels:
Slack, e-mail or webhook; each is one receiver with the same delivery rules).

A webhook's body is JSON (`{"id", "event", "created_at", "data"}`, compact, sorted
keys) and every request carries `Idempotency-Key: <outbox id>-<created ms>` and
`X-Raftcron-Signature: sha256=<hex HMAC-SHA256 of the exact body bytes>`. Cluster-wide
receivers are signed with the cluster webhook key, a job's `notify` URLs with the key of
the job's tenant (leader.webhook_keys).

Each round:
1. new rows are routed (`RouteOutbox`): their receivers are fixed, one delivery state per
   (row, receiver), due at once;
2. due deliveries are picked per receiver (at most PER_RECEIVER each, longest-due first),
   so a receiver in backoff, or one with a thousand rows waiting, delays only itself, and
   each is started as its own task, within a deadline for the whole request and the caps
   per signer (tenant) and per host: no round waits for a delivery, so a receiver that
   drips its answer holds only its own deliveries, never another tenant's;
3. the outcomes of the deliveries that finished are committed (`AckDeliveries`) at the
   next round: a failure backs that delivery off
   (1, 2, 4 … 300 s, in the replicated state, so a new leader continues the schedule), and
   past the give-up bound the delivery is dead and the receiver's alert is raised.

Delivery is at least once: after a failover a receiver can see the same row again, always
with the same idempotency key and the same body.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import sqlite3
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import httpx

from raftcron.cluster.proposer import Proposer
from raftcron.core import delivery
from raftcron.core.commands import AckDeliveries, Command, RouteOutbox
from raftcron.core.delivery import url_origin
from raftcron.core.notify_refs import notify_urls
from raftcron.core.timefmt import ms_to_iso
from raftcron.leader import channels
from raftcron.leader.ticker import LostEpoch, now_ms
from raftcron.leader.webhook_keys import KeyRing, load_keys
from raftcron.state.db import ThreadReader
from raftcron.state.tenants import allowed_notify_urls

log = logging.getLogger("raftcron.outbox")

POLL_S = 0.5
ROUTE_BATCH = 200
PER_RECEIVER = 16
PARALLEL = 128
# In flight at once for the receivers of one signer (one tenant, or the cluster's), and
# for one host: one tenant's slow receivers cannot use up everyone's turn.
PER_SIGNER = 32
PER_HOST = 16
ACK_BATCH = 500
TIMEOUT_S = 5.0
# One whole delivery: connect, send, and the answer's head. A receiver that answers slowly
# (one byte every few seconds) is cut here, whatever each read's timeout.
DELIVERY_DEADLINE_S = 10.0

FRESH_SQL = (
    "SELECT id, payload, event, created_ms FROM outbox o WHERE status = 'pending' AND NOT EXISTS "
    "(SELECT 1 FROM outbox_deliveries d WHERE d.outbox_id = o.id) ORDER BY id LIMIT ?"
)
# Due deliveries, at most `PER_RECEIVER` per receiver, each receiver's longest-due first (a
# retry in backoff does not overtake rows not tried yet).
DUE_SQL = (
    "SELECT d.outbox_id, d.receiver, d.signer, d.attempts, o.event, o.payload, o.created_ms, "
    "d.held_ms FROM (SELECT outbox_id, receiver, signer, attempts, held_ms, row_number() OVER "
    "(PARTITION BY receiver ORDER BY next_ms, outbox_id) AS n FROM outbox_deliveries "
    "WHERE status = 'pending' AND next_ms <= ?) AS d JOIN outbox o ON o.id = d.outbox_id "
    "WHERE d.n <= ? ORDER BY d.receiver, d.outbox_id"
)


def backoff_s(attempts: int) -> float:
    """Delay before the next try after `attempts` failed tries: 1, 2, 4, … ≤ 300 s."""
    return delivery.backoff_ms(attempts) / 1000


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
class Due:
    """One delivery to make: an outbox row to one receiver."""

    outbox_id: int
    receiver: str
    signer: str
    attempts: int
    event: str
    payload: dict[str, Any]
    created_ms: int
    # For a channel receiver: the channel (None: deleted) and what its message says.
    channel: Any = None
    facts: Any = None
    # Held for a muted channel until this instant: sent as one summary of `group`, the
    # (outbox id, facts) of every delivery held for that receiver to that instant.
    held_ms: int | None = None
    group: tuple[Any, ...] = ()


def route(webhooks: tuple[str, ...], payload: dict[str, Any],
          job: tuple[str, list[str]] | None) -> list[list[str]]:
    """[[receiver, signer], ...] of a row: the cluster receivers, then the notify URLs of
    the job it names (`job` = (tenant, notify)). A URL that is both is a cluster receiver."""
    out = {url: delivery.CLUSTER_SIGNER for url in webhooks}
    if job is not None:
        tenant, notify = job
        for url in notify:
            out.setdefault(url, delivery.tenant_signer(tenant))
    return [[url, signer] for url, signer in out.items()]


class OutboxDelivery:
    def __init__(self, epoch: int, proposer: Proposer,
                 open_reader: Callable[[], sqlite3.Connection],
                 webhooks: tuple[str, ...], secret: bytes | None,
                 client: httpx.AsyncClient | None = None,
                 clock: Callable[[], int] = now_ms,
                 on_result: Callable[[str], None] | None = None,
                 give_up_s: float = delivery.DEFAULT_GIVE_UP_S,
                 max_attempts: int | None = None) -> None:
        """`secret` signs for the cluster receivers (`webhook_secret_file`); None: the
        cluster key in the replicated state."""
        self.epoch = epoch
        self.proposer = proposer
        self.open_reader = open_reader
        self.webhooks = webhooks
        self.secret = secret
        self.client = client
        self.clock = clock
        self.on_result = on_result
        self.give_up_ms = int(give_up_s * 1000)
        self.max_attempts = max_attempts
        self.wakeup = asyncio.Event()
        self._no_key_logged = False
        # Deliveries started and not committed yet, by (row, receiver); the tasks running;
        # their outcomes waiting for the next AckDeliveries.
        self._in_flight: set[tuple[int, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._finished: list[list[Any]] = []
        self._by_signer: Counter[str] = Counter()
        self._by_host: Counter[str] = Counter()

    def notify(self) -> None:
        self.wakeup.set()

    async def run(self) -> None:
        own = self.client is None
        client = self.client or httpx.AsyncClient(
            timeout=TIMEOUT_S, limits=httpx.Limits(max_connections=PARALLEL))
        reader = ThreadReader(self.open_reader, "outbox")
        try:
            while True:
                self.wakeup.clear()
                busy = await self.round(reader, client)
                if not busy:
                    try:
                        await asyncio.wait_for(self.wakeup.wait(), POLL_S)
                    except TimeoutError:
                        pass
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            reader.close()
            if own:
                await client.aclose()

    async def round(self, reader: ThreadReader, client: httpx.AsyncClient) -> bool:
        """Commit the outcomes of the deliveries finished since the last round, route new
        rows, and start the due deliveries that are not in flight yet and fit their caps.
        It does not wait for a delivery: a slow receiver holds only its own turns. True
        when more work was left than one round takes."""
        await self._ack_finished()
        routes = await reader.run(self.fresh)
        for i in range(0, len(routes), ROUTE_BATCH):
            await self._propose(RouteOutbox(self.epoch, self.clock(), routes[i:i + ROUTE_BATCH]))
        due, keys = await reader.run(self._due_and_keys, self.clock())
        self.start(client, due, keys)
        per_receiver: dict[str, int] = {}
        for d in due:
            per_receiver[d.receiver] = per_receiver.get(d.receiver, 0) + 1
        return len(routes) >= ROUTE_BATCH or any(n >= PER_RECEIVER for n in per_receiver.values())

    async def settle(self) -> None:
        """Wait for every delivery in flight and commit the outcomes."""
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._ack_finished()

    async def _ack_finished(self) -> None:
        results, self._finished = self._finished, []
        for i in range(0, len(results), ACK_BATCH):
            await self._propose(AckDeliveries(self.epoch, self.clock(), self.give_up_ms,
                                              self.max_attempts, results[i:i + ACK_BATCH]))
        # Only now may a delivery be picked again: its committed state says when.
        for outbox_id, receiver, _, _ in results:
            self._in_flight.discard((outbox_id, receiver))

    def fresh(self, conn: sqlite3.Connection) -> list[list[Any]]:
        """Routes for rows that have no delivery state yet (new rows, and rows written
        before per-receiver delivery existed)."""
        jobs: dict[str, tuple[str, list[str]] | None] = {}
        notifies: dict[str, Any] = {}
        routes: list[list[Any]] = []
        for oid, payload_text, event, created_ms in conn.execute(FRESH_SQL,
                                                                  (ROUTE_BATCH * 5,)):
            payload = json.loads(payload_text)
            job_id = payload.get("job_id")
            job = None
            if isinstance(job_id, str):
                if job_id not in jobs:
                    got = conn.execute("SELECT tenant, json_extract(spec, '$.notify') FROM jobs "
                                       "WHERE id = ?", (job_id,)).fetchone()
                    # The tenant's current policy decides, not the one the job was saved under.
                    notifies[job_id] = json.loads(got[1]) if got and got[1] else []
                    urls = notify_urls(notifies[job_id])
                    allowed = list(allowed_notify_urls(conn, got[0], urls)) if urls else []
                    jobs[job_id] = (got[0], allowed) if got else None
                job = jobs[job_id]
            if job is not None and not same_tenant(conn, payload, job[0]):
                job = None  # the job id now names another tenant's job: not its receivers
            receivers = route(self.webhooks, payload, job)
            if job is not None:
                receivers += channels.channel_routes(conn, event, job[0], notifies[job_id],
                                                     {r[0] for r in receivers}, created_ms)
            routes.append([oid, receivers])
        return routes

    def _due_and_keys(self, conn: sqlite3.Connection, now: int) -> tuple[list[Due], KeyRing]:
        due = [Due(oid, receiver, signer, attempts, event, json.loads(payload), created,
                   held_ms=held)
               for oid, receiver, signer, attempts, event, payload, created, held
               in conn.execute(DUE_SQL, (now, PER_RECEIVER))]
        due = [channels.with_channel(conn, d) if channels.is_channel(d.receiver) else d
               for d in due]
        due = channels.held_summaries(conn, due, now)
        return due, load_keys(conn, self.secret)

    def start(self, client: httpx.AsyncClient, due: list[Due], keys: KeyRing) -> int:
        """Start each due delivery not in flight yet, within the caps (PARALLEL in all,
        PER_SIGNER for one tenant's receivers, PER_HOST for one host); the others wait for
        a later round, in the replicated state. A delivery whose key is not known yet is
        not attempted (fail closed: never sent unsigned or with another key). The number
        started."""
        started = 0
        for d in interleaved(due):
            keys_of = [(oid, d.receiver) for oid in _group_ids(d)]
            if any(k in self._in_flight for k in keys_of):
                continue
            host = d.channel.origin() if d.channel is not None else receiver_origin(d.receiver)
            if (len(self._tasks) >= PARALLEL or self._by_signer[d.signer] >= PER_SIGNER
                    or self._by_host[host] >= PER_HOST):
                continue
            secret = keys.secret_for(d.signer)
            if secret is None:
                if not self._no_key_logged:
                    log.warning("no webhook key for %s yet: not delivering", d.signer)
                    self._no_key_logged = True
                continue
            self._in_flight.update(keys_of)
            self._by_signer[d.signer] += 1
            self._by_host[host] += 1
            task = asyncio.create_task(self._deliver_one(client, d, secret, host),
                                       name=f"webhook-{d.outbox_id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started += 1
        return started

    async def _deliver_one(self, client: httpx.AsyncClient, d: Due, secret: bytes,
                           host: str) -> None:
        try:
            if d.group:
                error = await channels.deliver_summary(
                    client, d, idempotency_key(d.outbox_id, d.created_ms), DELIVERY_DEADLINE_S,
                    lambda url: post_webhook(client, replace(d, receiver=url), secret))
            elif channels.is_channel(d.receiver):
                error = await channels.deliver(
                    client, d.channel, d.facts, idempotency_key(d.outbox_id, d.created_ms),
                    DELIVERY_DEADLINE_S,
                    lambda url: post_webhook(client, replace(d, receiver=url), secret))
            else:
                error = await post_webhook(client, d, secret)
        except asyncio.CancelledError:
            for oid in _group_ids(d):
                self._in_flight.discard((oid, d.receiver))
            raise
        except Exception as e:  # noqa: BLE001 - any failure is this delivery's, never the loop's
            # (an URL httpx refuses, an error group from the transport): recorded and backed
            # off like a refused connection, so it can never stay in flight for ever.
            error = f"{type(e).__name__}: delivery failed"
        finally:
            self._by_signer[d.signer] -= 1
            self._by_host[host] -= 1
        if error is None:
            self._count("delivered")
        else:
            self._count("error")
            log.info("outbox row %d not delivered to %s (%s)", d.outbox_id,
                     delivery.redact_url(d.receiver), error)
        # A summary's outcome is every held delivery's it stands for.
        self._finished += [[oid, d.receiver, error is None, error or ""]
                           for oid in _group_ids(d)]
        self.wakeup.set()

    async def _propose(self, cmd: Command) -> None:
        result = await self.proposer.propose_leader(cmd)
        if not result.get("ok"):
            if result.get("rejected") == "stale_epoch":
                raise LostEpoch(result.get("message", ""))
            log.warning("%s refused: %s", cmd.TYPE, result.get("message"))

    def _count(self, result: str) -> None:
        if self.on_result is not None:
            self.on_result(result)


def same_tenant(conn: sqlite3.Connection, payload: dict[str, Any], tenant: str) -> bool:
    """Whether the occurrence a row names (if it names one still held) is of `tenant`: a
    job deleted and created again under its id by another tenant before the row was
    routed must not get the first one's messages."""
    occ = payload.get("occurrence_id")
    if not isinstance(occ, str):
        return True
    row = conn.execute("SELECT tenant FROM occurrences WHERE id = ?", (occ,)).fetchone()
    return row is None or row[0] == tenant


def _group_ids(d: Due) -> list[int]:
    """The outbox rows a delivery stands for: its own, or every one of a held summary."""
    return [oid for oid, _ in d.group] if d.group else [d.outbox_id]


async def post_webhook(client: httpx.AsyncClient, d: Due, secret: bytes) -> str | None:
    """POST one delivery within DELIVERY_DEADLINE_S in all (connect, send, the answer's
    status line and headers); the answer's body is not read. None when the receiver
    answered 2xx, else why not."""
    body = webhook_body(d.outbox_id, d.event, d.payload, d.created_ms)
    headers = webhook_headers(d.outbox_id, d.created_ms, d.event, secret, body)
    try:
        async with asyncio.timeout(DELIVERY_DEADLINE_S):
            async with client.stream("POST", d.receiver, content=body, headers=headers,
                                     timeout=TIMEOUT_S) as resp:
                status = resp.status_code
    except TimeoutError:
        return f"no answer within {DELIVERY_DEADLINE_S:g} s"
    except httpx.HTTPError as e:
        return type(e).__name__
    return None if 200 <= status < 300 else f"HTTP {status}"


def receiver_origin(url: str) -> str:
    """scheme://host:port of a receiver URL: the unit of PER_HOST (one server)."""
    return url_origin(url)


def interleaved(due: list[Due]) -> list[Due]:
    """Every receiver's first delivery, then every receiver's second, …: with more
    deliveries than PARALLEL, no receiver waits behind another one's whole batch."""
    rank: dict[str, int] = {}
    keyed = []
    for i, d in enumerate(due):
        rank[d.receiver] = rank.get(d.receiver, -1) + 1
        keyed.append((rank[d.receiver], i, d))
    return [d for _, _, d in sorted(keyed, key=lambda k: (k[0], k[1]))]
