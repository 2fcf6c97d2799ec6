"""Leasing: the leader picks pending attempts fairly and commits a `Lease` before any
worker sees them (no side effect before commit)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from typing import Any

from raftcron.cluster.proposer import Proposer
from raftcron.core.commands import Lease
from raftcron.leader.ticker import LostEpoch, now_ms


def fair_order(rows: list[tuple[str, str, str]], limit: int) -> list[str]:
    """Round-robin over tenants, then over jobs within a tenant, keeping age order.

    rows: (attempt_id, tenant, job_id) oldest first. One tenant with 10,000 due runs
    cannot push another tenant's single due run out of a batch.
    """
    by_tenant: OrderedDict[str, OrderedDict[str, list[str]]] = OrderedDict()
    for attempt_id, tenant, job_id in rows:
        by_tenant.setdefault(tenant, OrderedDict()).setdefault(job_id, []).append(attempt_id)
    queues = {t: list(jobs.values()) for t, jobs in by_tenant.items()}
    positions: dict[str, int] = defaultdict(int)
    out: list[str] = []
    while len(out) < limit and queues:
        for tenant in list(queues):
            jobs = queues[tenant]
            i = positions[tenant] % len(jobs)
            out.append(jobs[i].pop(0))
            if not jobs[i]:
                jobs.pop(i)
            else:
                positions[tenant] = i + 1
            if not jobs:
                del queues[tenant]
            if len(out) >= limit:
                break
    return out


class Dispatcher:
    def __init__(
        self,
        epoch: int,
        proposer: Proposer,
        open_reader: Callable[[], sqlite3.Connection],
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.epoch = epoch
        self.proposer = proposer
        self.open_reader = open_reader
        self.clock = clock
        self.reserved: set[str] = set()
        self._changed = asyncio.Event()
        self._conn: sqlite3.Connection | None = None

    def notify(self) -> None:
        """New or newly-due attempts may exist: wake long-polls."""
        self._changed.set()
        self._changed = asyncio.Event()

    def _select(self, queues: list[str], limit: int, now: int) -> tuple[list[str], int | None]:
        if self._conn is None:
            self._conn = self.open_reader()
        marks = ",".join("?" * len(queues))
        rows = self._conn.execute(
            "SELECT id, tenant, job_id FROM attempts WHERE status = 'pending' "
            f"AND queue IN ({marks}) AND not_before_ms <= ? ORDER BY not_before_ms, id LIMIT ?",
            (*queues, now, limit * 4 + len(self.reserved)),
        ).fetchall()
        rows = [r for r in rows if r[0] not in self.reserved]
        chosen = fair_order(rows, limit)
        next_due = None
        if not chosen:
            row = self._conn.execute(
                "SELECT min(not_before_ms) FROM attempts WHERE status = 'pending' "
                f"AND queue IN ({marks}) AND not_before_ms > ?",
                (*queues, now),
            ).fetchone()
            next_due = row[0]
        return chosen, next_due

    async def lease(self, worker_id: str, queues: list[str], max_n: int,
                    wait_s: float) -> list[dict[str, Any]]:
        deadline = time.monotonic() + wait_s
        while True:
            changed = self._changed
            now = self.clock()
            ids, next_due = self._select(queues, max_n, now)
            if ids:
                self.reserved.update(ids)
                try:
                    result = await self.proposer.propose_leader(
                        Lease(self.epoch, now, worker_id, ids)
                    )
                finally:
                    self.reserved.difference_update(ids)
                if not result.get("ok"):
                    raise LostEpoch(result.get("message", "lease refused"))
                if result["leases"]:
                    return result["leases"]
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            if next_due is not None:
                remaining = min(remaining, max(0.0, (next_due - now) / 1000))
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                pass

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
