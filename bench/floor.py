"""The floor: raw pysyncobj on this machine, the limit raftcron's design is measured against.

    python bench/floor.py [--seconds 10] [--items 1000]

Three processes on loopback run a bare `SyncObj` with raftcron's timings (RAFT_TUNING)
whose replicated method does nothing but count. The leader process keeps up to 2,000
commands in flight and counts commit callbacks for --seconds:
  commands/s  tiny commands (16 bytes)
  items/s     commands that each carry --items claim-sized items (about 60 bytes each,
              as JSON), i.e. what one batched raftcron command replicates
both with pysyncobj's defaults (no password: no encryption) and with a cluster password
(encrypted traffic, as raftcron runs). Nothing is applied to SQLite: this is Raft alone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import machine_line  # noqa: E402
from raftcron.testing import free_port_base  # noqa: E402

IN_FLIGHT = 2000


def node_main(index: int, ports: list[int], password: str, seconds: float, payload_bytes: int,
              result_file: str) -> None:
    import logging

    from pysyncobj import SyncObj, SyncObjConf, replicated

    from raftcron.cluster.raft import RAFT_TUNING

    # Same-term resends log a harmless 'truncating already-applied' line (ARCHITECTURE §4).
    logging.getLogger("pysyncobj").setLevel(logging.CRITICAL + 1)

    tuning = {k: v for k, v in RAFT_TUNING.items() if k != "dynamicMembershipChange"}
    conf = SyncObjConf(**tuning, password=password or None)

    class Counter(SyncObj):
        def __init__(self) -> None:
            me = f"127.0.0.1:{ports[index]}"
            others = [f"127.0.0.1:{p}" for i, p in enumerate(ports) if i != index]
            super().__init__(me, others, conf)
            self.applied = 0

        @replicated
        def add(self, payload: bytes) -> int:
            self.applied += 1
            return self.applied

    obj = Counter()
    deadline = time.time() + 60
    while not obj._isReady() or obj._getLeader() is None:
        if time.time() > deadline:
            raise SystemExit("no leader")
        time.sleep(0.05)
    time.sleep(1.0)  # let every node settle; followers then just serve until killed
    if not obj._isLeader():
        time.sleep(seconds + 30)
        return
    payload = b"x" * payload_bytes
    slots = threading.Semaphore(IN_FLIGHT)
    done = [0]

    def callback(result: object, error: object) -> None:
        done[0] += 1
        slots.release()

    start = time.time()
    stop_at = start + seconds
    while time.time() < stop_at:
        slots.acquire()
        obj.add(payload, callback=callback)
    elapsed = time.time() - start
    Path(result_file).write_text(json.dumps({"commands": done[0], "seconds": elapsed}))


def measure(password: str, payload_bytes: int, seconds: float, tmp: Path) -> float:
    base = free_port_base(3)
    ports = [base + i for i in range(3)]
    results = [tmp / f"floor-{password or 'plain'}-{payload_bytes}-{i}.json" for i in range(3)]
    procs = [subprocess.Popen([sys.executable, __file__, "--node", str(i), "--ports",
                               ",".join(map(str, ports)), "--password", password,
                               "--seconds", str(seconds), "--payload", str(payload_bytes),
                               "--result", str(results[i])]) for i in range(3)]
    try:
        deadline = time.time() + seconds + 90
        while time.time() < deadline and not any(r.exists() for r in results):
            time.sleep(0.2)
        done = [json.loads(r.read_text()) for r in results if r.exists()]
        if not done:
            raise RuntimeError("no leader reported a result")
        return done[0]["commands"] / done[0]["seconds"]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def run(seconds: float, items: int, tmp: Path) -> list[tuple[str, float, float]]:
    """[(variant, commands/s, items/s)]"""
    item_bytes = 60
    rows = []
    for password in ("", "floor-secret"):
        label = "encrypted" if password else "plain"
        tiny = measure(password, 16, seconds, tmp)
        batched = measure(password, items * item_bytes, seconds, tmp)
        rows.append((f"{label}, 16 B commands", tiny, tiny))
        rows.append((f"{label}, {items} items × {item_bytes} B", batched, batched * items))
    return rows


def table(rows: list[tuple[str, float, float]]) -> str:
    lines = ["| pysyncobj floor (3 nodes, loopback) | commands/s | items/s |", "|---|---|---|"]
    lines += [f"| {name} | {cmds:,.0f} | {items:,.0f} |" for name, cmds, items in rows]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--items", type=int, default=1000)
    p.add_argument("--node", type=int, help=argparse.SUPPRESS)
    p.add_argument("--ports", help=argparse.SUPPRESS)
    p.add_argument("--password", default="", help=argparse.SUPPRESS)
    p.add_argument("--payload", type=int, default=16, help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.node is not None:
        node_main(args.node, [int(x) for x in args.ports.split(",")], args.password,
                  args.seconds, args.payload, args.result)
        return
    import tempfile

    print(machine_line())
    with tempfile.TemporaryDirectory() as tmp:
        print(table(run(args.seconds, args.items, Path(tmp))))


if __name__ == "__main__":
    main()
