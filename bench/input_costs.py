"""What hostile input costs a node's CPU, before and after its bounds.

    python bench/input_costs.py

Prints the CPU seconds (process time, one thread) of:
  bodies     parsing and checking a 1 MiB body of each hostile shape (the API's reader)
  backfill   listing a backfill's instants: the ten-year range the API serves, and the
             7,000-year range it now refuses before listing (what it cost unbounded)
  herd       one herd computation over 168 h for a per-second job that starts after the
             window: capped at HERD_MAX_INSTANTS steps (uncapped it walked every second)
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import machine_line  # noqa: E402
from raftcron.api.errors import parse_json_body  # noqa: E402
from raftcron.api.status import compute_herd  # noqa: E402
from raftcron.core.backfill import MAX_BACKFILL_SPAN_MS, backfill_instants  # noqa: E402
from raftcron.core.errors import ValidationError  # noqa: E402
from raftcron.core.model import parse_job  # noqa: E402
from raftcron.core.schedule import compile_schedule  # noqa: E402
from raftcron.core.timefmt import parse_iso_ms  # noqa: E402

MIB = 1 << 20


def cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    try:
        fn()
    except ValidationError:
        pass
    return time.process_time() - start


def bodies() -> list[tuple[str, bytes]]:
    deep_legal = "[" * 30 + "]" * 30
    return [
        ("500k integers", ("[" + ",".join(["0"] * (MIB // 2 - 1)) + "]").encode()),
        ("333k empty lists", ("[" + ",".join(["[]"] * (MIB // 3 - 1)) + "]").encode()),
        ("15k lists 31 deep", ("[" + ",".join([deep_legal] * (MIB // 61 - 1)) + "]").encode()),
        ("one 1 MiB string", json.dumps("x" * (MIB - 10)).encode()),
        ("surrogate pairs", ("[" + ",".join(['"\\ud83d\\ude00"'] * (MIB // 15)) + "]").encode()),
        ("200k brackets (refused)", b"[" * 200_000),
    ]


def main() -> None:
    print(machine_line())
    print("bodies (parse + check, CPU s):")
    for label, raw in bodies():
        cost = cpu(lambda r=raw: parse_json_body(r))
        print(f"  {label:<26} {len(raw) / MIB:5.2f} MiB  {cost:.3f}")
    sched = compile_schedule("0 0 1 1 *", "Europe/Berlin")
    start = parse_iso_ms("2010-01-01T00:00:00Z", "start")
    served = cpu(lambda: backfill_instants(sched, start, start + MAX_BACKFILL_SPAN_MS))
    far = parse_iso_ms("8999-12-31T00:00:00Z", "end")
    epoch = 0
    refused = cpu(lambda: backfill_instants(sched, epoch, far))
    fresh = compile_schedule("0 0 1 1 *", "Asia/Tokyo")  # a zone not yet cached
    unbounded = cpu(lambda: list(fresh.iter_between(epoch // 1000, far // 1000)))
    print("backfill of a yearly job (CPU s):")
    print(f"  ten years (served)              {served:.3f}")
    print(f"  1970-8999 (refused, now)        {refused:.3f}")
    print(f"  1970-8999 listed unbounded      {unbounded:.3f}  (what one request cost before)")
    late = json.dumps(parse_job({
        "id": "late", "schedule": {"cron": "* * * * * *", "start_at": "2099-01-01T00:00:00Z"},
        "target": {"shell": "true"}}).to_spec())
    t0 = parse_iso_ms("2026-01-01T00:00:00Z", "t0")
    capped = cpu(lambda: compute_herd([late], t0, 168, 60))
    uncapped = cpu(lambda: compute_herd([late], t0, 168, 60, cap=10**9))
    print("herd, 168 h, a per-second job starting after the window (CPU s):")
    print(f"  capped (HERD_MAX_INSTANTS)      {capped:.3f}")
    print(f"  uncapped                        {uncapped:.3f}")


if __name__ == "__main__":
    main()
