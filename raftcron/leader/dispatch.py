"""Leasing: the leader picks pending attempts fairly and commits a `Lease` before any
worker sees them (no side effect before commit)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from typing import Any, TypeVar

from raftcron.cluster.proposer import Proposer
from raftcron.core import commands as c
from raftcron.core import identity
from raftcron.core.ahead import HERD_SIZE, herd_lead_ms
from raftcron.core.protocol import BASE_LEVEL, FIELD_LEVELS
from raftcron.leader.ticker import LostEpoch, now_ms
from raftcron.state.one_step import select_all

# How far ahead a Lease may be committed; it is handed out only once its instant came.
LEASE_LEAD_MS = 150
GROUP_MS = 10
# While a herd's claims may still be coming in, its pending runs are counted again at most
# this often (every poll wakes at every commit: a 100,000-run count each time is not free).
HERD_RECOUNT_MS = 500
# A herd (at least HERD_SIZE runs due in the same GROUP_MS) is leased further ahead, so
# that every waiting worker's Lease is committed before the instant and all of them are
# handed out at it, instead of one Raft round trip after another past the instant. Kept
# well under the clock margin a new leader tolerates (node.MAX_CLOCK_BEHIND_MS).
HERD_LEASE_LEAD_MS = 1000
# After a Lease that handed out nothing, wait this long (or for a change) before choosing
# again, rather than proposing the same refused runs in a loop.
EMPTY_LEASE_PAUSE_S = 0.1
# How long a held job or tenant is left out at most: the command that frees it may have
# been handled before the Lease that held it returned here.
HELD_FOR_S = 1.0
# While live runs (scheduled and manual) of a queue are due and the batch cannot take them
# all, backfills get at most this share of the leases handed out: a 10,000-instant
# backfill does not make the live runs wait behind it. When the live runs fit, backfills
# fill the rest of the batch (nothing idles while backfills wait).
BACKFILL_SHARE = 0.2
# The ids of backfill attempts (core.identity.is_backfill), as a GLOB.
BACKFILL_GLOB = "*@backfill-*"
# Dispatch ahead writes Lease.ahead_ms: a level every member must read first.
AHEAD_LEVEL = FIELD_LEVELS[(c.Lease, "ahead_ms")].level


def freed_by(cmd: c.Command) -> tuple[set[str], bool]:
    """The jobs a command may let run again, and whether it may free tenant and group
    slots: a run that ends frees its job (an exclusive policy), a slot of its tenant and
    of its concurrency group; a job edit can change its policy, a tenant or group edit its
    limit."""
    if isinstance(cmd, c.Complete):
        return {identity.job_of(item[0]) for item in cmd.completions}, True
    if isinstance(cmd, c.Release):
        return {identity.job_of(item[0]) for item in cmd.attempts}, True
    if isinstance(cmd, c.Sweep):
        return {identity.job_of(a) for a in cmd.attempt_ids}, True
    if isinstance(cmd, c.PutJob):
        return {cmd.job["id"]}, False
    if isinstance(cmd, c.DeleteJob):
        return {cmd.job_id}, False
    return set(), isinstance(cmd, (c.PutTenant, c.PutConcurrencyGroup))


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


T = TypeVar("T")


def _as_is(leases: list[dict[str, Any]]) -> Any:
    return leases


class Dispatcher:
    def __init__(
        self,
        epoch: int,
        proposer: Proposer,
        open_reader: Callable[[], sqlite3.Connection],
        clock: Callable[[], int] = now_ms,
        ahead_ms: int = 0,
        herd_ahead_ms: int = 0,
        herd_size: int = HERD_SIZE,
        herd_max_ms: int = 0,
    ) -> None:
        self.epoch = epoch
        self.ahead_ms = ahead_ms
        """Dispatch ahead: how long before its instant a run may go to a worker that asks
        for runs ahead (0: never)."""
        self.herd_ahead_ms = max(ahead_ms, herd_ahead_ms) if ahead_ms else 0
        self.herd_max_ms = max(self.herd_ahead_ms, herd_max_ms) if ahead_ms else 0
        """How far ahead a herd too large to lease in `herd_ahead_ms` may go (the node's
        lease_ahead_herd_max_s; by default no further)."""
        self.herd_size = herd_size
        """How many runs due in one GROUP_MS make a herd (the chaos suite makes its
        100-job herd one, so that the herd path runs under faults)."""
        """The same for a herd (at least HERD_SIZE runs due within GROUP_MS): leasing 33,000
        runs takes seconds, so they start leasing earlier to be out by their instant."""
        self.proposer = proposer
        self.open_reader = open_reader
        self.clock = clock
        self.reserved: set[str] = set()
        # What the last Leases held back (state.attempts.lease), name → monotonic time:
        # their pending runs are left out of the choice until a command may have freed
        # them (`free`), for HELD_FOR_S at most. Otherwise the backlog of one such job (a
        # backfill of a `forbid` job) fills every batch the choice looks at, the Lease
        # hands out nothing, and the queue's other jobs wait.
        self.held_jobs: dict[str, float] = {}
        self.held_tenants: dict[str, float] = {}
        # Full concurrency groups, (tenant, group) → (monotonic time, their waiting jobs).
        self.held_groups: dict[tuple[str, str], tuple[float, set[str]]] = {}
        # Per set of queues: the backfill leases owed under BACKFILL_SHARE (a fraction of
        # one lease carries over, so a worker that leases one run at a time gets its share).
        self.backfill_credit: dict[tuple[str, ...], float] = {}
        # (queues, instant) -> (its herd lead; when its pending runs were last counted),
        # for the herds dispatch ahead found whose instant is at most a minute past
        # (`_herd_lead`: a count that found no herd is not kept).
        self.herds: dict[tuple[tuple[str, ...], int], tuple[int, int]] = {}
        self.gate: Callable[[], bool] = lambda: True
        # The protocol level the cluster may be written at (cluster.levels); set by the
        # node. Below AHEAD_LEVEL every run is leased at its instant, as before.
        self.level: Callable[[], int] = lambda: BASE_LEVEL
        self._changed = asyncio.Event()
        self._conn: sqlite3.Connection | None = None
        self.closed = False

    def notify(self) -> None:
        """New or newly-due attempts may exist: wake long-polls."""
        self._changed.set()
        self._changed = asyncio.Event()

    def free(self, jobs: set[str], tenants: bool) -> None:
        """`jobs` (and every tenant, if `tenants`) may have runs to lease again."""
        for job in jobs:
            self.held_jobs.pop(job, None)
        if tenants:
            self.held_tenants.clear()
            self.held_groups.clear()

    def _hold(self, result: dict[str, Any]) -> bool:
        """Note what a Lease held back; whether anything new was."""
        until = time.monotonic() + HELD_FOR_S
        new = False
        for held, names in ((self.held_jobs, result.get("held_jobs", ())),
                            (self.held_tenants, result.get("held_tenants", ()))):
            for name in names:
                new = new or name not in held
                held[name] = until
        for tenant, group, jobs in result.get("held_groups", ()):
            known = self.held_groups.get((tenant, group), (0.0, set()))[1]
            new = new or not set(jobs) <= known
            self.held_groups[(tenant, group)] = (until, known | set(jobs))
        return new

    def _not_held(self) -> tuple[str, list[str]]:
        """SQL conditions and parameters leaving out the runs of held jobs and tenants, and
        the runs chosen by Leases still being committed (`reserved`)."""
        now = time.monotonic()
        for key in [k for k, (until, _) in self.held_groups.items() if until <= now]:
            del self.held_groups[key]
        sql, args = "", []
        for column, held in (("job_id", self.held_jobs), ("tenant", self.held_tenants)):
            for name in [n for n, until in held.items() if until <= now]:
                del held[name]
            names = set(held)
            if column == "job_id":
                for _, jobs in self.held_groups.values():
                    names |= jobs
            if names:
                sql += f" AND {column} NOT IN ({','.join('?' * len(names))})"
                args += sorted(names)
        if self.reserved:
            # Left out by SQLite, not read and dropped here: with 16 pollers a herd has up
            # to 16,000 runs in Leases not yet committed.
            sql += " AND id NOT IN (SELECT value FROM json_each(?))"
            args.append(json.dumps(list(self.reserved)))
        return sql, args

    def _select(self, queues: list[str], limit: int, now: int
                ) -> tuple[list[str], int, int | None]:
        """Choose attempts to lease and the instant to stamp on the Lease command.

        Looks `LEASE_LEAD_MS` ahead so that the Lease of a run due at T can be committed
        before T (and handed out at T). Runs already due go out now, stamped `now`; if
        none are due, the earliest upcoming group (within `GROUP_MS`) is chosen, stamped
        with its latest instant; a herd's group is chosen up to `HERD_LEASE_LEAD_MS` ahead.
        Returns (ids, stamp, when to look again if nothing was chosen).
        """
        if self._conn is None:
            self._conn = self.open_reader()
        marks = ",".join("?" * len(queues))
        not_held, held = self._not_held()
        rows = self._rows(
            "SELECT id, tenant, job_id, not_before_ms FROM attempts WHERE status = 'pending' "
            f"AND queue IN ({marks}) AND not_before_ms <= ?{not_held} "
            "ORDER BY not_before_ms, id LIMIT ?",
            (*queues, now + LEASE_LEAD_MS, *held, limit * 4),
        )
        if rows and any(identity.is_backfill(r[0]) for r in rows):
            rows = self._with_live_rows(rows, queues, limit, now, not_held, held)
        if rows:
            first = rows[0][3]
            cutoff = now if first <= now else first + GROUP_MS
            group = [r for r in rows if r[3] <= cutoff]
            return (*self._choose_sharing(group, limit, now, tuple(sorted(queues))), None)
        row = self._conn.execute(
            "SELECT min(not_before_ms) FROM attempts WHERE status = 'pending' "
            f"AND queue IN ({marks}) AND not_before_ms > ?",
            (*queues, now + LEASE_LEAD_MS),
        ).fetchone()
        next_due = row[0]
        if next_due is None:
            return [], now, None
        if next_due - now > HERD_LEASE_LEAD_MS:
            return [], now, next_due - HERD_LEASE_LEAD_MS  # look again when a herd could go
        window = (*queues, next_due, next_due + GROUP_MS)
        if not self._herd_lead(queues, next_due, now)[0]:
            return [], now, next_due - LEASE_LEAD_MS
        rows = self._rows(
            "SELECT id, tenant, job_id, not_before_ms FROM attempts WHERE status = 'pending' "
            f"AND queue IN ({marks}) AND not_before_ms BETWEEN ? AND ?{not_held} "
            "ORDER BY not_before_ms, id LIMIT ?",
            (*window, *held, limit * 4),
        )
        if not rows:
            return [], now, next_due - LEASE_LEAD_MS
        return (*self._choose(rows, limit, now), None)

    def _with_live_rows(self, rows: list[tuple], queues: list[str], limit: int, now: int,
                        not_held: str, held: list[str]) -> list[tuple]:
        """`rows` with the queue's oldest live (not backfill) rows added: a large backfill
        fills the whole window of the first choice, and its live runs would not be seen."""
        assert self._conn is not None
        marks = ",".join("?" * len(queues))
        live = self._rows(
            "SELECT id, tenant, job_id, not_before_ms FROM attempts WHERE status = 'pending' "
            f"AND queue IN ({marks}) AND not_before_ms <= ? AND id NOT GLOB ?{not_held} "
            "ORDER BY not_before_ms, id LIMIT ?",
            (*queues, now + LEASE_LEAD_MS, BACKFILL_GLOB, *held, limit * 4),
        )
        seen = {r[0] for r in rows}
        extra = [r for r in live if r[0] not in seen]
        return sorted(rows + extra, key=lambda r: (r[3], r[0]))

    def _choose_sharing(self, group: list[tuple], limit: int, now: int,
                        key: tuple[str, ...]) -> tuple[list[str], int]:
        """`_choose`, with backfills held to BACKFILL_SHARE of the batch while the live
        runs due cannot all be taken."""
        live = [r for r in group if not identity.is_backfill(r[0])]
        backfill = [r for r in group if identity.is_backfill(r[0])]
        if not live or not backfill:
            return self._choose(group, limit, now)
        if len(live) >= limit:
            credit = min(self.backfill_credit.get(key, 0.0) + BACKFILL_SHARE * limit, limit)
            n_backfill = int(credit)
            self.backfill_credit[key] = credit - n_backfill
        else:
            n_backfill = limit - len(live)
        live_ids, live_stamp = self._choose(live, limit - n_backfill, now)
        if n_backfill == 0:
            return live_ids, live_stamp
        backfill_ids, backfill_stamp = self._choose(backfill, n_backfill, now)
        return live_ids + backfill_ids, max(live_stamp, backfill_stamp)

    def _herd_lead(self, queues: list[str], instant: int, now: int
                   ) -> tuple[int, int | None]:
        """(lead, when to count again): how long before `instant` its runs go out, a
        herd's lead (core.ahead.herd_lead_ms, by how many runs are pending within GROUP_MS
        of it), or 0 if they are no herd.

        A count that found no herd is not kept: the herd's first claim may commit just
        after it. A herd's count is kept HERD_RECOUNT_MS while its claims may still be
        coming in (they only raise its lead: its size is counted again then), and for good
        once its leasing began. A herd's lead never shrinks: its last few hundred runs keep
        the lead it began with."""
        assert self._conn is not None
        key = (tuple(sorted(queues)), instant)
        lead, counted = self.herds.get(key, (0, None))
        if lead > 0 and counted is not None:
            if now >= instant - lead:
                return lead, None
            if counted <= now < counted + HERD_RECOUNT_MS:
                return lead, counted + HERD_RECOUNT_MS
        size = self._conn.execute(
            "SELECT count(*) FROM attempts WHERE status = 'pending' "
            f"AND queue IN ({','.join('?' * len(queues))}) AND not_before_ms BETWEEN ? AND ?",
            (*queues, instant, instant + GROUP_MS),
        ).fetchone()[0]
        if size >= self.herd_size:
            # At least HERD_LEASE_LEAD_MS: the lead of a herd leased at its instant.
            lead = max(lead, HERD_LEASE_LEAD_MS,
                       herd_lead_ms(size, self.herd_ahead_ms, self.herd_max_ms))
        self.herds = {k: v for k, v in self.herds.items() if k[1] > now - 60_000}
        if lead == 0:
            return 0, None
        self.herds[key] = (lead, now)
        return lead, (now + HERD_RECOUNT_MS if now < instant - lead else None)

    def _select_ahead(self, queues: list[str], limit: int, now: int
                      ) -> tuple[list[str], int, int | None]:
        """Choose attempts due by `now + ahead_ms` for a worker that starts each at its
        instant (core.ahead): due ones first, fairly; or else the next herd's, from its
        lead before it (`_herd_lead`: `herd_ahead_ms`, or up to `herd_max_ms` for a herd too
        large to lease in that). Only the next pending instant is looked at: a lone run
        due before a herd holds the herd back until it is leased. A not-yet-due run of a
        paused job is left out (the Lease would refuse it). Returns (ids, the lead they were
        chosen with, when to look again if none)."""
        if self._conn is None:
            self._conn = self.open_reader()
        marks = ",".join("?" * len(queues))
        not_held, held = self._not_held()
        horizon = now + self.ahead_ms
        rows = self._rows(
            "SELECT id, tenant, job_id, not_before_ms FROM attempts WHERE status = 'pending' "
            f"AND queue IN ({marks}) AND not_before_ms <= ? AND (not_before_ms <= ? OR job_id "
            f"NOT IN (SELECT id FROM jobs WHERE paused)){not_held} "
            "ORDER BY not_before_ms, id LIMIT ?",
            (*queues, horizon, now, *held, limit * 4),
        )
        if rows and any(identity.is_backfill(r[0]) for r in rows):
            rows = self._with_live_rows(rows, queues, limit, now, not_held, held)
        if rows:
            ids, _ = self._choose_sharing(rows, limit, now, tuple(sorted(queues)))
            return ids, self.ahead_ms, None
        next_due = self._conn.execute(
            "SELECT min(not_before_ms) FROM attempts WHERE status = 'pending' "
            f"AND queue IN ({marks}) AND not_before_ms > ?", (*queues, horizon),
        ).fetchone()[0]
        if next_due is None:
            return [], 0, None
        if self.herd_max_ms <= self.ahead_ms:
            return [], 0, next_due - self.ahead_ms  # herds go no further ahead
        if next_due - now > self.herd_max_ms:
            return [], 0, next_due - self.herd_max_ms  # look again when a herd could go
        herd_lead, count_again = self._herd_lead(queues, next_due, now)
        if herd_lead <= self.ahead_ms:
            return [], 0, next_due - self.ahead_ms  # no herd
        if next_due - now > herd_lead:
            wake = next_due - herd_lead
            return [], 0, wake if count_again is None else min(wake, count_again)
        rows = self._rows(
            "SELECT id, tenant, job_id, not_before_ms FROM attempts WHERE status = 'pending' "
            f"AND queue IN ({marks}) AND not_before_ms BETWEEN ? AND ? AND job_id "
            f"NOT IN (SELECT id FROM jobs WHERE paused){not_held} "
            "ORDER BY not_before_ms, id LIMIT ?",
            (*queues, next_due, next_due + GROUP_MS, *held, limit * 4),
        )
        if not rows:
            return [], 0, next_due - self.ahead_ms
        return fair_order([(r[0], r[1], r[2]) for r in rows], limit), herd_lead, None

    def _rows(self, sql: str, params: tuple) -> list[tuple]:
        """The (id, tenant, job_id, not_before_ms) rows of `sql`, read in one SQLite step
        (state.one_step: a herd's leases are chosen while every thread of the leader is
        busy), in the order its ORDER BY not_before_ms, id names."""
        assert self._conn is not None
        return sorted(select_all(self._conn, sql, params, 4), key=lambda r: (r[3], r[0]))

    @staticmethod
    def _choose(group: list[tuple], limit: int, now: int) -> tuple[list[str], int]:
        """Fair pick from one group of (id, tenant, job, not_before) rows, and its stamp:
        the latest instant chosen, never before now."""
        chosen = fair_order([(r[0], r[1], r[2]) for r in group], limit)
        due = {r[0]: r[3] for r in group}
        return chosen, max([now] + [due[i] for i in chosen])

    async def lease(self, worker_id: str, queues: list[str], max_n: int, wait_s: float,
                    prepare: Callable[[list[dict[str, Any]]], T] = _as_is,
                    acknowledge: bool = False, ahead: bool = False) -> T:
        """Long-poll for up to `wait_s` seconds; returns `prepare(leases)`.

        `acknowledge`: the worker acknowledges each lease (see core.commands.Lease).
        `ahead`: the worker starts each run at its lease's `start_at_ms` (its clock agrees
        with the cluster's): runs due within `ahead_ms` are leased and handed out at once.
        Otherwise a run is handed out at its instant, as before.

        `prepare` runs as soon as the Lease is committed, before the wait for the leases'
        instant: a caller that encodes the response there hands out a herd of 10,000
        leases at the instant without spending the first ~100 ms of it in json.dumps."""
        deadline = time.monotonic() + wait_s
        while True:
            if self.closed:
                # Leadership ended while this poll waited: the worker must hear it now and
                # ask another node, not wait out its poll here (an untrusted clock would
                # otherwise keep it waiting without ever proposing, and so without failing).
                raise LostEpoch("leadership ended")
            changed = self._changed
            now = self.clock()
            lead_ms = self.ahead_ms if ahead and self.level() >= AHEAD_LEVEL else 0
            if not self.gate():
                # An untrusted clock would hand runs out early: lease nothing for now,
                # ahead or not.
                ids, stamp, next_due = [], now, None
            elif lead_ms:
                stamp = now
                ids, lead_ms, next_due = self._select_ahead(queues, max_n, now)
            else:
                ids, stamp, next_due = self._select(queues, max_n, now)
            if ids:
                self.reserved.update(ids)
                try:
                    result = await self.proposer.propose_leader(
                        c.Lease(self.epoch, stamp, worker_id, ids, acknowledge, lead_ms)
                    )
                finally:
                    self.reserved.difference_update(ids)
                if not result.get("ok"):
                    raise LostEpoch(result.get("message", "lease refused"))
                newly_held = self._hold(result)
                if result["leases"]:
                    prepared = prepare(result["leases"])
                    # Committed ahead of time: nothing is handed out before its instant
                    # (unless the worker starts each run at its instant itself).
                    early_ms = stamp - self.clock()
                    if early_ms > 0 and not lead_ms:
                        await asyncio.sleep(early_ms / 1000)
                    return prepared
                if newly_held:
                    continue  # choose again, past what was just held back
                next_due = now + int(EMPTY_LEASE_PAUSE_S * 1000)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return prepare([])
            if next_due is not None:
                remaining = min(remaining, max(0.0, (next_due - now) / 1000))
            elif not self.gate():
                remaining = min(remaining, 0.5)
            holds = [*self.held_jobs.values(), *self.held_tenants.values(),
                     *(until for until, _ in self.held_groups.values())]
            if holds:
                # A hold can outlive what freed it (see HELD_FOR_S): look again when the
                # first one ends, not only on the next change.
                remaining = min(remaining, max(0.0, min(holds) - time.monotonic()))
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except TimeoutError:
                pass

    def close(self) -> None:
        """Leadership ended: waiting polls wake and end with LostEpoch."""
        self.closed = True
        self.notify()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
