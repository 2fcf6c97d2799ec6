"""`raftcron token create|list|revoke`: the bearer tokens of a tokens file, named by
`--tokens-file` or by a node config's `tokens_file`. Works on the file, not through the
API; nodes pick the changes up without a restart.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from raftcron.cli.common import fail


def _tokens_path(args: argparse.Namespace) -> tuple[str, Any]:
    """The tokens file named by --tokens-file or by --config's `tokens_file` (and that
    config, or None)."""
    from raftcron.config import ConfigError, load_config

    if args.tokens_file:
        return args.tokens_file, None
    config = load_config(args.config)
    if config.tokens_file is None:
        raise ConfigError(f"config {args.config!r} has auth = \"off\": it uses no "
                          "tokens file")
    return config.tokens_file, config


def cmd_token_create(args: argparse.Namespace) -> int:
    from raftcron.auth import AuthError, create_token, parse_expires_in, validate_scopes
    from raftcron.config import ConfigError

    try:
        validate_scopes(args.scope or [])
        expires_in = parse_expires_in(args.expires_in) if args.expires_in else None
        path, _ = _tokens_path(args)
        if args.name is not None and not (1 <= len(args.name) <= 64
                                          and args.name.isprintable()):
            raise AuthError("--name must be 1-64 printable characters")
        token = create_token(path, args.scope, args.name or "", expires_in)
    except (AuthError, ConfigError, OSError) as e:
        return fail(str(e))
    print(token)
    print(f"raftcron: token with scopes {' '.join(args.scope)} added to {path}; it is shown "
          "only now (nodes pick it up without a restart)", file=sys.stderr)
    return 0


def _when(unix_s: Any) -> str:
    return "-" if not isinstance(unix_s, int | float) else time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_s))


def cmd_token_list(args: argparse.Namespace) -> int:
    """Names, scopes, created, last used (as the --config node saw it) and expiry."""
    from raftcron.auth import TOKEN_USAGE_FILE, AuthError, list_tokens, read_usage
    from raftcron.config import ConfigError

    try:
        path, config = _tokens_path(args)
        usage = read_usage(os.path.join(config.data_dir, TOKEN_USAGE_FILE)) if config else {}
        rows = list_tokens(path, usage)
    except (AuthError, ConfigError, OSError) as e:
        return fail(str(e))
    now = time.time()
    for row in rows:
        row["expired"] = row["expires_at"] is not None and now >= row["expires_at"]
    if args.json:
        print(json.dumps({"tokens": rows}, indent=2))
        return 0
    print(f"{'NAME':<24} {'SCOPES':<28} {'CREATED':<21} {'LAST USED':<21} EXPIRES")
    for r in rows:
        expires = _when(r["expires_at"]) + (" (expired)" if r["expired"] else "")
        print(f"{r['name']:<24} {','.join(r['scopes']):<28} {_when(r['created_at']):<21} "
              f"{_when(r['last_used_at']):<21} {expires}")
    if config is None:
        print("raftcron: last-used times are kept per node: pass --config <node.toml> to "
              "see that node's", file=sys.stderr)
    return 0


def cmd_token_revoke(args: argparse.Namespace) -> int:
    from raftcron.auth import AuthError, revoke_token
    from raftcron.config import ConfigError

    try:
        path, _ = _tokens_path(args)
        removed = revoke_token(path, args.name)
    except (AuthError, ConfigError, OSError) as e:
        return fail(str(e))
    print(f"raftcron: revoked {removed} token(s) named {args.name!r} in {path} (nodes refuse "
          "it as soon as they see the file change; copy the file to every node)",
          file=sys.stderr)
    return 0


def register(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    tp = sub.add_parser("token", help="manage API bearer tokens")
    tsub = tp.add_subparsers(dest="token_command", required=True, parser_class=parser_class)
    tc = tsub.add_parser("create", help="add a token to a tokens file and print it once")
    tc.add_argument("--scope", action="append", required=True,
                    help="admin, read, worker[:q1,q2] or tenant:<name> (repeatable)")
    tc.add_argument("--name", help="a label for the token (shown in 403 messages)")
    tc.add_argument("--expires-in", help="refuse the token after this long (90s, 12h, 30d, 2w)")
    tl = tsub.add_parser("list", help="names, scopes, created, last used, expiry (never the "
                                      "tokens)")
    tl.add_argument("--json", action="store_true")
    tr = tsub.add_parser("revoke", help="remove the tokens with this name")
    tr.add_argument("name")
    for parser, func in ((tc, cmd_token_create), (tl, cmd_token_list), (tr, cmd_token_revoke)):
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--tokens-file", help="the tokens file")
        where.add_argument("--config", help="a node config: its tokens_file (and data_dir, "
                                            "for last-used times)")
        parser.set_defaults(func=func)
