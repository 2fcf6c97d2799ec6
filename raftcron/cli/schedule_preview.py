"""`raftcron schedule preview`: the next fire instants of a schedule given as options,
computed locally (no node is asked), in the zone and with the DST rules a job would have.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from raftcron.cli.common import fail, schedule_entries


def cmd_schedule_preview(args: argparse.Namespace) -> int:
    from raftcron.core.errors import ValidationError
    from raftcron.core.model import compile_member, parse_schedule
    from raftcron.core.schedule import ScheduleError
    from raftcron.core.timefmt import ms_to_iso, ms_to_local_iso, parse_iso_ms

    try:
        entry = schedule_entries(args)[0]
        spec = parse_schedule({**entry, "timezone": args.tz, "dst_gap": args.dst_gap,
                               "dst_fold": args.dst_fold}, args.job_id)
        sched = compile_member(spec, args.job_id)
        start = parse_iso_ms(args.start, "--start") // 1000 if args.start else int(time.time())
    except (ScheduleError, ValidationError) as e:
        return fail(f"{e.field}: {e.message}")
    if not 1 <= args.count <= 10_000:
        return fail("--count must be between 1 and 10000")
    rows = []
    t = start
    for _ in range(args.count):
        nxt = sched.next_after(t)
        if nxt is None:
            break
        rows.append({"scheduled_for": ms_to_iso(nxt * 1000),
                     "local": ms_to_local_iso(nxt * 1000, args.tz)})
        t = nxt
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'local':<28} utc")
        for r in rows:
            print(f"{r['local']:<28} {r['scheduled_for']}")
    return 0


def register(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    sp = sub.add_parser("schedule", help="schedule tools")
    ssub = sp.add_subparsers(dest="schedule_command", required=True, parser_class=parser_class)
    pv = ssub.add_parser("preview", help="print the next fire instants of a schedule")
    kind = pv.add_mutually_exclusive_group(required=True)
    kind.add_argument("--cron", action="append", help="a cron expression")
    kind.add_argument("--at", action="append",
                      help="a one-time local date-time, e.g. 2026-12-24T09:00 (repeatable)")
    kind.add_argument("--every", help="an interval, e.g. 90m or 1h30m")
    pv.add_argument("--anchor", help="with --every: one instant of the series (its phase)")
    pv.add_argument("--tz", default="UTC")
    pv.add_argument("--dst-gap", default="auto")
    pv.add_argument("--dst-fold", default="auto")
    pv.add_argument("--start", help="ISO 8601 instant (default: now)")
    pv.add_argument("--count", type=int, default=10)
    pv.add_argument("--job-id", default="preview", help="job id used for H values")
    pv.add_argument("--json", action="store_true")
    pv.set_defaults(func=cmd_schedule_preview)
