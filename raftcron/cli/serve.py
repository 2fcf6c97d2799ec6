"""`raftcron node`, `up` and `worker`: the commands that run raftcron's own processes in
the foreground (one cluster node, a local cluster with workers, one worker).

What they check before starting is refused with one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from typing import Any

from raftcron.cli.common import DEFAULT_SERVER, TOKEN_HELP, fail


def _setup_logging(level: str, json_logs: bool = False) -> None:
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), format=fmt,
                        stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def cmd_node(args: argparse.Namespace) -> int:
    from raftcron.auth import AuthError, TokenStore
    from raftcron.cluster.levels import spoken_level
    from raftcron.config import ConfigError, load_config
    from raftcron.node import run_node
    from raftcron.state.db import sqlite_too_old

    _setup_logging(args.log_level)

    def path(value: str | None) -> str | None:  # flags are relative to the working directory
        return os.path.abspath(value) if value else None

    overrides = {"node_id": args.id, "http_port": args.http_port, "raft_addr": args.raft_addr,
                 "data_dir": args.data_dir, "secret_file": args.secret_file,
                 "webhooks": args.webhook, "webhook_secret_file": args.webhook_secret_file,
                 "watchdog_url": args.watchdog_url, "tokens_file": path(args.tokens_file),
                 "tls_cert": path(args.tls_cert), "tls_key": path(args.tls_key),
                 "retention": args.retention}
    try:
        config = load_config(args.config, overrides)
        config.read_secret()
        config.read_webhook_secret()
        config.check_tls_files()
        config.check_ports_free()
        if (too_old := sqlite_too_old()) is not None:
            raise ConfigError(too_old)
        try:
            spoken_level()  # a test-only level override, checked before anything starts
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if config.tokens_file is not None:
            if not os.path.isfile(config.tokens_file):
                raise ConfigError(f"tokens file {config.tokens_file!r} does not exist: create "
                                  f"one with `raftcron token create --scope admin "
                                  f"--config {args.config}`")
            TokenStore(config.tokens_file)
    except (ConfigError, AuthError) as e:
        return fail(str(e))
    run_node(config)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from raftcron.ops.local import run_up

    if not 1 <= args.nodes <= 7:
        return fail("--nodes must be between 1 and 7")
    if args.workers < 0:
        return fail("--workers must be 0 or more")
    # HTTP ports from --port-base, Raft ports from --port-base + 100.
    highest = 65535 - 100 - args.nodes + 1
    if not 1024 <= args.port_base <= highest:
        return fail(f"--port-base must be between 1024 and {highest} "
                     "(nodes use it and the ports after it, and 100 above for Raft)")
    return run_up(args.data_dir, args.nodes, args.port_base, workers=args.workers)


def cmd_worker(args: argparse.Namespace) -> int:
    from raftcron.worker.isolation import IsolationError
    from raftcron.worker.runner import WorkerOptions
    from raftcron.worker.runner import main as worker_main

    _setup_logging(args.log_level)
    servers = [s for s in args.server.split(",") if s]
    queues = [q for q in args.queues.split(",") if q]
    if args.concurrency < 1:
        return fail("--concurrency must be at least 1")
    if args.prefetch is not None and not 0 <= args.prefetch <= 1000:
        return fail("--prefetch must be between 0 and 1000")
    if not 0 <= args.refused_grace_s <= 86_400:
        return fail("--refused-grace-s must be between 0 and 86400")
    worker_id = args.id or f"{os.uname().nodename}-{os.getpid()}"
    if not re.fullmatch(r"[ -~]{1,128}", worker_id):  # as the API checks it (WORKER_ID_RE)
        return fail("--id must be 1-128 printable ASCII characters")
    try:
        token, run_as = worker_credentials(args)
    except IsolationError as e:
        return fail(str(e))
    return worker_main(servers, queues, args.concurrency, worker_id, token=token,
                       options=WorkerOptions(refused_grace_s=args.refused_grace_s,
                                             secrets_file=args.secrets_file,
                                             prefetch=args.prefetch),
                       run_as=run_as)


def worker_credentials(args: argparse.Namespace) -> tuple[str | None, Any]:
    """The worker's token (`--token-file`, else `--token` / $RAFTCRON_TOKEN) and the
    account its shell jobs run as (`--run-as`)."""
    from raftcron.worker.isolation import IsolationError, read_token_file, resolve_run_as

    run_as = resolve_run_as(args.run_as) if args.run_as else None
    from_env = os.environ.pop("RAFTCRON_TOKEN", None)  # jobs inherit os.environ
    if args.token_file:
        if args.token and args.token != from_env:
            raise IsolationError("give the token with --token or --token-file, not both")
        return read_token_file(args.token_file), run_as
    if args.token and args.token == from_env:
        logging.getLogger("raftcron.worker").warning(
            "the worker token came from $RAFTCRON_TOKEN: a job can read it in "
            "/proc/<worker pid>/environ; start the worker with --token-file instead")
    return args.token or None, run_as


def register(sub: Any) -> None:
    np_ = sub.add_parser("node", help="run one cluster node")
    np_.add_argument("--config", required=True)
    np_.add_argument("--id")
    np_.add_argument("--http-port", type=int)
    np_.add_argument("--raft-addr")
    np_.add_argument("--data-dir")
    np_.add_argument("--secret-file")
    np_.add_argument("--webhook", action="append", metavar="URL",
                     help="cluster-wide webhook receiver (repeatable; adds to config webhooks)")
    np_.add_argument("--webhook-secret-file",
                     help="HMAC key for X-Raftcron-Signature to the cluster-wide receivers "
                          "(default: the cluster webhook key generated on first start)")
    np_.add_argument("--watchdog-url", metavar="URL",
                     help="the leader pings this URL after ticks (at most every 5 s)")
    np_.add_argument("--tokens-file", help="bearer tokens (overrides config tokens_file)")
    np_.add_argument("--tls-cert", help="serve the API over HTTPS with this certificate (PEM)")
    np_.add_argument("--tls-key", help="the private key of --tls-cert (PEM)")
    np_.add_argument("--retention", help="prune finished history older than this "
                     "(e.g. 7d, 12h, 30m; 'off' keeps it forever; default 7d)")
    np_.add_argument("--log-level", default="INFO")
    np_.set_defaults(func=cmd_node)

    up = sub.add_parser("up", help="run a local cluster with a worker in the foreground")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--data-dir", default=".raftcron")
    up.add_argument("--port-base", type=int, default=8700)
    up.add_argument("--workers", type=int, default=1)
    up.set_defaults(func=cmd_up)

    wp = sub.add_parser("worker", help="run a worker that pulls runs over HTTP")
    wp.add_argument("--server", default=DEFAULT_SERVER, help="URL[,URL...]")
    wp.add_argument("--queues", default="default")
    wp.add_argument("--concurrency", type=int, default=4)
    wp.add_argument("--prefetch", type=int, default=None,
                    help="at most this many leases held beyond the concurrency, acknowledged "
                         "and waiting for a slot; fewer while runs are slow (default: 16 x "
                         "the concurrency; 0: lease only for free slots)")
    wp.add_argument("--id")
    wp.add_argument("--token", default=os.environ.get("RAFTCRON_TOKEN"), help=TOKEN_HELP)
    wp.add_argument("--token-file",
                    help="read the token from this file (mode 0600); keeps it out of the "
                         "worker's environment, where jobs could read it")
    wp.add_argument("--run-as", metavar="USER",
                    help="run shell jobs as this user and its groups (the worker must run "
                         "as root)")
    wp.add_argument("--refused-grace-s", type=float, default=60.0,
                    help="how long to keep asking while the token or queues are refused "
                         "(401/403) before the first lease, e.g. while a tokens file reaches "
                         "the nodes; then exit 2 (default 60)")
    wp.add_argument("--secrets-file",
                    help='JSON {"<tenant>/<name>": "value"} of the secrets job targets may '
                         'name as {"secret": "<name>"}; mode 0600')
    wp.add_argument("--log-level", default="INFO")
    wp.set_defaults(func=cmd_worker)
