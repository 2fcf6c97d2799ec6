"""`raftcron group set|show|list`: concurrency groups, their limits, holders and waiters.

Exit codes as everywhere: 0 done; 1 the API refused or no node answered (one line on
stderr); 2 bad arguments."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

from raftcron.cli.common import api_call, connection_args, exits_1_when_refused, table, url_path


def _limit(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= 10_000:
        raise argparse.ArgumentTypeError("must be an integer from 1 to 10000")
    return int(text)


def register(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    gp = sub.add_parser("group", help="concurrency groups: limits, holders, waiters")
    gsub = gp.add_subparsers(dest="group_command", required=True, parser_class=parser_class)
    put = gsub.add_parser("set", help="set a group's limit (runs holding leases at once)")
    put.add_argument("name")
    put.add_argument("--limit", type=_limit, required=True)
    put.add_argument("--tenant", help="the group's tenant (default: the token's only "
                     "tenant, else default)")
    connection_args(put)
    put.set_defaults(func=cmd_group_set)
    show = gsub.add_parser("show", help="a group's limit, holders and waiters")
    show.add_argument("name")
    show.add_argument("--tenant")
    connection_args(show)
    show.set_defaults(func=cmd_group_show)
    listing = gsub.add_parser("list", help="every group the token may see")
    connection_args(listing)
    listing.set_defaults(func=cmd_group_list)


def _print_group(group: dict[str, Any]) -> None:
    configured = "" if group["configured"] else " (not set: default)"
    print(f"group {group['name']} of tenant {group['tenant']}: limit {group['limit']}"
          f"{configured}, {group['holding']} holding, {group['waiting']} waiting")
    if group["holders"]:
        table(("holding", "job", "worker", "leased"),
               [(h["occurrence_id"], h["job_id"], h["worker_id"] or "-", h["leased_at"] or "-")
                for h in group["holders"]])
    if group["waiters"]:
        table(("waiting", "job", "due"),
               [(w["occurrence_id"], w["job_id"], w["due"]) for w in group["waiters"]])


@exits_1_when_refused
def cmd_group_set(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"limit": args.limit}
    if args.tenant:
        body["tenant"] = args.tenant
    group = api_call(args, "PUT", f"/v1/concurrency-groups/{url_path(args.name)}", json=body,
                     headers={"Idempotency-Key": f"cli-{uuid.uuid4().hex}"},
                     retries=3)
    if args.json:
        print(json.dumps(group, indent=2))
    else:
        _print_group(group)
    return 0


@exits_1_when_refused
def cmd_group_show(args: argparse.Namespace) -> int:
    params = {"tenant": args.tenant} if args.tenant else None
    group = api_call(args, "GET", f"/v1/concurrency-groups/{url_path(args.name)}",
                     params=params)
    if args.json:
        print(json.dumps(group, indent=2))
    else:
        _print_group(group)
    return 0


@exits_1_when_refused
def cmd_group_list(args: argparse.Namespace) -> int:
    data = api_call(args, "GET", "/v1/concurrency-groups")
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    groups = data["concurrency_groups"]
    if not groups:
        print("no concurrency groups", file=sys.stderr)
        return 0
    table(("tenant", "group", "limit", "holding", "waiting"),
           [(g["tenant"], g["name"], f"{g['limit']}{'' if g['configured'] else ' (default)'}",
             str(g["holding"]), str(g["waiting"])) for g in groups])
    return 0

