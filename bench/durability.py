"""Cost of the durable journal: three real node processes, fsync before send on or off.

    python bench/durability.py [--commands 2000] [--reps 3]

Each run starts a fresh three-node cluster (pysyncobj tuned as the product runs it, file
journal, the SQLite state machine), then measures, on the leader, (a) sequential
propose→applied latency of small commands and (b) pipelined throughput of small commands.
Prints medians side by side and the ratio.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from raftcron.cluster.raft import RaftNode  # noqa: E402
from raftcron.core.commands import Barrier, encode  # noqa: E402
from raftcron.state.db import open_writer  # noqa: E402
from raftcron.state.machine import StateMachine  # noqa: E402

SECRET = "bench-secret-0123456789"


def node_main(addr: str, peers: list[str], data: str, durable: bool, q: mp.Queue,
              commands: int, finished: Any) -> None:
    os.makedirs(data, exist_ok=True)
    lock = threading.Lock()
    machine = StateMachine(open_writer(os.path.join(data, "state.db")))
    extra = {"appendEntriesUseBatch": False} if os.environ.get("BENCH_NO_BATCH") else None
    raft = RaftNode(addr, peers, machine, data, SECRET, lock, extra, durable=durable)
    deadline = time.time() + 20
    while time.time() < deadline and not raft._isLeader() and raft._getLeader() is None:
        time.sleep(0.05)
    time.sleep(1.0)
    if raft._isLeader():
        lat = []
        for i in range(200):
            t = time.perf_counter()
            raft.submit(encode(Barrier(f"s{i}")), sync=True, timeout=10)
            lat.append(time.perf_counter() - t)
        done = threading.Event()
        left = [commands]

        def cb(res: object, err: int) -> None:
            left[0] -= 1
            if left[0] == 0:
                done.set()

        t = time.perf_counter()
        for i in range(commands):
            raft.submit(encode(Barrier(f"p{i}")), callback=cb)
        done.wait(60)
        thr = commands / (time.perf_counter() - t)
        syncs = raft.journal_syncer.syncs if raft.journal_syncer else 0
        q.put((statistics.median(lat) * 1000, thr, syncs))
        finished.set()
    finished.wait(180)
    time.sleep(0.5)
    raft.destroy()


def run(durable: bool, commands: int) -> tuple[float, float, int]:
    ports = [30000 + (int.from_bytes(os.urandom(2), "big") % 20000) + i for i in range(3)]
    addrs = [f"127.0.0.1:{p}" for p in ports]
    q: mp.Queue = mp.Queue()
    finished = mp.Event()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [mp.Process(target=node_main, args=(
            a, [b for b in addrs if b != a], os.path.join(tmp, f"n{i}"), durable, q, commands,
            finished))
            for i, a in enumerate(addrs)]
        for p in procs:
            p.start()
        result = q.get(timeout=120)
        for p in procs:
            p.join(30)
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    rows = {True: [], False: []}
    for _ in range(args.reps):
        for durable in (False, True):
            rows[durable].append(run(durable, args.commands))
    print(f"machine: {os.cpu_count()} cpus; {args.reps} runs each, medians; "
          f"disk of {tempfile.gettempdir()}")
    print("| journal | sequential latency | pipelined cmds/s | journal syncs |")
    print("|---|---|---|---|")
    med = {}
    for durable in (False, True):
        lat = statistics.median(r[0] for r in rows[durable])
        thr = statistics.median(r[1] for r in rows[durable])
        syncs = statistics.median(r[2] for r in rows[durable])
        med[durable] = (lat, thr)
        name = "fsync before send" if durable else "pysyncobj default (no fsync)"
        print(f"| {name} | {lat:.1f} ms | {thr:,.0f} | {syncs:,.0f} |")
    print(f"ratio durable/default: latency ×{med[True][0] / med[False][0]:.2f}, "
          f"throughput ×{med[True][1] / med[False][1]:.2f}")


if __name__ == "__main__":
    main()
