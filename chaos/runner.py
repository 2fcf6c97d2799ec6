"""`python -m chaos run`: set up namespaces, run the harness inside the client
namespace, always tear everything down, then check the result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from chaos.backup_check import backup_restore_check
from chaos.digest_mark import Marker
from chaos.history import History
from chaos.membership_step import replace_follower
from chaos.nemesis import Nemesis, plan
from chaos.netns import Netns
from chaos.observer import Observer
from chaos.procs import RETENTION_S, Processes
from chaos.reads import (  # noqa: F401 (_get, read_attempts: tests)
    _get,
    read_attempts,
    read_attempts_checked,
    read_node,
)
from chaos.workload import DST_LEAD_S, DST_TRANSITION_UTC, Driver
from raftcron.core.protocol import PROTOCOL_LEVEL

QUIET_S = 6.0  # >= 3 x the election timeout (0.3-0.6 s) with a wide margin
CI_FAULT_DEADLINE_S = 280.0  # leaves room for the final heal, quiet window and reads
PROFILES = {"ci": {"duration": 300.0, "drop_p": 0.08},
            # By hand: 30 minutes of random fault pairs, two overlapping (chaos/nemesis.py).
            "long": {"duration": 1800.0, "drop_p": 0.05},
            "soak": {"duration": 3600.0, "drop_p": 0.05}}


def run_outer(profile: str, seed: int, duration: float | None, out: Path) -> int:
    """Create the namespaces, re-run this command inside the client namespace, clean up."""
    out.mkdir(parents=True, exist_ok=True)
    netns = Netns(prefix=f"rc{os.getpid() % 100000}")
    print(f"chaos: seed {seed}, profile {profile}, output {out}", flush=True)
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: Any) -> None:
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        netns.setup()
        env = dict(os.environ, CHAOS_INSIDE="1", CHAOS_NETNS_PREFIX=netns.prefix)
        args = [sys.executable, "-m", "chaos", "run", "--profile", profile, "--seed", str(seed),
                "--out", str(out), "--no-check"]
        if duration is not None:
            args += ["--duration", str(duration)]
        child = subprocess.Popen(["ip", "netns", "exec", netns.client, *args], env=env)
        rc = child.wait()
    finally:
        netns.teardown()
        for s, h in old.items():
            signal.signal(s, h)
    if rc != 0:
        print(f"chaos: harness exited with {rc}", file=sys.stderr)
        return rc
    from chaos.checker import check_dir

    summary = check_dir(out)
    print(json.dumps(summary["verdict"], indent=2))
    print(f"chaos: report in {out / 'report.md'}")
    return 0 if summary["verdict"]["valid"] else 1


def run_inner(profile: str, seed: int, duration: float | None, out: Path) -> int:
    prefix = os.environ["CHAOS_NETNS_PREFIX"]
    netns = Netns(prefix=prefix)
    cfg = PROFILES[profile]
    budget = duration if duration is not None else cfg["duration"]
    # Every node (and the sink's cluster-time column) runs this far from real time, so the
    # run crosses New York's fall-back fold DST_LEAD_S after the cluster starts.
    start_at = DST_TRANSITION_UTC.timestamp() - DST_LEAD_S - 15
    base = start_at - time.time()
    history = History(out / "history.jsonl", seed, base)
    procs = Processes(out, netns, history, base, spares=1)
    nemesis = Nemesis(procs, netns, history)
    nemesis.base_drop_p = cfg["drop_p"]
    stop = threading.Event()
    monitor_stop = threading.Event()
    meta: dict[str, Any] = {"seed": seed, "profile": profile, "base_offset_s": base,
                            "dst_transition": DST_TRANSITION_UTC.isoformat(),
                            "netns_prefix": prefix, "started_wall": time.time(),
                            "retention_s": RETENTION_S}

    def on_signal(signum: int, _frame: Any) -> None:
        stop.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    driver: Driver | None = None
    observer: Observer | None = None
    marker: Marker | None = None
    t0 = time.monotonic()
    try:
        history.write("harness", "note", "setup", base_offset_s=base, profile=profile)
        for nid in procs.ids:
            pid = procs.start_node(nid)
            history.write("harness", "note", "node-start", node=nid, pid=pid)
        procs.start_aux(seed, cfg["drop_p"])
        leader = procs.wait_leader(60)
        if leader is None:
            raise RuntimeError("no leader elected")
        if not procs.wait_cluster_level(leader, PROTOCOL_LEVEL):
            raise RuntimeError(f"the cluster did not commit protocol level {PROTOCOL_LEVEL}")
        history.write("harness", "note", "leader", node=leader)
        procs.start_worker("w1")
        procs.start_worker("w2")
        procs.start_worker("w3-proxied", procs.proxy_urls())
        monitor = threading.Thread(target=_monitor, args=(procs, history, monitor_stop),
                                   daemon=True)
        monitor.start()
        driver = Driver(procs, history, seed, base)
        driver.create_jobs()
        meta["jobs_created_cluster_wall"] = time.time() + base
        driver.start()
        observer = Observer(procs, out, base)
        observer.start()
        marker = Marker(procs, history)
        marker.start()
        schedule = plan(seed, profile, budget)
        history.write("harness", "note", "plan", kinds=[k for p in schedule for k in p.kinds()],
                      durations=[round(p.duration_s, 3) for p in schedule],
                      pairs=[p.kinds() for p in schedule if p.partner])
        print(f"chaos: {len(schedule)} faults planned: {[p.kinds() for p in schedule]}",
              flush=True)
        time.sleep(5)
        backup_at = len(schedule) // 2  # one backup -> restore check, mid-run
        # One membership change, about a third into the faults and inside a fault that
        # leaves the nodes' quorum alone (a worker's): later faults (and the backup check)
        # then hit the fresh node as well. Scheduled, not drawn: it always runs.
        membership_at = membership_host(schedule)
        # The deletable job goes inside another worker fault's window: the nodes answer
        # then, so the deletion is acknowledged inside it.
        delete_at = next((i for i, p in enumerate(schedule)
                          if p.kind in MEMBERSHIP_HOSTS and i != membership_at), backup_at + 1)
        for i, p in enumerate(schedule):
            if i == backup_at and not stop.is_set():
                print(f"chaos: +{time.monotonic() - t0:6.1f}s backup -> restore check",
                      flush=True)
                backup_restore_check(procs, history, out)
            # long and soak plans are sized to their budget (nemesis.plan): every planned
            # fault runs, since the checker calls a planned fault that never ran a violation.
            if stop.is_set():
                break
            if profile == "ci" and time.monotonic() - t0 > CI_FAULT_DEADLINE_S:
                # Recorded as a nemesis event: the checker calls the run INVALID
                # (fault_not_run), since a planned fault that never ran proves nothing.
                history.write("nemesis", "skipped", p.kind, reason="ci-deadline")
                print(f"chaos: ci deadline reached, {p.kind} skipped", flush=True)
                continue
            print(f"chaos: +{time.monotonic() - t0:6.1f}s {' + '.join(p.kinds())} "
                  f"({p.duration_s:.1f}s)", flush=True)
            fault = threading.Thread(target=nemesis.run_planned, args=(p, stop),
                                     name=f"fault-{p.kind}")
            fault.start()
            # Client operations inside the window: pause/resume, cancel, delete.
            ops = threading.Thread(target=_window_ops, args=(driver, i, i == delete_at, stop),
                                   name="window-ops", daemon=True)
            ops.start()
            if i == membership_at and not stop.is_set():
                stop.wait(WINDOW_OPS_AFTER_S)
                print(f"chaos: +{time.monotonic() - t0:6.1f}s membership inside {p.kind}: "
                      "remove a follower, add a fresh node", flush=True)
                replace_follower(procs, history, out)
            fault.join()
            ops.join(WINDOW_OPS_TIMEOUT_S)
            procs.wait_leader(20)
            stop.wait(p.gap_s)
        marker.close()  # before the final heal: the final barrier compares the end
        history.write("harness", "note", "final-heal-begin")
        healed = nemesis.heal_all()
        history.write("nemesis", "stop", "final-heal", **healed)
        driver.stop()
        procs.wait_leader(30)
        history.write("harness", "note", "quiet-begin", quiet_s=QUIET_S)
        time.sleep(QUIET_S)
        meta["final_reads_cluster_wall"] = time.time() + base
        history.write("harness", "note", "final-reads-begin")
        monitor_stop.set()
        # The workers' leases and completions are most of the log's entries: stopped for
        # the final reads, the nodes' applied indexes move slowly enough to meet at one
        # index for the digest barrier (on a loaded machine, 90 s of sampling at 15
        # entries/s found none). The ticker, sweeper and retention still run.
        paused = procs.pause_workers()
        history.write("harness", "note", "workers-paused", pids=paused)
        final_reads(procs, history, out)
        # The observer ran through the final reads: retention prunes while they run, and
        # every node's horizon is the end of its own read.
        observer.close()
        history.write("harness", "note", "done", elapsed_s=round(time.monotonic() - t0, 1))
        meta["elapsed_s"] = time.monotonic() - t0
        meta["driver_counts"] = driver.counts
        return 0
    except KeyboardInterrupt:
        history.write("harness", "note", "interrupted")
        return 130
    finally:
        monitor_stop.set()
        if driver is not None:
            driver.stop_event.set()
        if observer is not None:
            observer.stop.set()
        if marker is not None:
            marker.stop.set()
        try:
            nemesis.heal_all() if not stop.is_set() else nemesis._resume()
        except Exception:
            pass
        procs.stop_all()
        (out / "meta.json").write_text(json.dumps(meta, indent=2))
        history.close()


# Faults that leave the nodes' quorum alone: a membership change runs inside one.
MEMBERSHIP_HOSTS = ("worker-pause", "worker-crash", "ack-loss")
WINDOW_OPS_AFTER_S = 1.0
WINDOW_OPS_TIMEOUT_S = 30.0


def membership_host(schedule: list[Any]) -> int:
    """The fault the membership change runs inside: the first worker fault from a third
    into the schedule on (else the last one before it; else, with none planned, a third
    in)."""
    third = len(schedule) // 3
    hosts = [i for i, p in enumerate(schedule) if p.kind in MEMBERSHIP_HOSTS]
    later = [i for i in hosts if i >= third]
    return later[0] if later else (hosts[-1] if hosts else third)


def _window_ops(driver: Driver, index: int, delete: bool, stop: threading.Event) -> None:
    if stop.wait(WINDOW_OPS_AFTER_S):
        return
    try:
        driver.window_ops(index, delete)
    except Exception as e:  # the harness must survive anything a fault causes
        driver.history.write("client", "note", "driver-error", error=repr(e))


def _monitor(procs: Processes, history: History, stop: threading.Event) -> None:
    """Sample every node's view of the cluster twice a second (term inflation, roles)."""
    while not stop.is_set():
        for nid in procs.ids:
            v = procs.view(nid, timeout=0.4)
            if v is not None:
                history.write("monitor", "observe", "cluster", node=nid,
                              pid=procs.node_pid(nid), role=v.get("role"), term=v.get("term"),
                              epoch=v.get("epoch"), leader=v.get("leader_id"),
                              applied=v.get("last_applied_index"),
                              commit=v.get("commit_index"),
                              clock_blocked=v.get("clock_blocked"))
        stop.wait(0.5)


