"""The replicated-apply floor of end-to-end throughput: what one node's state machine
costs per run, and what that allows three replicas on this machine's cores.

    python bench/apply_floor.py [--jobs 1000] [--rounds 20] [--reps 5]

Every run an end-to-end cluster completes is three log entries' worth of work on every
node: its share of a Claim (the occurrence and its first attempt), of a Lease (the
attempt leased with a fencing token) and of a Complete (the attempt and occurrence ended).
This applies exactly those commands, batched as a herd gives them (`--jobs` items each),
through the codec and `StateMachine.apply_bytes` on a file-backed database with the WAL
checkpointer running, as a node does, and prints:

- the median runs/s of the whole cycle on one core, and of each command alone;
- the ceiling that puts on a cluster: all three nodes apply every entry, so three
  replicas on C cores complete at most C × (one node's rate) / 3 runs a second, before
  any Raft, HTTP, dispatch or worker time;
- the ratio of issue 36's goal (12,000 runs/s) to that ceiling.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.claim_apply import T0, job_ids, setup_machine  # noqa: E402
from bench.common import machine_line  # noqa: E402
from raftcron.core import commands as c  # noqa: E402
from raftcron.core import identity  # noqa: E402
from raftcron.core.protocol import PROTOCOL_LEVEL  # noqa: E402
from raftcron.state.db import Checkpointer  # noqa: E402

GOAL_RUNS_S = 12_000
REPLICAS = 3
STEP_MS = 1_000


def one_rep(tmp: str, rep: int, jobs: list[str], rounds: int) -> dict[str, float]:
    """Seconds spent in each command kind over `rounds` herds of `jobs`."""
    path = os.path.join(tmp, f"cycle-{rep}.db")
    sm, index = setup_machine(path, jobs, "allow")
    index += 1  # the level a current cluster speaks: completions carry start and duration
    raised = sm.apply_bytes(index, c.encode(c.SetClusterLevel(epoch=1, now_ms=T0,
                                                             level=PROTOCOL_LEVEL)))
    assert raised["ok"], raised
    checkpointer = Checkpointer(path).start()
    spent = {"claim": 0.0, "lease": 0.0, "complete": 0.0}
    try:
        for r in range(rounds):
            at = T0 + 60_000 + r * STEP_MS
            claim = c.Claim(epoch=1, now_ms=at, items=[[j, 1, at, at, "fire"] for j in jobs])
            attempts = [identity.attempt_id(identity.scheduled_occurrence_id(j, at), 1)
                        for j in jobs]
            lease = c.Lease(epoch=1, now_ms=at + 5, worker_id="w1", attempt_ids=attempts,
                            acknowledge=True)
            for kind, cmd in (("claim", claim), ("lease", lease)):
                index += 1
                t = time.perf_counter()
                result = sm.apply_bytes(index, c.encode(cmd))
                spent[kind] += time.perf_counter() - t
                assert result["ok"], result
            leases = result["leases"]
            assert len(leases) == len(jobs), len(leases)
            done = c.Complete(at + 20, "w1", [[x["attempt_id"], x["fencing_token"],
                                               "succeeded", 0, "", at + 10, 3]
                                              for x in leases])
            index += 1
            t = time.perf_counter()
            result = sm.apply_bytes(index, c.encode(done))
            spent["complete"] += time.perf_counter() - t
            assert result["ok"], result
        finished = sm.conn.execute(
            "SELECT count(*) FROM occurrences WHERE status = 'succeeded'").fetchone()[0]
        assert finished == rounds * len(jobs), finished
    finally:
        checkpointer.stop()
        sm.conn.close()
    return spent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    cores = os.cpu_count() or 1
    print(machine_line())
    jobs = job_ids(args.jobs)
    runs = args.jobs * args.rounds
    reps = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            reps.append(one_rep(tmp, rep, jobs, args.rounds))
    print(f"{args.jobs:,} runs a command, {args.rounds} herds a repetition, "
          f"{args.reps} repetitions (median runs/s, min-max)")
    for kind in ("claim", "lease", "complete"):
        rates = [runs / s[kind] for s in reps]
        print(f"  {kind:<9} alone     {statistics.median(rates):>9,.0f}   "
              f"({min(rates):,.0f}-{max(rates):,.0f})")
    cycle = [runs / sum(s.values()) for s in reps]
    one_node = statistics.median(cycle)
    print(f"  whole cycle, one node {one_node:>9,.0f}   ({min(cycle):,.0f}-{max(cycle):,.0f})")
    ceiling = cores * one_node / REPLICAS
    print(f"ceiling, {REPLICAS} replicas on {cores} cores: {cores} x {one_node:,.0f} / "
          f"{REPLICAS} = {ceiling:,.0f} runs/s (apply alone; no Raft, HTTP or dispatch)")
    print(f"goal {GOAL_RUNS_S:,} runs/s / ceiling = {GOAL_RUNS_S / ceiling:.2f}")


if __name__ == "__main__":
    main()
