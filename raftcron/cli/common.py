"""What the CLI's command modules share: connection arguments, the API client, one-line
refusals and usage errors, the schedules a command's options name (`job add/edit`,
`schedule preview`), and printing tables or JSON. A leaf module: it imports no command
module, so each command group depends on it and none on another (`main` only registers
them).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:  # the client (httpx) is imported by the commands that talk to a node
    from raftcron.cli.client import ApiError, Client

DEFAULT_SERVER = os.environ.get("RAFTCRON_SERVER", "http://127.0.0.1:8700")
EXIT_REFUSED = 1
EXIT_USAGE = 2
TOKEN_HELP = "bearer token (default: $RAFTCRON_TOKEN)"
Command = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """Input a command refuses itself, before or between its requests (`fail`: exit 2)."""


def fail(message: str) -> int:
    """`message` as one line on stderr; exit 2."""
    print(f"raftcron: {message}", file=sys.stderr)
    return EXIT_USAGE


def connection_args(parser: argparse.ArgumentParser, nested: bool = False) -> None:
    """--server, --token and --json. A nested parser leaves them unset unless given, so
    `raftcron alerts --server X ack ...` keeps the X its parent read."""
    default: Callable[[Any], Any] = (lambda v: argparse.SUPPRESS) if nested else (lambda v: v)
    parser.add_argument("--server", default=default(DEFAULT_SERVER), help="URL[,URL...]")
    parser.add_argument("--token", default=default(os.environ.get("RAFTCRON_TOKEN")),
                        help=TOKEN_HELP)
    parser.add_argument("--json", action="store_true", default=default(False),
                        help="print the API's JSON (for scripts)")


def client_for(args: argparse.Namespace) -> Client:
    from raftcron.cli.client import Client

    return Client([s for s in args.server.split(",") if s], token=args.token or None)


def refused(error: ApiError) -> int:
    print(f"raftcron: {error}", file=sys.stderr)
    return EXIT_REFUSED


def api_call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    """One API request with the command's servers and token (the client's retries and
    failover apply); raises ApiError when refused or when no node answers."""
    client = client_for(args)
    try:
        return client.request(method, path, **kwargs)
    finally:
        client.close()


def exits_1_when_refused(command: Command) -> Command:
    """A command whose API refusal (or no node answering) is one line on stderr and exit
    1, whichever of its requests was refused."""
    from raftcron.cli.client import ApiError

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except ApiError as e:
            return refused(e)
    return run


def url_path(value: str) -> str:
    return quote(value, safe="")


def print_output(args: argparse.Namespace, data: Any, rows: list[tuple[str, ...]] | None = None,
                 header: tuple[str, ...] | None = None) -> None:
    """`data` as JSON with --json (or when there is no table), else `rows` as columns."""
    if args.json or rows is None:
        print(json.dumps(data, indent=2))
        return
    rows = [header] + rows if header else rows
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    print_output(argparse.Namespace(json=False), None, rows, header)


def schedule_entries(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The schedules the options name: one per --cron, one for all --at times, one for
    --every (with --anchor)."""
    entries: list[dict[str, Any]] = [{"cron": c} for c in args.cron or []]
    ats = getattr(args, "at", None) or []
    if ats:
        entries.append({"at": ats if len(ats) > 1 else ats[0]})
    every = getattr(args, "every", None)
    anchor = getattr(args, "anchor", None)
    if anchor and not every:
        raise UsageError("--anchor goes with --every")
    if every:
        entries.append({"every": every, **({"anchor": anchor} if anchor else {})})
    return entries


def job_zone(job: dict[str, Any]) -> str:
    """The zone a job's times are shown in: its (first) schedule's; UTC for a chained job."""
    sched = job.get("schedule") or (job.get("schedules") or [{}])[0]
    return sched.get("timezone", "UTC")
