"""Heavy readers beside the scheduler: lease lag and the leader's probe while clients page
through large job lists (issue 40 §4).

4,200 jobs of 16 schedules each (none due: they only make the pages large) and 50 jobs
firing every second, leased by a no-op poller as a worker would. Two phases in one run,
side by side: quiet, then 16 clients looping `GET /v1/jobs?limit=500` against the leader
with a read token. Printed for each phase: the leader's `/healthz` round trip (p50/p99, a
new connection each time), the lease lag of the every-second runs (instant → lease held,
p50/p99/max) and the pages served per second.

    python bench/list_load.py [--jobs 4200] [--seconds 20] [--readers 16]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import (  # noqa: E402
    Received,
    batch_create,
    leader_first,
    machine_line,
    noop_poller,
    pct,
)
from raftcron.core.timefmt import ms_to_iso  # noqa: E402
from raftcron.testing import LocalCluster  # noqa: E402

QUEUE = "bench"
TICKERS = 50


def big_job(i: int) -> dict:
    return {"id": f"big-{i:05d}", "queue": "idle", "target": {"shell": "true"},
            "labels": {"team": "bench", "fleet": f"f{i % 7}"},
            "schedules": [{"cron": f"{m} {h} 1 1 *", "timezone": "Europe/Berlin",
                           "name": f"s{m}-{h}"} for m, h in zip(range(16), range(16),
                                                                strict=True)]}


async def probe_loop(url: str, stop: float, out: list[float]) -> None:
    async with httpx.AsyncClient(timeout=10,
                                 limits=httpx.Limits(max_keepalive_connections=0)) as client:
        while time.time() < stop:
            t0 = time.perf_counter()
            try:
                await client.get(url + "/healthz")
                out.append(time.perf_counter() - t0)
            except httpx.HTTPError:
                out.append(10.0)
            await asyncio.sleep(0.1)


async def reader_loop(url: str, token: str, stop: float, pages: list[int]) -> None:
    async with httpx.AsyncClient(timeout=60,
                                 headers={"Authorization": f"Bearer {token}"}) as client:
        cursor = None
        while time.time() < stop:
            params = {"limit": 500, **({"cursor": cursor} if cursor else {})}
            try:
                r = await client.get(url + "/v1/jobs", params=params)
                cursor = r.json().get("next_cursor") if r.status_code == 200 else None
                pages.append(1)
            except httpx.HTTPError:
                cursor = None


async def phase(c: LocalCluster, leader: str, readers: int, seconds: int,
                read_token: str) -> dict[str, float]:
    start = time.time()
    stop = start + seconds
    seen = Received()
    probes: list[float] = []
    pages: list[int] = []
    urls = leader_first(c.urls, leader)
    await asyncio.gather(
        noop_poller(urls, "ticker", QUEUE, lambda: time.time() >= stop + 1, seen,
                    c.auth_headers(c.worker_token)),
        probe_loop(c.urls[leader], stop, probes),
        *(reader_loop(c.urls[leader], read_token, stop, pages) for _ in range(readers)))
    lags = seen.lags_since(start + 2, stop - 1)
    return {"probe_p50_ms": statistics.median(probes) * 1000,
            "probe_p99_ms": pct(probes, 0.99) * 1000,
            "lag_p50_ms": pct(lags, 0.5) * 1000, "lag_p99_ms": pct(lags, 0.99) * 1000,
            "lag_max_ms": max(lags, default=float("nan")) * 1000, "runs": len(lags),
            "pages_per_s": len(pages) / seconds}


async def measure(jobs: int, seconds: int, readers: int) -> list[tuple[str, dict]]:
    with tempfile.TemporaryDirectory() as tmp:
        c = LocalCluster(Path(tmp))
        c.start()
        try:
            leader = c.wait_leader(timeout=30)
            c.wait_serving()
            # 200 a request: 1,000 jobs of 16 schedules are past the 1 MiB body limit.
            for i in range(0, jobs, 200):
                await batch_create(c.urls[leader], c.auth_headers(),
                                   [big_job(j) for j in range(i, min(jobs, i + 200))])
            start_at = int(time.time() + 3)
            await batch_create(c.urls[leader], c.auth_headers(), [
                {"id": f"tick-{i}", "queue": QUEUE, "target": {"shell": "true"},
                 "schedule": {"cron": "* * * * * *", "start_at": ms_to_iso(start_at * 1000)}}
                for i in range(TICKERS)])
            read_token = c.create_token("read", name="bench-reader")
            await asyncio.sleep(max(0.0, start_at + 1 - time.time()))
            leader = c.wait_leader(timeout=30)
            quiet = await phase(c, leader, 0, seconds, read_token)
            loaded = await phase(c, leader, readers, seconds, read_token)
            return [("quiet", quiet), (f"{readers} readers", loaded)]
        finally:
            c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=4200)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--readers", type=int, default=16)
    args = ap.parse_args()
    print(machine_line())
    print(f"$ python bench/list_load.py --jobs {args.jobs} --seconds {args.seconds} "
          f"--readers {args.readers}")
    print(f"{args.jobs} jobs x 16 schedules; {TICKERS} every-second jobs leased by a no-op "
          "poller; readers loop GET /v1/jobs?limit=500 on the leader")
    rows = asyncio.run(measure(args.jobs, args.seconds, args.readers))
    print(f"{'phase':<12} {'probe p50':>10} {'probe p99':>10} {'lag p50':>9} {'lag p99':>9} "
          f"{'lag max':>9} {'runs':>6} {'pages/s':>8}")
    for name, r in rows:
        print(f"{name:<12} {r['probe_p50_ms']:>8.1f}ms {r['probe_p99_ms']:>8.1f}ms "
              f"{r['lag_p50_ms']:>7.0f}ms {r['lag_p99_ms']:>7.0f}ms {r['lag_max_ms']:>7.0f}ms "
              f"{r['runs']:>6} {r['pages_per_s']:>8.1f}")
    quiet, loaded = rows[0][1], rows[1][1]
    probe = loaded["probe_p99_ms"] / quiet["probe_p99_ms"]
    lag = loaded["lag_p99_ms"] / max(quiet["lag_p99_ms"], 1)
    print(f"ratio under load / quiet: probe p99 {probe:.1f}x, lease lag p99 {lag:.1f}x")


if __name__ == "__main__":
    main()
