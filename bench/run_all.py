"""Every performance benchmark in one run: a markdown table of figures against the targets,
plus PNG plots, in --out (default bench/results/).

    python bench/run_all.py [--quick] [--out bench/results] [--skip steady,scale]

Parts, in order (each on fresh cluster processes; nothing else should run meanwhile):
  floor      raw pysyncobj commands/s and items/s (bench/floor.py)
  herd       N jobs due in one second, N = 100 … 33,000, with and without jitter, beside
             APScheduler 3 (bench/herd.py)
  throughput 5,000 jobs every second, sustained runs/s end to end (bench/e2e.py)
  failover   20 leader SIGKILLs: election, first claim, runs due meanwhile (bench/failover.py)
  steady     10,000 `H * * * * *` jobs for 10 minutes: lag, CPU, RSS (bench/soak.py)
  scale      100,000 jobs: RSS, snapshot size, restart times (bench/scale.py)
`--steady-from bench/results/soak.md` takes the steady part from a soak run instead.
`--quick` shrinks every part (a smoke run of the whole command, about 3 minutes).
The full run takes about 35 minutes on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import e2e, failover, floor, herd, scale, soak  # noqa: E402
from bench.common import machine_line  # noqa: E402

FULL = {
    "floor_s": 10, "herd_sizes": [100, 1000, 10_000, 33_000], "jitter_s": 10,
    "throughput_jobs": 5000, "throughput_s": 20, "kills": 20, "kill_jobs": 50,
    "steady_jobs": 10_000, "steady_min": 10.0, "scale_jobs": 100_000,
}
QUICK = {
    "floor_s": 2, "herd_sizes": [100, 1000], "jitter_s": 5,
    "throughput_jobs": 300, "throughput_s": 5, "kills": 2, "kill_jobs": 10,
    "steady_jobs": 300, "steady_min": 1.0, "scale_jobs": 3000,
}


def plot_herd(results: list[herd.HerdResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    series = {
        "raftcron, lease lag p99": [r for r in results if r.system == "raftcron"
                                    and not r.jitter_s],
        "raftcron with jitter, lease lag p99": [r for r in results if r.system == "raftcron"
                                                and r.jitter_s],
        "APScheduler 3, start lag p99": [r for r in results if r.system == "apscheduler"],
    }
    for label, rows in series.items():
        if rows:
            ax.plot([r.n for r in rows], [max(r.p99_ms, 1) for r in rows], marker="o",
                    label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("jobs due in the same second (N)")
    ax.set_ylabel("p99 lag (ms)")
    ax.axhline(2000, color="grey", linestyle=":", label="2 s requirement")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    ax.set_title("The herd: three replicated nodes vs one in-memory APScheduler")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def run(args: argparse.Namespace) -> int:
    cfg = QUICK if args.quick else FULL
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))
    sections: list[str] = []
    targets: list[tuple[str, str, str, str]] = []  # (target, measured, verdict, part)
    failures = 0

    def part(name: str, fn: Callable[[], str]) -> None:
        nonlocal failures
        if name in skip:
            return
        print(f"== {name}", flush=True)
        t0 = time.time()
        try:
            text = fn()
        except Exception:  # noqa: BLE001 - one failing part must not lose the others
            failures += 1
            text = "FAILED:\n```\n" + traceback.format_exc() + "```"
        sections.append(f"## {name} ({time.time() - t0:.0f} s)\n\n{text}\n")
        print(text, flush=True)

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    def do_floor() -> str:
        with tempfile.TemporaryDirectory() as tmp:
            rows = floor.run(cfg["floor_s"], 1000, Path(tmp))
        return floor.table(rows)

    def do_herd() -> str:
        results = herd.run_all(cfg["herd_sizes"], cfg["jitter_s"])
        plot_herd(results, out / "herd.png")
        plain = {r.n: r for r in results if r.system == "raftcron" and not r.jitter_s}
        aps = {r.n: r for r in results if r.system == "apscheduler"}
        big = max(plain)
        mid = 10_000 if 10_000 in plain else big
        ratio = plain[mid].p99_ms / aps[mid].p99_ms
        targets.append((f"herd p99 lease lag ≤ 0.5 × APScheduler p99 at N={mid:,}",
                        f"{plain[mid].p99_ms:.0f} ms vs {aps[mid].p99_ms:.0f} ms "
                        f"(ratio {ratio:.2f})", verdict(ratio <= 0.5), "herd"))
        targets.append((f"herd p99 lease lag ≤ 2 s at N={big:,}",
                        f"{plain[big].p99_ms:.0f} ms", verdict(plain[big].p99_ms <= 2000),
                        "herd"))
        return herd.table(results) + "\n\n![herd](herd.png)"

    def do_throughput() -> str:
        r = asyncio.run(e2e.measure(cfg["throughput_jobs"], cfg["throughput_s"], pollers=4))
        targets.append(("throughput ≥ 5,000 runs/s end to end", f"{r['runs_per_s']:.0f} runs/s",
                        verdict(r["runs_per_s"] >= 5000), "throughput"))
        return e2e.table(r)

    def do_failover() -> str:
        buf = io.StringIO()
        root = Path(tempfile.mkdtemp(prefix="raftcron-bench-"))
        try:
            with contextlib.redirect_stdout(buf):
                failover.run(cfg["kills"], cfg["kill_jobs"], root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        text = buf.getvalue()
        line = next((ln for ln in text.splitlines() if ln.startswith("first claim")), "")
        p99 = float(line.split()[3].rstrip("s")) if line else float("nan")
        targets.append(("failover p99 ≤ 1 s to the first new claim", f"{p99:.3f} s",
                        verdict(p99 <= 1.0), "failover"))
        return "```\n" + text.strip() + "\n```"

    def do_steady() -> str:
        if args.steady_from:
            # A soak is the steady workload for longer: take its figures instead of
            # spending another ten minutes on the same measurement.
            # Its minutes 1-11 are the steady workload for ten minutes, before retention
            # starts pruning; the whole hour is reported beside them.
            source = Path(args.steady_from)
            text = source.read_text()
            lag = next(ln for ln in text.splitlines()
                       if ln.startswith("| fire lag") and "minutes 1–11" in ln)
            p99 = float(lag.split("|")[2].split("/")[1])
            targets.append(("steady fire lag p99 ≤ 100 ms",
                            f"{p99:.0f} ms ({source.name}, minutes 1–11)",
                            verdict(p99 <= 100), "steady"))
            return (f"From `{source}`, a bench/soak.py run (its command line below gives "
                    "its jobs, duration and retention):\n\n" + text)
        ns = argparse.Namespace(jobs=cfg["steady_jobs"], minutes=cfg["steady_min"],
                                retention="off", sample_s=15 if args.quick else 30,
                                pollers=2, out=str(out), name="steady", keep=None)
        text = asyncio.run(soak.run(ns))
        lag = next(ln for ln in text.splitlines() if "whole soak" in ln)
        p99 = float(lag.split("|")[2].split("/")[1])
        targets.append(("steady fire lag p99 ≤ 100 ms", f"{p99:.0f} ms", verdict(p99 <= 100),
                        "steady"))
        return text + "\n![steady](steady.png)"

    def do_scale() -> str:
        rows = scale.run(cfg["scale_jobs"])
        values = dict(rows)
        rss = max(float(v.split()[0]) for k, v in rows if k.startswith("RSS"))
        restart = max(float(v.split()[0]) for k, v in values.items()
                      if k.startswith(("follower", "wiped", "whole")))
        targets.append((f"scale: {cfg['scale_jobs']:,} jobs in ≤ 500 MB RSS per node",
                        f"max {rss:.0f} MB", verdict(rss <= 500), "scale"))
        targets.append(("scale: restart ≤ 10 s", f"slowest {restart:.1f} s",
                        verdict(restart <= 10), "scale"))
        return scale.table(rows, cfg["scale_jobs"])

    started = time.time()
    part("floor", do_floor)
    part("herd", do_herd)
    part("throughput", do_throughput)
    part("failover", do_failover)
    part("steady", do_steady)
    part("scale", do_scale)

    head = [
        "# raftcron performance" + (" (quick smoke run: shrunken sizes)" if args.quick else ""),
        "",
        f"$ python bench/run_all.py{' --quick' if args.quick else ''}"
        + (f" --skip {args.skip}" if args.skip else "")
        + (f" --steady-from {args.steady_from}" if args.steady_from else ""),
        "",
        machine_line() + "; three node processes and the load generator share the cores.",
        f"Run took {(time.time() - started) / 60:.1f} min on "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}.",
        "",
        "| target | measured | verdict | part |",
        "|---|---|---|---|",
        *[f"| {t} | {m} | {v} | {p} |" for t, m, v, p in targets],
        "",
    ]
    name = "perf-quick.md" if args.quick else "perf.md"
    (out / name).write_text("\n".join(head + sections))
    print(f"wrote {out / name}")
    return 1 if failures else 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    p.add_argument("--skip", default="", help="comma-separated parts to leave out")
    p.add_argument("--steady-from", metavar="SOAK_MD",
                   help="take the steady part from a bench/soak.py result instead of running it")
    sys.exit(run(p.parse_args()))


if __name__ == "__main__":
    main()