def sample_digests(procs: Processes, http: httpx.Client,
                   timeout_s: float = 90.0) -> dict[str, list[dict[str, Any]]]:
    """Read every node's (applied index, digest) many times, all nodes at once, until one
    index has been seen on every node. The leader keeps ticking while we read, so waiting
    for the nodes to stand still at one index would compare whatever index each happens to
    be at; sampling finds a barrier index that every node reported itself. A node that
    comes back from the last fault may still be catching up (hundreds of entries behind,
    then a snapshot that skips indexes) and answer digests slowly meanwhile: the wait is
    long enough for it to catch up, and ends as soon as one index is common."""
    from concurrent.futures import ThreadPoolExecutor

    samples: dict[str, list[dict[str, Any]]] = {nid: [] for nid in procs.ids}

    def one(nid: str) -> tuple[str, Any]:
        try:
            r = http.get(procs.urls[nid] + "/v1/digest", timeout=2)
            return nid, r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return nid, None

    deadline = time.monotonic() + timeout_s
    with ThreadPoolExecutor(len(procs.ids)) as pool:
        while time.monotonic() < deadline:
            for nid, d in pool.map(one, procs.ids):
                if d and (not samples[nid]
                          or samples[nid][-1]["last_applied_index"] != d["last_applied_index"]):
                    samples[nid].append({"last_applied_index": d["last_applied_index"],
                                         "digest": d["digest"]})
            if barrier_index(samples) is not None:
                break
            time.sleep(0.02)
    return samples


