"""`raftcron job history JOB`: who changed a job, when, and what changed.

One line per changed field (`schedule.cron  0 9 * * 1-5 → 0 10 * * 1-5`) under the change
that made it, newest change first; `--json` prints the API's answer
(`GET /v1/job-history/{id}`, which answers for a deleted job too: who deleted it, and
what it was). Exit codes as for `job runs`: 1 when the API refuses (an
unknown job, or one the token may not see) or no node answers, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from raftcron.cli.common import api_call, connection_args, exits_1_when_refused, table, url_path
from raftcron.cli.runs import run_limit

HEADER = ("seq", "version", "kind", "at (UTC)", "by", "change")


def _seq(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError("must be a seq from the history (an integer from 1)")
    return int(text)


def register_job_history(jsub: Any) -> None:
    """`raftcron job history JOB` (added to the `job` subcommands)."""
    p = jsub.add_parser("history", help="a job's changes: who, when, which fields")
    p.add_argument("job_id")
    p.add_argument("--limit", type=run_limit, default=20, help="changes to show (1-500, "
                   "default 20)")
    p.add_argument("--before", type=_seq, help="only changes older than this seq (paging)")
    connection_args(p)
    p.set_defaults(func=cmd_job_history)


def shown(value: Any) -> str:
    """A field's value on one line: text as it is, anything else as compact JSON."""
    if value is None:
        return "-"
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def change_lines(entry: dict[str, Any]) -> list[str]:
    """What the change did, one line per field (its note, or what it was, otherwise)."""
    if entry["changes"]:
        lines = [f"{c['field']}: {shown(c['before'])} → {shown(c['after'])}"
                 for c in entry["changes"]]
    elif entry["kind"] == "create":
        lines = ["created"]
    elif entry["changes"] is None:
        lines = ["(the version before is not in the history)"]
    else:
        lines = ["no field changed"]
    if entry.get("note"):
        lines.insert(0, f"note: {entry['note']}")
    return lines


def history_rows(versions: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for v in versions:
        for i, line in enumerate(change_lines(v)):
            lead = (str(v["seq"]), str(v["version"]), v["kind"], v["at"], v["by"] or "-") \
                if i == 0 else ("",) * 5
            rows.append((*lead, line))
    return rows


@exits_1_when_refused
def cmd_job_history(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"limit": args.limit}
    if args.before is not None:
        params["before"] = args.before
    page = api_call(args, "GET", f"/v1/job-history/{url_path(args.job_id)}", params=params,
                    retries=3)
    if args.json:
        print(json.dumps(page, indent=2))
        return 0
    if not page["versions"]:
        print(f"no changes of {args.job_id} recorded", file=sys.stderr)
        return 0
    table(HEADER, history_rows(page["versions"]))
    if not page["exists"]:
        print(f"{args.job_id} is deleted", file=sys.stderr)
    if page["next_before"] is not None:
        print(f"older changes: --before {page['next_before']}", file=sys.stderr)
    return 0
