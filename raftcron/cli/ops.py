"""Operations subcommands: `backup`, `restore` and `cluster add-node/remove-node/members`.

`register(sub)` adds them to the `raftcron` parser; `python -m raftcron.cli.ops` runs them
on their own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from typing import Any

import httpx

DEFAULT_SERVER = os.environ.get("RAFTCRON_SERVER", "http://127.0.0.1:8700")
TOKEN_HELP = "bearer token with the admin scope (default: $RAFTCRON_TOKEN)"


def _fail(message: str) -> int:
    print(f"raftcron: {message}", file=sys.stderr)
    return 2


def _headers(args: argparse.Namespace) -> dict[str, str]:
    return {"Authorization": f"Bearer {args.token}"} if args.token else {}


def _error_text(resp: httpx.Response) -> str:
    try:
        err = resp.json()["error"]
        field = f" ({err['field']})" if err.get("field") else ""
        return f"{err.get('message', '')}{field} [{resp.status_code} {err.get('code', '')}]"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {resp.status_code}: {resp.text[:200]}"


def _error_code(resp: httpx.Response) -> str | None:
    try:
        code = resp.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return code if isinstance(code, str) else None


def _leader_of(args: argparse.Namespace, server: str) -> str | None:
    """The leader's URL as `server` knows it (None: not known)."""
    try:
        view = httpx.get(f"{server}/v1/cluster", headers=_headers(args), timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return None
    url = view.get("leader_url") if isinstance(view, dict) else None
    return url.rstrip("/") if isinstance(url, str) and url else None


def _request(args: argparse.Namespace, method: str, path: str,
             body: dict[str, Any] | None = None) -> Any:
    """One request to the first server that answers (a 503 tries the next one). A
    follower refuses membership changes (503 `not_leader`): the leader it names is asked
    next."""
    last = "no server given"
    servers = [s.rstrip("/") for s in args.server.split(",") if s]
    for server in servers:
        try:
            resp = httpx.request(method, server + path, json=body, headers=_headers(args),
                                 timeout=30)
        except httpx.TransportError as e:
            last = f"{server}: {e}"
            continue
        if resp.status_code == 503:
            last = f"{server}: {_error_text(resp)}"
            if _error_code(resp) == "not_leader" and len(servers) < 16:
                leader = _leader_of(args, server)
                if leader is not None and leader not in servers:
                    servers.append(leader)
            continue
        if resp.status_code >= 400:
            raise RuntimeError(_error_text(resp))
        return resp.json()
    raise RuntimeError(last)


# --- backup / restore -------------------------------------------------------------------------

def cmd_backup(args: argparse.Namespace) -> int:
    from raftcron.ops.backup import BackupError, inspect
    from raftcron.private_files import open_private

    out = os.path.abspath(args.out)
    if os.path.isdir(out):
        return _fail(f"{out} is a directory; --out names the backup file")
    if not os.path.isdir(os.path.dirname(out)):
        return _fail(f"directory {os.path.dirname(out)} does not exist")
    if os.path.exists(out) and not args.force:
        return _fail(f"{out} exists (pass --force to overwrite it)")
    tmp = f"{out}.{uuid.uuid4().hex}.part"
    params = {"consistent": "false" if args.no_barrier else "true"}
    errors = []
    for server in [s.rstrip("/") for s in args.server.split(",") if s]:
        try:
            with httpx.stream("GET", f"{server}/v1/backup", params=params,
                              headers=_headers(args), timeout=120) as resp:
                if resp.status_code != 200:
                    resp.read()
                    errors.append(f"{server}: {_error_text(resp)}")
                    if resp.status_code == 503:
                        continue
                    break
                # 0600 from its first byte (private_files): a backup is as secret as
                # the state, and os.replace gives `out` this file's mode.
                with os.fdopen(open_private(tmp, os.O_WRONLY, exclusive=True), "wb") as f:
                    for chunk in resp.iter_bytes(1 << 20):
                        f.write(chunk)
                    f.flush()
                    os.fsync(f.fileno())
                node_id = resp.headers.get("x-raftcron-node-id", "?")
            info = inspect(tmp)
            os.replace(tmp, out)
        except httpx.TransportError as e:
            errors.append(f"{server}: {e}")
            continue
        except BackupError as e:
            errors.append(f"{server}: the download is not a valid backup: {e}")
            continue
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        print(json.dumps({"file": out, "node_id": node_id, **info.__dict__}, indent=2)
              if args.json else
              f"backup of {node_id} at index {info.last_applied_index} (epoch {info.epoch}): "
              f"{info.jobs} jobs, {info.occurrences} occurrences, {info.size_bytes} bytes "
              f"-> {out}")
        return 0
    return _fail("backup failed: " + "; ".join(errors))


def cmd_restore(args: argparse.Namespace) -> int:
    from raftcron.ops.backup import BackupError, restore

    try:
        info = restore(args.from_file, args.data_dir, force=args.force)
    except (BackupError, OSError) as e:
        return _fail(str(e))
    print(f"restored {info.jobs} jobs and {info.occurrences} occurrences (epoch {info.epoch}) "
          f"into {os.path.abspath(args.data_dir)}; restore every node of the new cluster "
          "from the same file, then start them")
    return 0


# --- membership ------------------------------------------------------------------------------

def _print_members(args: argparse.Namespace, view: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(view, indent=2))
        return
    leader = view.get("leader_id")
    for m in view["members"]:
        role = "leader" if m["id"] == leader else ""
        print(f"{m['id'] or '?':<12} {m['raft_addr']:<22} {m['http_url'] or '?':<30} {role}")


def _peer_block(view: dict[str, Any], exclude: str | None = None) -> str:
    lines = []
    for m in view["members"]:
        if m["id"] == exclude or not m["id"]:
            continue
        lines += ["[[peers]]", f'id = "{m["id"]}"', f'raft_addr = "{m["raft_addr"]}"',
                  f'http_url = "{m["http_url"]}"', ""]
    return "\n".join(lines)


def cmd_add_node(args: argparse.Namespace) -> int:
    from raftcron.cluster.membership import MembershipError, validate

    try:  # the server checks again; this answers bad input without one
        validate(args.id, args.raft_addr, args.http_url)
    except MembershipError as e:
        return _fail(f"add-node failed: {e.message} ({e.field})")
    try:
        view = _request(args, "POST", "/v1/cluster/members",
                        {"id": args.id, "raft_addr": args.raft_addr, "http_url": args.http_url})
    except RuntimeError as e:
        return _fail(f"add-node failed: {e}")
    _print_members(args, view)
    if args.json:
        return 0
    if view.get("added", True):
        print(f"\n{args.id} is a member: it proved it holds the cluster's secret and "
              "catches up by log or snapshot. Give it these peers in its config when "
              f"convenient (the replicated records already do):\n\n"
              f"{_peer_block(view, exclude=args.id)}", file=sys.stderr)
    else:
        print(f"\n{args.id} was already a member with this Raft address: nothing changed.",
              file=sys.stderr)
    return 0


def cmd_remove_node(args: argparse.Namespace) -> int:
    try:
        view = _request(args, "DELETE", f"/v1/cluster/members/{args.id}")
    except RuntimeError as e:
        return _fail(f"remove-node failed: {e}")
    _print_members(args, view)
    if not args.json:
        print(f"\n{args.id} is no longer a member: stop it and delete its data_dir (it must "
              "not come back with its old state).", file=sys.stderr)
    return 0


def cmd_members(args: argparse.Namespace) -> int:
    try:
        view = _request(args, "GET", "/v1/cluster/members")
    except RuntimeError as e:
        return _fail(str(e))
    _print_members(args, view)
    return 0


# --- parser ----------------------------------------------------------------------------------

def _api_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", default=DEFAULT_SERVER, help="URL[,URL...]")
    p.add_argument("--token", default=os.environ.get("RAFTCRON_TOKEN"), help=TOKEN_HELP)
    p.add_argument("--json", action="store_true")


def register(sub: argparse._SubParsersAction) -> None:
    bp = sub.add_parser("backup", help="download a consistent copy of the cluster state")
    _api_args(bp)
    bp.add_argument("--out", required=True, help="file to write (a SQLite database)")
    bp.add_argument("--force", action="store_true", help="overwrite --out")
    bp.add_argument("--no-barrier", action="store_true",
                    help="copy the node's state as is (default: first commit a barrier so "
                         "every acknowledged write is included)")
    bp.set_defaults(func=cmd_backup)

    rp = sub.add_parser("restore", help="prepare a fresh node data dir from a backup")
    rp.add_argument("--from", dest="from_file", required=True, metavar="FILE")
    rp.add_argument("--data-dir", required=True)
    rp.add_argument("--force", action="store_true",
                    help="delete the node state already in --data-dir")
    rp.set_defaults(func=cmd_restore)

    cp = sub.add_parser("cluster", help="cluster membership")
    csub = cp.add_subparsers(dest="cluster_command", required=True)
    add = csub.add_parser("add-node", help="add a running node as a voter (start it first, "
                          "with an empty data_dir and the members as its peers)")
    _api_args(add)
    add.add_argument("--id", required=True)
    add.add_argument("--raft-addr", required=True, metavar="HOST:PORT")
    add.add_argument("--http-url", required=True, metavar="URL")
    add.set_defaults(func=cmd_add_node)
    rem = csub.add_parser("remove-node", help="remove a voter (not the leader)")
    _api_args(rem)
    rem.add_argument("--id", required=True)
    rem.set_defaults(func=cmd_remove_node)
    mem = csub.add_parser("members", help="the voters as this node sees them")
    _api_args(mem)
    mem.set_defaults(func=cmd_members)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="raftcron")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
