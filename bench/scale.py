"""Scale: 100,000 registered jobs on three nodes; memory, snapshot size, restart times.

    python bench/scale.py [--jobs 100000]

Jobs are `H H * * *` (each once a day at a hashed time, so about 1.2 fires/s across the
cluster, leased by a no-op poller) created with POST /v1/jobs:batchCreate, 1,000 per
request. Then 5,500 consistent reads (each commits a barrier entry) push the Raft log past
pysyncobj's 5,000-entry compaction threshold, so every node has written a snapshot.
Measured:
  RSS per node              after creation, and after the restarts below
  snapshot                  size of raft.snapshot and state.db on the leader
  follower restart          SIGKILL a follower, start it: time until its /readyz is 200
  wiped follower            delete a follower's data directory, start it: time until
                            /readyz is 200 (the leader sends it the snapshot, then the log)
  whole-cluster restart     SIGKILL all three, start all three: time until a leader runs
                            its duties with all jobs loaded (/readyz 200 on the leader)
  status answers            the status page (/), its overview (GET /v1/status/jobs) and
                            the overview's search (?q= one job id, and a word every job
                            holds): median of 5 on the leader, after creation
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import batch_create, machine_line, proc_sample  # noqa: E402
from raftcron.core.tenant_policy import QUOTA_DEFAULTS  # noqa: E402
from raftcron.testing import LocalCluster, wait_until  # noqa: E402

BARRIERS = 5500


def ready(c: LocalCluster, nid: str) -> bool:
    try:
        return httpx.get(c.urls[nid] + "/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def rss(c: LocalCluster) -> dict[str, float]:
    out = {}
    for nid, proc in c.procs.items():
        s = proc_sample(proc.pid)
        if s is not None:
            out[nid] = s.rss_mb
    return out


async def barriers(url: str, headers: dict[str, str], count: int) -> None:
    sem = asyncio.Semaphore(32)
    async with httpx.AsyncClient(timeout=30, headers=headers) as client:
        async def one() -> None:
            async with sem:
                await client.get(f"{url}/v1/jobs", params={"limit": 1, "consistent": "true"})

        await asyncio.gather(*(one() for _ in range(count)))


STATUS_REQUESTS = [
    ("status page (GET /)", "/", {}),
    ("overview (GET /v1/status/jobs)", "/v1/status/jobs", {}),
    ("overview search, one job (?q=scale-000777)", "/v1/status/jobs", {"q": "scale-000777"}),
    ("overview search, every job matches (?q=scale)", "/v1/status/jobs", {"q": "scale"}),
]


def status_times(c: LocalCluster, nid: str, reps: int = 5) -> list[tuple[str, str]]:
    """Median seconds of each STATUS_REQUESTS answer (each must be 200)."""
    rows = []
    with httpx.Client(timeout=120, headers=c.auth_headers()) as client:
        for name, path, params in STATUS_REQUESTS:
            took = []
            for _ in range(reps):
                t = time.perf_counter()
                r = client.get(c.urls[nid] + path, params=params)
                took.append(time.perf_counter() - t)
                r.raise_for_status()
            rows.append((name, f"{statistics.median(took):.3f} s (median of {reps})"))
    return rows


def wait_caught_up(c: LocalCluster, timeout: float = 180) -> None:
    """Every node has applied what the leader had applied when we asked (jobs keep firing,
    so equal digests at one instant are not to be expected)."""
    leader = c.wait_leader(timeout=60)
    target = c.get(leader, "/v1/digest")["last_applied_index"]
    wait_until(lambda: all(c.get(n, "/v1/digest")["last_applied_index"] >= target
                           for n in c.procs), timeout, interval=0.5, message="caught up")


def time_until_ready(c: LocalCluster, nids: list[str], timeout: float = 300) -> float:
    t0 = time.time()
    for nid in nids:
        c.start(nid)
    wait_until(lambda: any(ready(c, n) for n in nids) and c.leader() is not None, timeout,
               interval=0.05, message="ready")
    wait_until(lambda: all(ready(c, n) for n in nids), timeout, interval=0.05,
               message="all ready")
    return time.time() - t0


class Rows(list):
    """The measured rows, each printed as it is measured: a run that fails later (an hour
    in, at a million jobs) keeps what it measured."""

    def append(self, row: tuple[str, str]) -> None:
        print(f"| {row[0]} | {row[1]} |", flush=True)
        super().append(row)

    def __iadd__(self, rows):  # type: ignore[no-untyped-def, override]
        for row in rows:
            self.append(row)
        return self


def port_base_of(root: Path) -> int | None:
    """The HTTP port of n1 in a kept cluster's config (the cluster's port base)."""
    config = root / "n1.toml"
    if not config.exists():
        return None
    for line in config.read_text().splitlines():
        if line.startswith("http_port"):
            return int(line.split("=", 1)[1])
    return None


def run(jobs: int, keep: str | None = None, reuse: bool = False) -> list[tuple[str, str]]:
    rows = Rows()
    with contextlib.ExitStack() as stack:
        tmp = keep or stack.enter_context(tempfile.TemporaryDirectory())
        c = LocalCluster(Path(tmp), port_base=port_base_of(Path(tmp)) if reuse else None)
        c.http.timeout = httpx.Timeout(600)  # a digest of a million jobs takes its time
        if reuse:  # the kept cluster of an earlier run: its jobs are there already
            try:
                return rows + measure_kept(c, jobs)
            finally:
                c.close()
        c.start()
        try:
            leader = c.wait_leader(timeout=60)
            bodies = [{"id": f"scale-{i:06d}", "queue": "scale", "target": {"shell": "true"},
                       "schedule": {"cron": "H H * * *"}} for i in range(jobs)]
            if jobs > QUOTA_DEFAULTS["max_jobs"]:  # the default tenant's quotas, raised
                r = httpx.put(f"{c.urls[leader]}/v1/tenants/default", headers=c.auth_headers(),
                              json={"max_jobs": jobs, "max_schedules": jobs}, timeout=30)
                r.raise_for_status()
            term0 = c.get(leader, "/v1/cluster")["term"]
            t0 = time.time()
            asyncio.run(batch_create(c.urls[leader], c.auth_headers(), bodies))
            rows.append(("create (batches of 1,000)", f"{jobs:,} jobs in {time.time() - t0:.1f} s "
                         f"({jobs / (time.time() - t0):,.0f} jobs/s)"))
            leader = c.wait_leader(timeout=60)
            rows.append(("elections during creation",
                         str(c.get(leader, "/v1/cluster")["term"] - term0)))
            rows += status_times(c, leader)
            asyncio.run(barriers(c.urls[leader], c.auth_headers(), BARRIERS))
            wait_caught_up(c)
            wait_until(lambda: (c.root / leader / "raft.snapshot").exists(), 120,
                       message="a snapshot on the leader")
            time.sleep(2)
            for nid, mb in rss(c).items():
                rows.append((f"RSS {nid}{' (leader)' if nid == leader else ''}", f"{mb:.0f} MB"))
            snap = (c.root / leader / "raft.snapshot").stat().st_size / 1e6
            db = sum(p.stat().st_size for p in (c.root / leader).glob("state.db*")) / 1e6
            journal = sum(p.stat().st_size
                          for p in (c.root / leader).glob("raft.journal*")) / 1e6
            rows += [("snapshot (raft.snapshot)", f"{snap:.1f} MB"),
                     ("state.db (+WAL)", f"{db:.1f} MB"), ("Raft journal", f"{journal:.1f} MB")]

            rows += follower_restarts(c, leader)
            for nid in list(c.procs):
                c.kill(nid)
            rows.append(("whole cluster (kill -9 all three → leader ticking, all ready)",
                         f"{time_until_ready(c, list(c.ids)):.2f} s"))
            wait_caught_up(c)
            time.sleep(5)
            for nid, mb in rss(c).items():
                rows.append((f"RSS {nid} after restart", f"{mb:.0f} MB"))
        finally:
            c.close()
    return rows


def follower_restarts(c: LocalCluster, leader: str, timeout: float = 300
                      ) -> list[tuple[str, str]]:
    """A follower killed and started again, then killed, wiped and started empty (the
    leader sends it the snapshot): seconds until its /readyz is 200, each."""
    follower = next(n for n in c.ids if n != leader)
    c.kill(follower)
    restart = time_until_ready(c, [follower], timeout)
    c.kill(follower)
    shutil.rmtree(c.root / follower)
    wiped = time_until_ready(c, [follower], timeout)
    return [("follower restart (kill -9 → /readyz 200)", f"{restart:.2f} s"),
            ("wiped follower (empty data dir → /readyz 200, via snapshot)", f"{wiped:.2f} s")]


def measure_kept(c: LocalCluster, jobs: int) -> Rows:
    """Start a kept cluster of `jobs` jobs from its files and measure it."""
    rows = Rows()
    rows.append(("whole cluster from its files (start all three → leader ticking, all ready)",
                 f"{time_until_ready(c, list(c.ids), timeout=900):.2f} s"))
    leader = c.wait_leader(timeout=60)
    t = time.perf_counter()
    dig = c.get(leader, "/v1/digest")
    rows.append(("GET /v1/digest (every row hashed)", f"{time.perf_counter() - t:.2f} s "
                 f"at index {dig['last_applied_index']}"))
    rows += status_times(c, leader)
    wait_caught_up(c, timeout=900)
    time.sleep(5)
    for nid, mb in rss(c).items():
        rows.append((f"RSS {nid}{' (leader)' if nid == leader else ''} after start",
                     f"{mb:.0f} MB"))
    snap = (c.root / leader / "raft.snapshot")
    if snap.exists():
        rows.append(("snapshot (raft.snapshot)", f"{snap.stat().st_size / 1e6:.1f} MB"))
    db = sum(p.stat().st_size for p in (c.root / leader).glob("state.db*")) / 1e6
    rows.append(("state.db (+WAL)", f"{db:.1f} MB"))
    rows += follower_restarts(c, leader, timeout=900)
    time.sleep(5)
    for nid, mb in rss(c).items():
        rows.append((f"RSS {nid} at the end", f"{mb:.0f} MB"))
    return rows


def table(rows: list[tuple[str, str]], jobs: int) -> str:
    lines = [f"| scale: {jobs:,} jobs | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--keep", metavar="DIR", help="run in DIR and keep it (node logs, data)")
    p.add_argument("--reuse", action="store_true",
                   help="with --keep: start the cluster kept there and measure it, "
                        "creating nothing")
    args = p.parse_args()
    if args.reuse and not args.keep:
        p.error("--reuse needs --keep DIR")
    print(machine_line())
    print(table(run(args.jobs, args.keep, args.reuse), args.jobs))


if __name__ == "__main__":
    main()
