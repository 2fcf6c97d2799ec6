"""`raftcron status [--watch]`: the cluster's nodes (role, term, commit and applied
index, lag) and its queues (runs due, the longest wait)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from raftcron.cli.common import DEFAULT_SERVER, TOKEN_HELP, client_for, fail, print_output
from raftcron.cli.runs import positive_seconds, watch


def cmd_status(args: argparse.Namespace) -> int:
    if args.watch:
        return watch(lambda: _status_once(args), args.interval)
    return _status_once(args)


def _status_once(args: argparse.Namespace) -> int:
    from raftcron.cli.client import ApiError

    try:
        st = client_for(args).request("GET", "/v1/cluster/nodes", retries=2)
    except ApiError as e:
        return fail(str(e))

    def cell(node: dict[str, Any], key: str) -> str:
        value = node.get(key)
        return "" if value is None else str(value)

    rows = [(n["node_id"], n.get("role", "") if n.get("reachable") else "unreachable",
             *(cell(n, k) for k in ("term", "epoch", "leader_id", "commit_index",
                                    "last_applied_index", "replication_lag")))
            for n in st["nodes"]]
    try:
        queues = client_for(args).request("GET", "/v1/status/queues", retries=2)["queues"]
    except ApiError as e:  # a node too old to say, or a token that may not read it
        queues, note = None, f"queues: not available ({e})"
    if args.json:
        print_output(args, {**st, "queues": queues})
        return 0
    print_output(args, st, rows,
           ("node", "role", "term", "epoch", "leader", "commit", "applied", "lag"))
    print()
    if queues is None:
        print(note)
    elif not queues:
        print("queues: none")
    else:
        # A pool that falls behind shows here first: runs due, and the longest wait.
        print_output(args, queues, [(q["queue"], str(q["depth"]),
                                     f'{q["oldest_due_age_s"]:.1f}') for q in queues],
                     ("queue", "due", "oldest_wait_s"))
    return 0


def register(sub: Any) -> None:
    st = sub.add_parser("status", help="cluster status")
    st.add_argument("--server", default=DEFAULT_SERVER)
    st.add_argument("--token", default=os.environ.get("RAFTCRON_TOKEN"), help=TOKEN_HELP)
    st.add_argument("--json", action="store_true")
    st.add_argument("--watch", action="store_true", help="redraw every --interval seconds")
    st.add_argument("--interval", type=positive_seconds, default=2.0,
                    help="seconds between redraws with --watch (default 2)")
    st.set_defaults(func=cmd_status)
