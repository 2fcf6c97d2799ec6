"""`raftcron calendar ...` (put, list, show, rm) and `raftcron job pause-all / resume-all`.

    raftcron calendar put holidays --tz Europe/Berlin --date 2026-12-25 \\
        --cron '* * 24-26 12 *' --window 2026-12-31T18:00:00+01:00/2027-01-01T06:00:00+01:00
    raftcron job pause-all --label team=billing --note "month-end freeze"

Bad arguments exit 2 with one line; an API refusal exits 1 with the server's message.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import quote

from raftcron.cli.common import (
    EXIT_USAGE,
    api_call,
    client_for,
    connection_args,
    exits_1_when_refused,
    table,
)


def _usage(message: str) -> int:
    print(f"raftcron: {message}", file=sys.stderr)
    return EXIT_USAGE


def calendar_body(args: argparse.Namespace) -> dict[str, Any]:
    """The PUT body from --file and/or --date/--cron/--window (added to the file's)."""
    body: dict[str, Any] = {}
    if args.file:
        try:
            with open(args.file, encoding="utf-8") as f:
                body = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"--file {args.file}: {e}") from None
        if not isinstance(body, dict):
            raise ValueError("--file must hold a JSON object")
    exclude = list(body.get("exclude") or [])
    exclude += [{"date": d} for d in args.date or ()]
    exclude += [{"cron": c} for c in args.cron or ()]
    for window in args.window or ():
        start, sep, end = window.partition("/")
        if not sep or not start or not end:
            raise ValueError(f"--window {window!r} must be START/END (ISO 8601 instants)")
        exclude.append({"start": start, "end": end})
    body["exclude"] = exclude
    if args.tz:
        body["timezone"] = args.tz
    if args.tenant:
        body["tenant"] = args.tenant
    return body


@exits_1_when_refused
def cmd_calendar(args: argparse.Namespace) -> int:
    try:
        body = calendar_body(args) if args.calendar_action == "put" else None
    except ValueError as e:
        return _usage(str(e))
    client = client_for(args)
    try:
        if args.calendar_action == "put":
            out = client.request("PUT", f"/v1/calendars/{quote(args.name, safe='')}",
                                 json=body, retries=3)
            rows = [(out["name"], out["tenant"], out["timezone"], str(len(out["exclude"])))]
            header: tuple[str, ...] = ("name", "tenant", "timezone", "exclusions")
        elif args.calendar_action == "list":
            out = client.request("GET", "/v1/calendars", retries=3)
            rows = [(c["name"], c["tenant"], c["timezone"], str(len(c["exclude"])))
                    for c in out["calendars"]]
            header = ("name", "tenant", "timezone", "exclusions")
        elif args.calendar_action == "show":
            out = client.request("GET", f"/v1/calendars/{quote(args.name, safe='')}",
                                 retries=3)
            rows = [(json.dumps(e),) for e in out["exclude"]] or [("(no exclusions)",)]
            header = (f"{out['name']} ({out['timezone']}), listed by "
                      f"{out['job_count']} job(s)",)
        else:
            out = client.request("DELETE", f"/v1/calendars/{quote(args.name, safe='')}",
                                 retries=3)
            rows, header = [(args.name, "deleted")], ("name", "state")
    finally:
        client.close()
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        table(header, rows)
    return 0


@exits_1_when_refused
def cmd_bulk_pause(args: argparse.Namespace) -> int:
    given = [(k, getattr(args, k)) for k in ("tenant", "queue", "label")
             if getattr(args, k) is not None]
    if len(given) != 1:
        return _usage("give exactly one of --tenant, --queue or --label")
    if not args.note.strip():
        return _usage("--note must say why")
    action = "pause" if args.action == "pause-all" else "resume"
    out = api_call(args, "POST", f"/v1/jobs:{action}",
                   json={given[0][0]: given[0][1], "note": args.note}, retries=3)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        table(("job", "state"), [(j, out["action"]) for j in out["job_ids"]]
               or [("(no job changed)", f"{out['matched']} matched")])
    return 0


def register(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """The `calendar` command group."""
    cp = sub.add_parser("calendar", help="calendars: holidays and blackout windows")
    csub = cp.add_subparsers(dest="calendar_action", required=True, parser_class=parser_class)
    put = csub.add_parser("put", help="create or replace a calendar")
    put.add_argument("name")
    put.add_argument("--file", help="calendar JSON (its exclusions are kept, the flags add)")
    put.add_argument("--tz", help="IANA zone of --date and --cron (default UTC)")
    put.add_argument("--tenant")
    put.add_argument("--date", action="append", help="exclude a local day: 2026-12-25")
    put.add_argument("--cron", action="append",
                     help="exclude the minutes a cron names: '* * 24-26 12 *'")
    put.add_argument("--window", action="append", help="exclude START/END (ISO instants)")
    for name, help_text in (("list", "calendars"), ("show", "one calendar"),
                            ("rm", "delete a calendar (refused while jobs list it)")):
        p = csub.add_parser(name, help=help_text)
        if name != "list":
            p.add_argument("name")
        connection_args(p)
        p.set_defaults(func=cmd_calendar)
    connection_args(put)
    put.set_defaults(func=cmd_calendar)


def register_bulk_pause(jsub: Any) -> None:
    """`job pause-all` and `job resume-all`."""
    for name in ("pause-all", "resume-all"):
        p = jsub.add_parser(name, help=f"{name.split('-')[0]} every job of a tenant, a queue "
                            "or a label")
        p.add_argument("--tenant")
        p.add_argument("--queue")
        p.add_argument("--label", help="NAME=VALUE, e.g. team=billing")
        p.add_argument("--note", required=True, help="why (recorded on each job)")
        connection_args(p)
        p.set_defaults(func=cmd_bulk_pause, action=name)