def barrier_index(samples: dict[str, list[dict[str, Any]]]) -> int | None:
    """The highest applied index that every node reported a digest for, or None."""
    sets = [{s["last_applied_index"] for s in lst} for lst in samples.values()]
    common = set.intersection(*sets) if sets and all(sets) else set()
    return max(common) if common else None


def barrier_digests(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    idx = barrier_index(samples)
    if idx is None:
        return {}
    return {nid: next(s for s in lst if s["last_applied_index"] == idx)
            for nid, lst in samples.items()}


def final_reads(procs: Processes, history: History, out: Path) -> None:
    """After the quiet window: digests, cluster views, jobs and every occurrence from each
    node, and each occurrence's attempts (from every node that answers)."""
    http = httpx.Client(timeout=10, headers=procs.auth_headers())
    samples = sample_digests(procs, http)
    final: dict[str, Any] = {"digests": barrier_digests(samples), "digest_samples": samples,
                             "nodes": {}}
    for nid in procs.ids:
        node = read_node(http, procs.urls[nid])
        final["nodes"][nid] = node
        history.write("harness", "note", "final-read", node=nid, jobs=len(node["jobs"]),
                      occurrences=len(node["occurrences"]), digest=final["digests"].get(nid))
    # Attempts: every occurrence that ever had one, from every node, the nodes at once
    # (each node serves its own reads: one after another, this was 35 s of every run).
    from concurrent.futures import ThreadPoolExecutor

    def attempts_of(nid: str) -> tuple[dict[str, Any], list[str]]:
        return read_attempts_checked(http, procs.urls[nid], [
            o["id"] for o in final["nodes"][nid]["occurrences"] if o["attempts"]])

    with ThreadPoolExecutor(len(final["nodes"]) or 1) as pool:
        reads = dict(zip(final["nodes"], pool.map(attempts_of, final["nodes"]), strict=True))
    # A failed read is None in `attempts`; one of an occurrence pruned meanwhile (404) is
    # None too, and named in `attempts_gone`: the checker calls the others missing.
    final["attempts"] = {nid: r[0] for nid, r in reads.items()}
    final["attempts_gone"] = {nid: r[1] for nid, r in reads.items()}
    final["read_at_wall"] = time.time()
    (out / "final.json").write_text(json.dumps(final))
    http.close()


def now_iso() -> str:
    return datetime.now(UTC).isoformat()
