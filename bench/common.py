"""Pieces shared by the cluster benchmarks: a no-op lease poller, bulk job creation,
percentiles, and per-process CPU/RSS/disk readings from /proc."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from raftcron.core.model import parse_job
from raftcron.state.db import open_writer
from raftcron.worker.runner import (
    BEFORE_START_CHECK_S,
    EWMA_WEIGHT,
    MAX_CHECK_EXTRA_S,
    START_GROUP_S,
)

CLK_TCK = os.sysconf("SC_CLK_TCK")
BATCH_CREATE = 1000  # jobs per POST /v1/jobs:batchCreate


def write_jobs(path: Path, jobs: int, job: dict[str, Any], id_prefix: str,
               created_ms: int = 0, spread_watermarks: bool = False) -> None:
    """Write `jobs` copies of `job` (a job as the API takes it; ids `id_prefix` and seven
    digits) straight into the state database at `path`, without a cluster: what the
    single-process benchmarks load. Every job is created at `created_ms`; its watermark
    is that too, plus its number with `spread_watermarks` (as after a batch create)."""
    conn = open_writer(str(path))
    spec = parse_job({**job, "id": "x"}).to_spec()
    conn.execute("BEGIN")
    for start in range(0, jobs, 10_000):
        rows = []
        for i in range(start, min(jobs, start + 10_000)):
            job_id = f"{id_prefix}{i:07d}"
            rows.append((job_id, json.dumps({**spec, "id": job_id}),
                         created_ms + (i if spread_watermarks else 0), created_ms, created_ms))
        conn.executemany("INSERT INTO jobs (id, tenant, version, spec, paused, queue, "
                         "watermark_ms, created_ms, updated_ms) "
                         "VALUES (?, 'default', 1, ?, 0, 'default', ?, ?, ?)", rows)
    conn.execute("COMMIT")
    conn.close()


def iso_to_s(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def pct(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of `values`; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def machine_line() -> str:
    return (f"machine: {os.cpu_count()} cpus, Python {platform.python_version()}, "
            f"SQLite {sqlite3.sqlite_version}, {platform.system()} {platform.release()}")


@dataclass
class Received:
    """What the no-op pollers saw: (receipt wall time, scheduled_for, occurrence id) per
    lease."""

    leases: list[tuple[float, float, str]] = field(default_factory=list)
    completed: int = 0
    ahead_ids: set[str] = field(default_factory=set)
    """The runs whose lease was received before their instant (dispatch ahead): counted
    once each, though a lease released unacknowledged is granted again."""
    received_last: float = 0.0
    """When the last batch of leases arrived (wall time)."""
    answer_delay_max: float = 0.0
    """Dispatch ahead: the longest time from a lease answer's `server_now_ms` to its
    receipt here (one clock: the nodes run on this machine). A run starts that much later
    than its instant, as in `raftcron worker`, which never starts a run before the later
    of its two readings of the instant."""
    checks: list[tuple[float, float, int]] = field(default_factory=list)
    """Each check before a start (dispatch ahead): (sent, answered) wall times and the
    number of runs it covered."""

    def lags_since(self, start: float, end: float = float("inf")) -> list[float]:
        return [got - sched for got, sched, _ in self.leases if start <= sched < end]


async def noop_poller(urls: list[str], name: str, queue: str, stop: Callable[[], bool],
                      seen: Received, headers: dict[str, str], batch: int = 1000,
                      wait_s: float = 2, acknowledge: bool = False,
                      ahead: bool = False) -> None:
    """A worker whose runs do nothing: long-poll leases, complete them at once (batched).

    Completions are sent in the background while the poller asks for the next leases, as a
    worker with free slots would. Fails over between `urls` on errors and non-200 answers.
    With `acknowledge`, it leases as `raftcron worker` does: each batch is acknowledged
    (a heartbeat) first, and only the leases whose acknowledgement was accepted are
    recorded (at that moment: when a real worker would start them) and completed.
    With `ahead`, it leases as `raftcron worker` does with a clock that agrees with the
    cluster's: runs may come before their instant; they are started (recorded) in groups of
    START_GROUP_S, as the worker starts them, when the monotonic clock says the group's last
    `start_at_ms` came, counted from the answer's `server_now_ms`,
    after the check just before the start (a `before_start` heartbeat, sent as early as the
    worker sends it: `Worker.check_lead_s`), as the worker does."""
    async with httpx.AsyncClient(timeout=wait_s + 30, headers=headers) as client:
        i = 0
        pending: set[asyncio.Task[None]] = set()

        round_trip: list[float] = []  # the lease round trip measured, as the worker's

        async def post_until_ok(path: str, body: dict[str, Any], j: int) -> httpx.Response | None:
            """POST until a node answers 200, moving on to the next node after an error or
            another status; None if the run ended first."""
            while not stop():
                try:
                    r = await client.post(f"{urls[j % len(urls)]}{path}", json=body)
                    if r.status_code == 200:
                        return r
                except httpx.HTTPError:
                    pass
                j += 1
                await asyncio.sleep(0.05)
            return None

        def heartbeat_body(leases: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
            return {"worker_id": name, **extra, "attempts": [
                {"attempt_id": x["attempt_id"], "fencing_token": x["fencing_token"]}
                for x in leases]}

        async def ack(leases: list[dict[str, Any]], j: int) -> list[dict[str, Any]]:
            began = time.monotonic()
            r = await post_until_ok("/v1/heartbeats", heartbeat_body(leases), j)
            if r is None:
                return []
            sample = 2 * (time.monotonic() - began)
            round_trip[:] = [sample if not round_trip else
                             (1 - EWMA_WEIGHT) * round_trip[0] + EWMA_WEIGHT * sample]
            accepted = {x["attempt_id"] for x in r.json()["results"] if x.get("ok")}
            return [lease for lease in leases if lease["attempt_id"] in accepted]

        async def start_at_instants(leases: list[dict[str, Any]], j: int, got_mono: float,
                                    server_now: int) -> list[dict[str, Any]]:
            """As the worker does (runner._at_instants): the runs in groups of START_GROUP_S,
            each group checked `check_lead` before its first start, and started (recorded)
            together once its last start came."""
            def start_of(lease: dict[str, Any]) -> float:
                return got_mono + max(0, lease.get("start_at_ms", server_now) - server_now) / 1000

            # Runs already due on receipt start at once, unchecked; every group of the
            # others is checked, however late its check goes out. Each run's instant is
            # read now, not at its start, when every group of a herd is recorded at once.
            instant = {x["attempt_id"]: iso_to_s(x["scheduled_for"]) for x in leases}
            now_mono = time.monotonic()
            todo = sorted((x for x in leases if start_of(x) > now_mono), key=start_of)
            started = [x for x in leases if start_of(x) <= now_mono]
            seen.leases.extend((time.time(), instant[x["attempt_id"]], x["occurrence_id"])
                               for x in started)
            while todo and not stop():
                first = start_of(todo[0])
                group = [x for x in todo if start_of(x) <= first + START_GROUP_S]
                todo = todo[len(group):]
                lead = BEFORE_START_CHECK_S + min(MAX_CHECK_EXTRA_S,
                                                  round_trip[0] if round_trip else 0.0)
                await asyncio.sleep(max(0.0, first - lead - time.monotonic()))
                group = await check_before_start(group, j)
                await asyncio.sleep(max(0.0, max(map(start_of, group), default=0.0)
                                        - time.monotonic()))
                now = time.time()
                seen.leases.extend((now, instant[x["attempt_id"]], x["occurrence_id"])
                                   for x in group)
                started += group
            return started

        async def check_before_start(group: list[dict[str, Any]], j: int
                                     ) -> list[dict[str, Any]]:
            """The group less the runs the check refused (none of them, if it was never
            answered before the run ended)."""
            sent = time.time()
            r = await post_until_ok("/v1/heartbeats", heartbeat_body(group, before_start=True),
                                    j)
            if r is None:
                return []
            seen.checks.append((sent, time.time(), len(group)))
            refused = {x["attempt_id"] for x in r.json()["results"]
                       if not x.get("ok") or x.get("cancel")}
            return [x for x in group if x["attempt_id"] not in refused]

        async def complete(leases: list[dict[str, Any]], j: int, got_mono: float = 0.0,
                           server_now: int | None = None) -> None:
            if acknowledge:  # on receipt, ahead or not
                leases = await ack(leases, j)
                if server_now is None:
                    got = time.time()
                    seen.leases.extend((got, iso_to_s(lease["scheduled_for"]),
                                        lease["occurrence_id"]) for lease in leases)
                if not leases:
                    return
            if server_now is not None:
                leases = await start_at_instants(leases, j, got_mono, server_now)
                if not leases:
                    return
                # The other pollers' runs due at the same instant are started (recorded)
                # before this one builds its completions: one process plays every worker
                # here, and a herd's 33 completion bodies took ~0.3 s of its time at T.
                await asyncio.sleep(0)
            body = {"worker_id": name, "completions": [
                {"attempt_id": lease["attempt_id"], "fencing_token": lease["fencing_token"],
                 "outcome": "succeeded", "exit_code": 0, "output": ""} for lease in leases]}
            if await post_until_ok("/v1/completions", body, j) is not None:
                seen.completed += len(leases)

        while not stop():
            url = urls[i % len(urls)]
            try:
                resp = await client.post(f"{url}/v1/leases", json={
                    "worker_id": name, "queues": [queue], "max": batch, "wait_s": wait_s,
                    **({"acknowledge": True} if acknowledge else {}),
                    **({"ahead": True} if ahead else {})})
            except httpx.HTTPError:
                i += 1
                await asyncio.sleep(0.05)
                continue
            if resp.status_code != 200:
                i += 1
                await asyncio.sleep(0.05)
                continue
            got, got_mono = time.time(), time.monotonic()
            answer = resp.json()
            leases = answer["leases"]
            if not leases:
                continue
            seen.received_last = max(seen.received_last, got)
            server_now = answer.get("server_now_ms") if ahead else None
            if server_now is not None:
                seen.answer_delay_max = max(seen.answer_delay_max, got - server_now / 1000)
            if server_now is not None:
                seen.ahead_ids.update(lease["attempt_id"] for lease in leases
                                      if got < iso_to_s(lease["scheduled_for"]))
            elif not acknowledge:
                seen.leases.extend((got, iso_to_s(lease["scheduled_for"]),
                                    lease["occurrence_id"]) for lease in leases)
            task = asyncio.create_task(complete(leases, i, got_mono, server_now))
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.wait(pending, timeout=10)


def leader_first(urls: dict[str, str], leader: str) -> list[str]:
    """Every node's URL, the leader's first: pollers that start at a follower would measure
    forwarding, not the scheduler."""
    return [urls[leader], *[u for nid, u in urls.items() if nid != leader]]


async def until_answered(send: Callable[[], Awaitable[httpx.Response]], done: set[int],
                         what: str, tries: int = 30) -> httpx.Response:
    """`send()` until it answers a status in `done`, waiting 0.5 s after a 429, a 503 or no
    answer (a leader change); any other status, or `tries` failures, raise."""
    for _ in range(tries):
        try:
            r = await send()
        except httpx.TransportError:
            await asyncio.sleep(0.5)
            continue
        if r.status_code in done:
            return r
        if r.status_code not in (429, 503):
            raise RuntimeError(f"{what}: {r.status_code} {r.text[:300]}")
        await asyncio.sleep(0.5)
    raise RuntimeError(f"{what}: gave up")


async def create_jobs(url: str, headers: dict[str, str], bodies: list[dict[str, Any]],
                      concurrency: int = 32) -> float:
    """POST-create every job body concurrently; returns the seconds it took."""
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=60, headers=headers) as client:
        async def create(body: dict[str, Any]) -> None:
            async with sem:
                # A retried create that had landed answers 409: the job is there.
                await until_answered(lambda: client.post(f"{url}/v1/jobs", json=body),
                                     {201, 409}, f"creating {body['id']}", tries=20)

        t0 = time.time()
        await asyncio.gather(*(create(b) for b in bodies))
        return time.time() - t0


async def batch_create(url: str, headers: dict[str, str],
                       bodies: list[dict[str, Any]]) -> None:
    """Create `bodies` through POST /v1/jobs:batchCreate, 1,000 per request, 4 at a time."""
    async with httpx.AsyncClient(timeout=120, headers=headers) as client:
        sem = asyncio.Semaphore(4)

        async def one(chunk: list[dict[str, Any]]) -> None:
            # A retry after an unknown outcome (503) must not create twice: same key.
            key = {"Idempotency-Key": uuid.uuid4().hex}
            async with sem:
                r = await until_answered(
                    lambda: client.post(f"{url}/v1/jobs:batchCreate", json={"jobs": chunk},
                                        headers=key), {200}, "batch create")
                if r.json()["created"] != len(chunk):
                    raise RuntimeError(f"batch create: {r.text[:300]}")

        await asyncio.gather(*(one(bodies[i:i + BATCH_CREATE])
                               for i in range(0, len(bodies), BATCH_CREATE)))


async def delete_jobs(url: str, headers: dict[str, str], ids: list[str],
                      in_flight: int = 16) -> None:
    """DELETE every job of `ids` (a 404 counts as done: a retried delete that had landed)."""
    async with httpx.AsyncClient(timeout=60, headers=headers) as client:
        sem = asyncio.Semaphore(in_flight)

        async def one(job_id: str) -> None:
            async with sem:
                await until_answered(lambda: client.delete(f"{url}/v1/jobs/{job_id}"),
                                     {200, 404}, f"delete {job_id}")

        await asyncio.gather(*(one(job_id) for job_id in ids))


@dataclass
class ProcSample:
    cpu_s: float
    rss_mb: float


def proc_sample(pid: int) -> ProcSample | None:
    """CPU seconds (user+system) and resident memory of a live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None  # exited (a zombie until its parent reaps it)
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    rss_kb = next((int(line.split()[1]) for line in status.splitlines()
                   if line.startswith("VmRSS:")), None)
    return None if rss_kb is None else ProcSample(cpu, rss_kb / 1024)


def dir_mb(path: Path) -> float:
    """Bytes on disk under `path` (files only), in MB."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total / 1e6
