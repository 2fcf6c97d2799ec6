"""Where the CPU goes: py-spy samples of running processes, summed by function and by area.

    python bench/profiling.py summarize DIR      # the summary of profiles written before

`record(pids, seconds, out)` runs `py-spy record --format raw` on each process (sampling
on-CPU stacks only, without pausing the process) and `summarize` prints, for each, the
share of samples by area (raftcron's packages, pysyncobj, the HTTP server, the standard
library's asyncio, ...) and the functions with the most samples on top of the stack (self)
and anywhere in it (total). py-spy is in the `bench` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

RATE_HZ = 200
# The first matching pattern of a frame's file names its area.
AREAS: list[tuple[str, str]] = [
    (r"raftcron/state/", "raftcron.state (applies, SQLite)"),
    (r"raftcron/cluster/", "raftcron.cluster (Raft glue)"),
    (r"raftcron/leader/", "raftcron.leader (tick, dispatch, duties)"),
    (r"raftcron/api/", "raftcron.api (HTTP handlers)"),
    (r"raftcron/core/", "raftcron.core (pure rules)"),
    (r"raftcron/", "raftcron (other)"),
    (r"pysyncobj/", "pysyncobj"),
    (r"uvicorn/|h11/|starlette/", "HTTP server (uvicorn, h11, starlette)"),
    (r"httpx/|httpcore/|anyio/", "HTTP client (httpx)"),
    (r"asyncio/", "asyncio"),
    (r"json/", "json"),
    (r"bench/", "bench (load generator)"),
]
FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


@dataclass
class Profile:
    name: str
    samples: int
    by_area_self: Counter[str]
    by_function_self: Counter[str]
    by_function_total: Counter[str]


def area_of(file: str) -> str:
    for pattern, area in AREAS:
        if re.search(pattern, file):
            return area
    return "other (stdlib, C)"


def short(func: str, file: str) -> str:
    for marker in ("site-packages/", "/raftcron/", "/bench/", "/lib/python3"):
        if marker in file:
            file = file.split(marker, 1)[1]
            if marker in ("/raftcron/", "/bench/"):
                file = marker.strip("/") + "/" + file
            break
    return f"{func} ({file})"


def parse_raw(name: str, text: str) -> Profile:
    """py-spy's raw format: one line per distinct stack, `frame;frame;...;frame count`,
    outermost first (a thread name frame may lead)."""
    by_area: Counter[str] = Counter()
    self_: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        frames = []
        for frame in stack.split(";"):
            m = FRAME.match(frame)
            if m:
                frames.append((m["func"], m["file"]))
        if not frames:
            continue
        func, file = frames[-1]
        self_[short(func, file)] += count
        # The area is the innermost frame that is not the standard library or C, so a
        # json.dumps called by an apply counts for the apply's package.
        area = next((a for a in (area_of(f) for _, f in reversed(frames))
                     if not a.startswith("other")), "other (stdlib, C)")
        if area_of(file) in ("json", "asyncio"):
            area = area_of(file)
        by_area[area] += count
        for key in {short(f, fl) for f, fl in frames}:
            total[key] += count
    return Profile(name, samples, by_area, self_, total)


async def record(pids: dict[str, int], seconds: float, out: Path) -> list[Path]:
    """Sample every process in `pids` for `seconds`; the raw files written."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out.mkdir(parents=True, exist_ok=True)
    procs = []
    paths = []
    for name, pid in pids.items():
        path = out / f"{name}.txt"
        paths.append(path)
        procs.append(await asyncio.create_subprocess_exec(
            spy, "record", "--pid", str(pid), "--duration", str(int(seconds)),
            "--rate", str(RATE_HZ), "--format", "raw", "--nonblocking",
            "--output", str(path), stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL))
    await asyncio.gather(*(p.wait() for p in procs))
    return [p for p in paths if p.exists()]


def record_blocking(pids: dict[str, int], seconds: float, out: Path,
                    not_before: float = 0.0) -> list[Path]:
    """`record` from a thread of a program without an event loop, from `not_before` (a
    time.time() instant) on."""
    time.sleep(max(0.0, not_before - time.time()))
    return asyncio.run(record(pids, seconds, out))


def table(profile: Profile, top: int = 12) -> str:
    n = max(1, profile.samples)
    lines = [f"## {profile.name}: {profile.samples:,} on-CPU samples at {RATE_HZ} Hz "
             f"({profile.samples / RATE_HZ:.1f} CPU-seconds)", "",
             "| area (innermost non-stdlib frame) | share |", "|---|---:|"]
    lines += [f"| {a} | {c / n:.0%} |" for a, c in profile.by_area_self.most_common()]
    lines += ["", "| function, self | share |", "|---|---:|"]
    lines += [f"| `{f}` | {c / n:.1%} |" for f, c in profile.by_function_self.most_common(top)]
    lines += ["", "| function, total (anywhere in the stack) | share |", "|---|---:|"]
    interesting = [(f, c) for f, c in profile.by_function_total.most_common()
                   if "raftcron/" in f or "pysyncobj" in f][:top]
    lines += [f"| `{f}` | {c / n:.0%} |" for f, c in interesting]
    return "\n".join(lines)


def summarize(paths: list[Path]) -> str:
    return "\n\n".join(table(parse_raw(p.stem, p.read_text(errors="replace")))
                       for p in sorted(paths))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summarize")
    s.add_argument("dir", type=Path)
    args = p.parse_args()
    print(summarize(sorted(args.dir.glob("*.txt"))))


if __name__ == "__main__":
    main()
