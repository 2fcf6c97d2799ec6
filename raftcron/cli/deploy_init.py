"""`raftcron deploy init`: the files the shipped `deploy/` configs name.

`deploy/n*.toml` read `/etc/raftcron/cluster.secret` and `/etc/raftcron/tokens.json`, and
the compose worker reads `/etc/raftcron/worker.token`; the containers mount them from the
`deploy/` directory. This writes the three (mode 0600) and prints the two tokens once (only
their hashes stay in tokens.json). The image runs as uid 10001, which must be able to read
them: `--uid 10001` (as root) hands them to that user.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from dataclasses import dataclass

from raftcron.auth import AuthError, create_token
from raftcron.private_files import write_private

SECRET_FILE = "cluster.secret"
TOKENS_FILE = "tokens.json"
WORKER_TOKEN_FILE = "worker.token"
IMAGE_UID = 10001


@dataclass(frozen=True)
class DeployTokens:
    admin: str
    worker: str


def init_deploy(directory: str, uid: int | None = None) -> DeployTokens:
    """Write the cluster secret, a tokens file with an `admin` and a `worker` token, and
    the worker's token file into `directory`. Refuses (AuthError) when any of them exists
    already: a second run must not silently replace the secret of a running cluster."""
    if not os.path.isdir(directory):
        raise AuthError(f"directory {directory!r} does not exist")
    paths = [os.path.join(directory, name)
             for name in (SECRET_FILE, TOKENS_FILE, WORKER_TOKEN_FILE)]
    present = [p for p in paths if os.path.lexists(p)]
    if present:
        raise AuthError(f"{present[0]} exists already: remove the old files first, or keep "
                        "using them")
    secret_path, tokens_path, worker_path = paths
    # Exclusive and 0600 from the start (private_files); tokens.json is too (auth._write).
    write_private(secret_path, secrets.token_urlsafe(32) + "\n", exclusive=True)
    admin = create_token(tokens_path, ["admin"], "admin")
    worker = create_token(tokens_path, ["worker"], "worker")
    write_private(worker_path, worker + "\n", exclusive=True)
    if uid is not None:
        for path in paths:
            os.chown(path, uid, uid)
    return DeployTokens(admin=admin, worker=worker)


def cmd_deploy_init(args: argparse.Namespace) -> int:
    try:
        tokens = init_deploy(args.dir, args.uid)
    except (AuthError, OSError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        print(f"raftcron: deploy init: {reason}", file=sys.stderr)
        return 2
    print(f"admin {tokens.admin}")
    print(f"worker {tokens.worker}")
    owner = f" (owned by uid {args.uid})" if args.uid is not None else ""
    print(f"raftcron: wrote {SECRET_FILE}, {TOKENS_FILE} and {WORKER_TOKEN_FILE} in "
          f"{args.dir}{owner}; the tokens are shown only now", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    dp = sub.add_parser("deploy", help="prepare a deployment")
    dsub = dp.add_subparsers(dest="deploy_command", required=True)
    ip = dsub.add_parser("init", help="write the cluster secret, the tokens file and the "
                         "worker's token file that deploy/*.toml name, and print the tokens")
    ip.add_argument("--dir", default="deploy", help="where to write them (default: deploy)")
    ip.add_argument("--uid", type=int, metavar="UID",
                    help=f"give the files to this uid and gid (the image's is {IMAGE_UID}; "
                         "needs root)")
    ip.set_defaults(func=cmd_deploy_init)
