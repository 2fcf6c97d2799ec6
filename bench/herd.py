"""The midnight herd: N jobs due in the same second, raftcron beside APScheduler 3.

    python bench/herd.py [--sizes 100,1000,10000,33000] [--jitter-s 10] [--max-pollers 16]
                         [--modes ahead,at-instant] [--repeat 1]

raftcron: a fresh three-node cluster per run; N jobs (created in batches of 1,000 well
before the instant) whose cron names one second, `S M H D Mo *`, so all N are due at that
instant T. No-op pollers (in this process, or in --poller-processes K processes of their
own) lease (1,000 per call), acknowledge each batch on
receipt as `raftcron worker` does (not with --no-acknowledge), and complete at once: one
poller per 1,000 jobs of the herd (at least 4, at most --max-pollers), as a deployment
expecting a herd runs enough worker slots for it.
  lease lag   worker receipt of the lease − T (with jitter: − T − the job's jitter offset,
              the time the run was meant to start); mode `ahead` (dispatch ahead: the
              nodes get `lease_ahead_s = 2`, and the pollers ask, as `raftcron worker`
              does), each run's lag is its start − T, the start being when the poller's
              monotonic clock says the lease's start_at_ms came (after the check before
              the start), as the worker starts it; mode `at-instant`: as before
              dispatch ahead, receipt − T
  checks      mode `ahead`: when the last check before a start was answered, − T (a run
              starts at its instant or at its check's answer, whichever is later)
  commit lag  the occurrence's claim stamp (`created_at`, the leader's clock when it
              proposed the claim) − T; negative: claimed ahead of the instant. Every one is
              committed before its lease, which is granted only after the commit.
APScheduler 3.11 (AsyncIOScheduler, memory job store, one process, the same machine right
after): N jobs with a DateTrigger at T; lag = job function start − T.
With --repeat R, each system runs R times, alternating, and the table shows the median of
each figure over the R runs (the ratio: of the median p99s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import (  # noqa: E402
    batch_create,
    iso_to_s,
    leader_first,
    machine_line,
    pct,
)
from bench.poller_procs import PollerPlan, run_pollers  # noqa: E402
from raftcron.core.ahead import herd_claim_lead_ms  # noqa: E402
from raftcron.core.schedule import jitter_offset_ms  # noqa: E402
from raftcron.core.tenant_policy import QUOTA_DEFAULTS  # noqa: E402
from raftcron.leader.planner import HERD_LOOKAHEAD_MS  # noqa: E402
from raftcron.testing import LocalCluster  # noqa: E402

QUEUE = "herd"
BATCH = 1000  # calibration batch size
LEAD_S = 15.0  # the herd is due this long after the last job was created, at least


def lead_s(n: int, herd_max_s: float | None) -> float:
    """How long after its last job was created the herd is due: long enough for the
    leader to claim it as early as it claims a herd of that size (a real herd's jobs exist
    long before its instant)."""
    max_ms = int((herd_max_s or 0) * 1000)
    return max(LEAD_S, herd_claim_lead_ms(n, HERD_LOOKAHEAD_MS, max_ms) / 1000 + 5)
# Mode `ahead`: the nodes' `lease_ahead_s` (a herd then goes `lease_ahead_herd_s`, default 10,
# ahead); the value dispatch ahead was built and measured with.
AHEAD_S = 2.0


@dataclass
class HerdResult:
    system: str
    n: int
    jitter_s: int
    received: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    commit_p50_ms: float = float("nan")
    commit_max_ms: float = float("nan")
    create_s: float = float("nan")
    mode: str = ""
    leased_ahead: int = 0
    # Mode `ahead`: when the checks before the start were answered, the last one − T, and
    # how long the slowest took (each run starts only after its check's answer).
    checks_done_ms: float = float("nan")
    check_max_ms: float = float("nan")
    # When the last batch of leases arrived, − T, and when the checks were sent (first and
    # last, − T): a herd not leased by T, or checks sent late, explain a slow start.
    last_lease_ms: float = float("nan")
    checks_sent_ms: tuple[float, float] = (float("nan"), float("nan"))
    # The longest a lease answer took from the leader's stamp to the poller (common.Received).
    answer_delay_max_ms: float = float("nan")


def cron_at(t: float) -> str:
    d = datetime.fromtimestamp(t, tz=UTC)
    return f"{d.second} {d.minute} {d.hour} {d.day} {d.month} *"


async def raftcron_herd(n: int, jitter_s: int, pollers: int, ahead: bool = True,
                        herd_ahead_s: float | None = None,
                        keep_dir: Path | None = None, acknowledge: bool = True,
                        herd_max_s: float | None = None, processes: int = 1) -> HerdResult:
    """`processes`: the pollers run in that many processes of their own (bench.poller_procs;
    1: in this one). `herd_ahead_s`: the nodes' `lease_ahead_herd_s` (None: their default);
    `herd_max_s` their `lease_ahead_herd_max_s` (None: their default). `keep_dir`:
    the cluster's files (node logs, SQLite) go to a new folder in it and are kept.
    `acknowledge`: the pollers acknowledge each lease on receipt, as `raftcron worker`
    does (and send their checks before a start as early as its measured round trip says)."""
    with (tempfile.TemporaryDirectory() if keep_dir is None else
          contextlib.nullcontext(tempfile.mkdtemp(prefix=f"herd-{n}-", dir=keep_dir))) as tmp:
        c = LocalCluster(Path(tmp))
        # Each mode says what it measures, whatever the nodes' default: leases ahead of the
        # instant, or none.
        herd = (f"lease_ahead_herd_s = {herd_ahead_s}\n"
                if ahead and herd_ahead_s is not None else "")
        herd += (f"lease_ahead_herd_max_s = {herd_max_s}\n"
                 if ahead and herd_max_s is not None else "")
        for path in c.configs:
            path.write_text(f"lease_ahead_s = {AHEAD_S if ahead else 0}\n{herd}"
                            + path.read_text())
        c.start()
        try:
            leader = c.wait_leader(timeout=60)
            if n + min(n, BATCH) > QUOTA_DEFAULTS["max_jobs"]:  # raise the default quotas
                need = n + min(n, BATCH)
                r = httpx.put(f"{c.urls[leader]}/v1/tenants/default", headers=c.auth_headers(),
                              json={"max_jobs": need, "max_schedules": need,
                                    "max_pending_runs": need}, timeout=30)
                r.raise_for_status()
            # Calibrate: time one paused batch (never due), then give the herd's creation
            # twice the time that rate predicts, plus LEAD_S.
            t_cal = time.time()
            await batch_create(c.urls[leader], c.auth_headers(), [
                {"id": f"calibrate-{i:04d}", "queue": "calibrate", "paused": True,
                 "target": {"shell": "true"}, "schedule": {"cron": "0 0 1 1 *"}}
                for i in range(min(n, BATCH))])
            create_rate = min(n, BATCH) / (time.time() - t_cal)
            t_create = time.time()
            instant = math.ceil(t_create + 2 * n / create_rate
                                + lead_s(n, herd_max_s if ahead else None))
            bodies = [{"id": f"herd-{i:05d}", "queue": QUEUE, "target": {"shell": "true"},
                       "schedule": {"cron": cron_at(instant), "jitter_s": jitter_s}}
                      for i in range(n)]
            await batch_create(c.urls[leader], c.auth_headers(), bodies)
            created = time.time()
            create_s = created - t_create
            if created > instant - 2:
                raise RuntimeError(f"creating {n} jobs took {create_s:.1f}s: too close to the "
                                   "herd instant (the machine is busy?)")
            offsets = {b["id"]: jitter_offset_ms(b["id"], instant, jitter_s) / 1000
                       for b in bodies}
            plan = PollerPlan(leader_first(c.urls, leader), QUEUE,
                              c.auth_headers(c.worker_token), n, instant + jitter_s + 60,
                              wait_s=1, ahead=ahead, acknowledge=acknowledge)
            seen = await run_pollers(plan, [f"herd-w{i}" for i in range(pollers)], processes)
            occs = c.occurrences(leader, kind="scheduled")
            # Lease lag from the moment each run was meant to start: T, plus its jitter.
            lags = [got - instant - offsets[occ_id.split("@", 1)[0]]
                    for got, _, occ_id in seen.leases]
            commit = [iso_to_s(o["created_at"]) - instant for o in occs]
            checks_done = max((answered for _, answered, _ in seen.checks), default=math.nan)
            check_max = max((answered - sent for sent, answered, _ in seen.checks),
                            default=math.nan)
            sent = [s for s, _, _ in seen.checks]
            checks_sent = ((min(sent) - instant) * 1000, (max(sent) - instant) * 1000) \
                if sent else (math.nan, math.nan)
            return HerdResult("raftcron", n, jitter_s, len(seen.leases),
                              pct(lags, 0.5) * 1000, pct(lags, 0.99) * 1000,
                              max(lags, default=float("nan")) * 1000,
                              pct(commit, 0.5) * 1000, max(commit, default=float("nan")) * 1000,
                              create_s, "ahead" if ahead else "at-instant", len(seen.ahead_ids),
                              (checks_done - instant) * 1000, check_max * 1000,
                              (seen.received_last - instant) * 1000, checks_sent,
                              seen.answer_delay_max * 1000)
        finally:
            c.close()


async def apscheduler_herd(n: int) -> HerdResult:
    """The same herd on APScheduler 3: N DateTrigger jobs at one instant, in memory."""
    from apscheduler.schedulers.asyncio import AsyncIOScheduler
    from apscheduler.triggers.date import DateTrigger

    lags: list[float] = []
    instant = math.ceil(time.time() + 3 + n / 20_000)
    all_started = asyncio.Event()

    async def job() -> None:
        lags.append(time.time() - instant)
        if len(lags) == n:
            all_started.set()

    scheduler = AsyncIOScheduler(timezone=UTC, job_defaults={
        "misfire_grace_time": None, "coalesce": False, "max_instances": 1})
    run_date = datetime.fromtimestamp(instant, tz=UTC)
    for i in range(n):
        scheduler.add_job(job, DateTrigger(run_date=run_date), id=f"herd-{i:05d}")
    scheduler.start()
    try:
        await asyncio.wait_for(all_started.wait(), timeout=instant - time.time() + 120)
    finally:
        scheduler.shutdown(wait=False)
    return HerdResult("apscheduler", n, 0, len(lags), pct(lags, 0.5) * 1000,
                      pct(lags, 0.99) * 1000, max(lags) * 1000)


def _median(results: list[HerdResult]) -> HerdResult:
    """One result whose every figure is the median over `results` (one system, N, mode)."""
    def med(attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in results)

    first = results[0]
    return HerdResult(first.system, first.n, first.jitter_s, int(med("received")),
                      med("p50_ms"), med("p99_ms"), med("max_ms"), med("commit_p50_ms"),
                      med("commit_max_ms"), med("create_s"), first.mode,
                      int(med("leased_ahead")), med("checks_done_ms"), med("check_max_ms"),
                      med("last_lease_ms"),
                      (statistics.median(r.checks_sent_ms[0] for r in results),
                       statistics.median(r.checks_sent_ms[1] for r in results)),
                      med("answer_delay_max_ms"))


def run_all(sizes: list[int], jitter_s: int, pollers: int = 16,
            modes: tuple[str, ...] = ("ahead",), repeat: int = 1,
            herd_ahead_s: float | None = None, keep_dir: Path | None = None,
            acknowledge: bool = True, herd_max_s: float | None = None,
            processes: int = 1) -> list[HerdResult]:
    """`pollers`: the most no-op pollers any run gets, in `processes` processes of their
    own (1: the bench's). Returns the medians over `repeat`
    runs of each (system, N, jitter, mode), the systems alternating run by run."""
    runs: dict[tuple, list[HerdResult]] = {}
    for n in sizes:
        for _ in range(repeat):
            for jitter in sorted({0, jitter_s}):
                for mode in modes:
                    r = asyncio.run(raftcron_herd(n, jitter, min(pollers, max(4, math.ceil(
                        n / 1000))), ahead=mode == "ahead", herd_ahead_s=herd_ahead_s,
                        keep_dir=keep_dir, acknowledge=acknowledge, herd_max_s=herd_max_s,
                        processes=processes))
                    print(f"raftcron    N={n:>6} jitter={jitter:>2}s {mode:>10}  lag p50 "
                          f"{r.p50_ms:8.0f} p99 {r.p99_ms:8.0f} max {r.max_ms:8.0f} ms  commit "
                          f"p50 {r.commit_p50_ms:8.0f} max {r.commit_max_ms:8.0f} ms  "
                          f"({r.received}/{n} leased, {r.leased_ahead} before T, created in "
                          f"{r.create_s:.1f}s)" + (
                              f"  checks before the start: last answered T{r.checks_done_ms:+.0f}"
                              f" ms, slowest {r.check_max_ms:.0f} ms, sent "
                              f"T{r.checks_sent_ms[0]:+.0f}..T{r.checks_sent_ms[1]:+.0f} ms; "
                              "last leases received "
                              f"T{r.last_lease_ms:+.0f} ms, a lease answer's delivery at most "
                              f"{r.answer_delay_max_ms:.0f} ms" if mode == "ahead" else ""),
                          flush=True)
                    runs.setdefault(("raftcron", n, jitter, mode), []).append(r)
            a = asyncio.run(apscheduler_herd(n))
            print(f"apscheduler N={n:>6}                        start lag p50 {a.p50_ms:8.0f} "
                  f"p99 {a.p99_ms:8.0f} max {a.max_ms:8.0f} ms", flush=True)
            runs.setdefault(("apscheduler", n, 0, ""), []).append(a)
    return [_median(rs) for rs in runs.values()]


def table(results: list[HerdResult]) -> str:
    lines = ["| N | system | mode | jitter | received (before T) | lag p50 ms | lag p99 ms | "
             "lag max ms | claim stamp − T p50 / max ms | last check before start answered "
             "− T ms | p99 ratio raftcron/APScheduler |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    aps = {r.n: r for r in results if r.system == "apscheduler"}
    for r in results:
        ratio = (f"{r.p99_ms / aps[r.n].p99_ms:.2f}"
                 if r.system == "raftcron" and r.n in aps and not r.jitter_s else "")
        commit = (f"{r.commit_p50_ms:.0f} / {r.commit_max_ms:.0f}"
                  if r.system == "raftcron" else "")
        received = f"{r.received:,}" + (f" ({r.leased_ahead:,})" if r.mode == "ahead" else "")
        checks = f"{r.checks_done_ms:+.0f}" if r.mode == "ahead" else ""
        lines.append(f"| {r.n:,} | {r.system} | {r.mode} | {r.jitter_s}s | {received} | "
                     f"{r.p50_ms:.0f} | {r.p99_ms:.0f} | {r.max_ms:.0f} | {commit} | {checks} | "
                     f"{ratio} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100,1000,10000,33000")
    p.add_argument("--jitter-s", type=int, default=10)
    p.add_argument("--max-pollers", type=int, default=16)
    p.add_argument("--modes", default="ahead,at-instant",
                   help="ahead (dispatch ahead) and/or at-instant (handed out at T)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--herd-ahead-s", type=float, default=None,
                   help="mode ahead: the nodes' lease_ahead_herd_s (default: the product's)")
    p.add_argument("--herd-max-s", type=float, default=None,
                   help="mode ahead: the nodes' lease_ahead_herd_max_s (default: the "
                        "product's, no further than lease_ahead_herd_s)")
    p.add_argument("--keep-dir", type=Path, default=None,
                   help="keep each run's cluster (node logs, SQLite files) in a folder here")
    p.add_argument("--poller-processes", type=int, default=1,
                   help="run the pollers in this many processes of their own, as workers "
                        "are (default 1: all in the bench's process, as measured before "
                        "2026-12-06; bench/poller_procs.py says what that costs)")
    p.add_argument("--no-acknowledge", action="store_true",
                   help="the pollers do not acknowledge their leases (before 2026-12-02 "
                        "the herd was measured so; `raftcron worker` acknowledges)")
    args = p.parse_args()
    modes = tuple(m for m in args.modes.split(",") if m)
    if not modes or set(modes) - {"ahead", "at-instant"}:
        p.error("--modes takes ahead and/or at-instant")
    print(machine_line())
    results = run_all([int(x) for x in args.sizes.split(",")], args.jitter_s, args.max_pollers,
                      modes, max(1, args.repeat), args.herd_ahead_s, args.keep_dir,
                      not args.no_acknowledge, args.herd_max_s, args.poller_processes)
    print(table(results))
    print([asdict(r) for r in results])


if __name__ == "__main__":
    main()
