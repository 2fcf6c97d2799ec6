"""Soak: a three-node cluster with 10,000 jobs for an hour; memory, disk and fire lag.

    python bench/soak.py [--jobs 10000] [--minutes 60] [--retention 10m] [--sample-s 30]
                         [--out bench/results]

Every job is `H * * * * *` (a hashed second of every minute), so the cluster fires
jobs/60 runs per second, spread over the minute. A no-op worker in this process leases
and completes every run (batched), so the figures measure the scheduler. History older
than --retention is pruned by the replicated Prune command while the soak runs, and the
Raft journal is compacted into snapshots, so disk should level off once the first
retention period has passed; RSS should stay flat.

Every --sample-s it records, per node, resident memory, CPU use since the last sample and
the size of its data directory (state DB + WAL + Raft journal + snapshots), the number of
occurrence rows, and the lag (nominal instant → worker holds the lease) of the runs
received in that window. Writes soak.md (table + summary) and soak.png to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import (  # noqa: E402
    Received,
    batch_create,
    delete_jobs,
    dir_mb,
    leader_first,
    machine_line,
    noop_poller,
    pct,
    proc_sample,
)
from raftcron.testing import LocalCluster, compare_at_mark  # noqa: E402

QUEUE = "soak"


@dataclass
class Sample:
    t_s: float
    rss_mb: dict[str, float]
    cpu_pct: dict[str, float]
    disk_mb: dict[str, float]
    occurrences: int
    runs: int
    lag_p50_ms: float
    lag_p99_ms: float
    lag_max_ms: float


def occurrence_rows(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute("SELECT count(*) FROM occurrences").fetchone()[0]
    except sqlite3.Error:
        return -1
    finally:
        conn.close()


async def sampler(c: LocalCluster, seen: Received, t0: float, period: float,
                  stop_at: float, samples: list[Sample]) -> None:
    last_cpu = {nid: proc_sample(p.pid) for nid, p in c.procs.items()}
    last_t = time.time()
    last_n = 0
    while time.time() < stop_at:
        await asyncio.sleep(min(period, max(0.0, stop_at - time.time())))
        now = time.time()
        rss, cpu, disk = {}, {}, {}
        for nid, proc in c.procs.items():
            s = proc_sample(proc.pid)
            prev = last_cpu.get(nid)
            if s is None:
                print(f"node {nid} exited with {proc.poll()}: see {c.root / nid}.log",
                      flush=True)
                continue
            rss[nid] = s.rss_mb
            cpu[nid] = 100 * (s.cpu_s - prev.cpu_s) / (now - last_t) if prev else float("nan")
            last_cpu[nid] = s
            disk[nid] = dir_mb(c.root / nid)
        window = [got - sched for got, sched, _ in seen.leases[last_n:]]
        last_n = len(seen.leases)
        last_t = now
        sample = Sample(
            t_s=now - t0, rss_mb=rss, cpu_pct=cpu, disk_mb=disk,
            occurrences=occurrence_rows(c.root / c.ids[0] / "state.db"),
            runs=len(window), lag_p50_ms=pct(window, 0.5) * 1000,
            lag_p99_ms=pct(window, 0.99) * 1000,
            lag_max_ms=max(window) * 1000 if window else float("nan"),
        )
        samples.append(sample)
        print(f"[{sample.t_s / 60:5.1f} min] runs {sample.runs:6d}  lag p50 "
              f"{sample.lag_p50_ms:6.0f} p99 {sample.lag_p99_ms:6.0f} ms  rss "
              + " ".join(f"{n}={v:.0f}" for n, v in rss.items()) + " MB  disk "
              + " ".join(f"{n}={v:.0f}" for n, v in disk.items()) + " MB  cpu "
              + " ".join(f"{n}={v:.0f}%" for n, v in cpu.items())
              + f"  occ rows {sample.occurrences}", flush=True)


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def report(args: argparse.Namespace, samples: list[Sample], seen: Received,
           t0: float, created_s: float, ids: list[str], converged: str, epochs: int) -> str:
    seconds = args.minutes * 60
    lines = [
        f"$ python bench/soak.py --jobs {args.jobs} --minutes {args.minutes} "
        f"--retention {args.retention} --name {args.name}",
        "",
        machine_line(),
        f"{args.jobs} jobs `H * * * * *` ({args.jobs / 60:.0f} runs/s), {args.minutes} min, "
        f"retention {args.retention}; jobs created in {created_s:.0f} s",
        "",
        "| t (min) | runs | lag p50 ms | lag p99 ms | lag max ms | occurrence rows | "
        + " | ".join(f"{n} RSS MB" for n in ids) + " | "
        + " | ".join(f"{n} disk MB" for n in ids) + " | "
        + " | ".join(f"{n} CPU %" for n in ids) + " |",
        "|" + "---|" * (6 + 3 * len(ids)),
    ]
    for s in samples:
        lines.append(
            f"| {s.t_s / 60:.1f} | {s.runs} | {s.lag_p50_ms:.0f} | {s.lag_p99_ms:.0f} | "
            f"{s.lag_max_ms:.0f} | {s.occurrences} | "
            + " | ".join(f"{s.rss_mb.get(n, float('nan')):.0f}" for n in ids) + " | "
            + " | ".join(f"{s.disk_mb.get(n, float('nan')):.0f}" for n in ids) + " | "
            + " | ".join(f"{s.cpu_pct.get(n, float('nan')):.0f}" for n in ids) + " |")

    def window(lo: float, hi: float) -> list[Sample]:
        return [s for s in samples if lo <= s.t_s < hi]

    ret_s = args.retention_s
    early = window(ret_s, ret_s + 600)          # the first 10 min after retention kicks in
    late = window(seconds - 600, seconds + 60)  # the last 10 min
    lines += ["", "| summary | value |", "|---|---|"]
    for n in ids:
        e = mean([s.rss_mb[n] for s in early if n in s.rss_mb])
        la = mean([s.rss_mb[n] for s in late if n in s.rss_mb])
        lines.append(f"| {n} RSS mean, first 10 min after retention → last 10 min | "
                     f"{e:.0f} → {la:.0f} MB ({la - e:+.0f} MB) |")
    for n in ids:
        e = mean([s.disk_mb[n] for s in early if n in s.disk_mb])
        la = mean([s.disk_mb[n] for s in late if n in s.disk_mb])
        peak = max((s.disk_mb.get(n, 0) for s in samples), default=float("nan"))
        lines.append(f"| {n} disk mean, first 10 min after retention → last 10 min (peak) | "
                     f"{e:.0f} → {la:.0f} MB (peak {peak:.0f}) |")
    for n in ids:
        lines.append(f"| {n} CPU mean | "
                     f"{mean([s.cpu_pct[n] for s in samples if n in s.cpu_pct]):.0f} % |")
    all_lags = seen.lags_since(t0, t0 + seconds)
    expected = args.jobs * seconds / 60
    lines += [
        f"| runs due in the soak and leased / expected | {len(all_lags)} / {expected:.0f} |",
        f"| runs completed | {seen.completed} |",
        f"| fire lag p50 / p99 / max, whole soak | {pct(all_lags, 0.5) * 1000:.0f} / "
        f"{pct(all_lags, 0.99) * 1000:.0f} / {max(all_lags, default=float('nan')) * 1000:.0f}"
        " ms |",
    ]
    first10 = seen.lags_since(t0 + 60, t0 + 660)
    lines.append(f"| fire lag p50 / p99 / max, minutes 1–11 | {pct(first10, 0.5) * 1000:.0f} / "
                 f"{pct(first10, 0.99) * 1000:.0f} / "
                 f"{max(first10, default=float('nan')) * 1000:.0f} ms |")
    lines.append(f"| new leader epochs during the run (elections won) | {epochs} |")
    lines.append(f"| node digests equal at the end (every job deleted first) | {converged} |")
    return "\n".join(lines) + "\n"


def plot(samples: list[Sample], ids: list[str], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s.t_s / 60 for s in samples]
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    for n in ids:
        axes[0].plot(t, [s.rss_mb.get(n) for s in samples], label=n)
        axes[1].plot(t, [s.disk_mb.get(n) for s in samples], label=n)
    axes[0].set_ylabel("RSS (MB)")
    axes[1].set_ylabel("data dir (MB)")
    axes[2].plot(t, [s.lag_p50_ms for s in samples], label="p50")
    axes[2].plot(t, [s.lag_p99_ms for s in samples], label="p99")
    axes[2].set_ylabel("fire lag (ms)")
    axes[2].set_yscale("log")
    axes[2].set_xlabel("minutes")
    for ax in axes:
        ax.legend(loc="upper left")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


async def run(args: argparse.Namespace) -> str:
    from raftcron.core.timefmt import parse_duration

    args.retention_s = parse_duration(args.retention) or 0.0
    os.environ["RAFTCRON_RETENTION"] = args.retention
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        c = LocalCluster(root)
        c.start()
        try:
            leader = c.wait_leader(timeout=30)
            bodies = [{"id": f"soak-{i:05d}", "schedule": {"cron": "H * * * * *"},
                       "queue": QUEUE, "target": {"shell": "true"}} for i in range(args.jobs)]
            t_create = time.time()
            await batch_create(c.urls[leader], c.auth_headers(), bodies)
            created_s = time.time() - t_create
            print(f"created {args.jobs} jobs in {created_s:.0f} s", flush=True)
            epoch_start = max((c.cluster_view(n) or {}).get("epoch") or 0 for n in c.ids)
            seen = Received()
            t0 = time.time()
            stop_at = t0 + args.minutes * 60
            samples: list[Sample] = []
            urls = leader_first(c.urls, leader)
            worker = c.auth_headers(c.worker_token)
            await asyncio.gather(
                sampler(c, seen, t0, args.sample_s, stop_at, samples),
                *(noop_poller(urls, f"soak-w{i}", QUEUE, lambda: time.time() >= stop_at,
                              seen, worker) for i in range(args.pollers)),
            )
            # Every job is deleted first, then the nodes are compared at one digest mark
            # (a barrier entry each node digests at its exact index, chaos.digest_mark):
            # the leader commits a clock confirmation every second, and with a state this
            # large the nodes are never caught at one applied index by /v1/digest.
            try:
                await delete_jobs(c.urls[c.wait_leader(timeout=30)], c.auth_headers(),
                                  [body["id"] for body in bodies])
                converged = compared_at_mark(c)
            except Exception as e:  # the samples are written all the same
                converged = f"NO ({e})"
            epochs = max((c.cluster_view(n) or {}).get("epoch") or 0 for n in c.ids) - epoch_start
            text = report(args, samples, seen, t0, created_s, c.ids, converged, epochs)
            print(text)
            (out / f"{args.name}.md").write_text(text)
            (out / f"{args.name}.json").write_text(json.dumps([s.__dict__ for s in samples]))
            plot(samples, c.ids, out / f"{args.name}.png",
                 f"raftcron {args.name}: 3 nodes, {args.jobs:,} jobs, no-op worker")
            return text
        finally:
            c.close()


def compared_at_mark(c: LocalCluster) -> str:
    """"yes (index I)" when every node's digest at one fresh digest mark is the same."""
    out = compare_at_mark(c.http, c.urls[c.wait_leader(timeout=30)], c.urls, timeout_s=120)
    if "error" in out:
        return f"NO ({out['error']})"
    digests = out["digests"]
    if any("error" in d for d in digests.values()):
        return f"NO ({digests})"
    if len({d["digest"] for d in digests.values()}) != 1:
        return f"NO (digests differ at index {out['index']}: {digests})"
    return f"yes (all {len(digests)} at index {out['index']})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--retention", default="10m")
    p.add_argument("--sample-s", type=float, default=30)
    p.add_argument("--pollers", type=int, default=2)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    p.add_argument("--name", default="soak", help="file names of the results: NAME.md/.png")
    p.add_argument("--keep", help="run the cluster in this directory and keep it (logs)")
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
