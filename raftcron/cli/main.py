"""The `raftcron` command line: argument parsing only; work lives in the modules.

Each command group is a module with a `register(...)` that adds its subcommands (and its
`cmd_*` functions); `build_parser` registers them in the order `--help` lists them.
"""

from __future__ import annotations

import argparse
import sys

from raftcron.cli import (
    calendars,
    channels,
    deploy_init,
    groups,
    history,
    jobs,
    jobs_as_code,
    ops,
    runs,
    schedule_preview,
    serve,
    status,
    tokens,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        print(f"raftcron: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="raftcron", description="A distributed cron on three Raft nodes.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    ops.register(sub)
    deploy_init.register(sub)
    jobs_as_code.register(sub)
    schedule_preview.register(sub, _Parser)
    serve.register(sub)
    jsub = jobs.register(sub, _Parser)
    runs.register_job_runs(jsub)
    history.register_job_history(jsub)
    runs.register(sub, _Parser)
    calendars.register_bulk_pause(jsub)
    calendars.register(sub, _Parser)
    channels.register(sub, _Parser)
    groups.register(sub, _Parser)
    status.register(sub)
    tokens.register(sub, _Parser)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)
