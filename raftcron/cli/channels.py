"""`raftcron channel ...` (put, list, show, delete): notification channels.

    raftcron channel put ops --slack https://hooks.slack.com/services/T0/B0/xyz
    raftcron channel put mail --file mail.json      # {"email": {...}}
    raftcron channel list

Bad arguments exit 2 with one line; an API refusal exits 1 with the server's message.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from urllib.parse import quote

from raftcron.cli.common import EXIT_USAGE, client_for, connection_args, exits_1_when_refused, table


def channel_body(args: argparse.Namespace) -> dict[str, Any]:
    """The PUT body from --file, or --slack / --webhook; --tenant sets the tenant."""
    given = [k for k in ("file", "slack", "webhook") if getattr(args, k)]
    if len(given) != 1:
        raise ValueError("give exactly one of --file, --slack or --webhook")
    if args.file:
        try:
            with open(args.file, encoding="utf-8") as f:
                body = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"--file {args.file}: {e}") from None
        if not isinstance(body, dict):
            raise ValueError("--file must hold a JSON object")
    elif args.slack:
        body = {"slack": {"webhook_url": args.slack}}
    else:
        body = {"webhook": {"url": args.webhook}}
    if args.tenant:
        body["tenant"] = args.tenant
    return body


def _row(ch: dict[str, Any]) -> tuple[str, ...]:
    cfg = ch[ch["kind"]]
    where = {"slack": lambda: cfg["webhook_url"], "webhook": lambda: cfg["url"],
             "email": lambda: f"{cfg['host']}:{cfg['port']} -> {', '.join(cfg['to'])}"}
    return ch["name"], ch["tenant"], ch["kind"], where[ch["kind"]]()


@exits_1_when_refused
def cmd_channel(args: argparse.Namespace) -> int:
    try:
        body = channel_body(args) if args.channel_action == "put" else None
    except ValueError as e:
        print(f"raftcron: {e}", file=sys.stderr)
        return EXIT_USAGE
    header = ("name", "tenant", "kind", "destination")
    path = "/v1/channels" + (f"/{quote(args.name, safe='')}" if "name" in args else "")
    client = client_for(args)
    try:
        if args.channel_action == "put":
            out = client.request("PUT", path, json=body, retries=3)
            rows = [_row(out)]
        elif args.channel_action == "list":
            out = client.request("GET", path, retries=3)
            rows = [_row(ch) for ch in out["channels"]]
        elif args.channel_action == "show":
            out = client.request("GET", path, retries=3)
            rows = [_row(out)]
            header = (*header[:3], f"destination (named by {out['job_count']} job(s))")
        else:
            out = client.request("DELETE", path, retries=3)
            rows, header = [(args.name, "deleted")], ("name", "state")
    finally:
        client.close()
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        table(header, rows)
    return 0


def register(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """The `channel` command group."""
    cp = sub.add_parser("channel", help="notification channels: Slack, e-mail, webhooks")
    csub = cp.add_subparsers(dest="channel_action", required=True, parser_class=parser_class)
    put = csub.add_parser("put", help="create or replace a channel")
    put.add_argument("name")
    put.add_argument("--file", help='channel JSON: {"slack"|"email"|"webhook": {...}}')
    put.add_argument("--slack", help="a Slack incoming-webhook URL")
    put.add_argument("--webhook", help="a webhook URL (signed with the tenant's key)")
    put.add_argument("--tenant")
    connection_args(put)
    put.set_defaults(func=cmd_channel)
    for name, help_text in (("list", "channels"), ("show", "one channel"),
                            ("delete", "delete a channel (refused while jobs name it)")):
        p = csub.add_parser(name, help=help_text)
        if name != "list":
            p.add_argument("name")
        connection_args(p)
        p.set_defaults(func=cmd_channel)
