"""`python -m chaos run|check`."""

from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos")
    sub = ap.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run the chaos suite (root: uses network namespaces)")
    run.add_argument("--profile", choices=("ci", "long", "soak"), default="ci")
    run.add_argument("--seed", type=int)
    run.add_argument("--duration", type=float, help="seconds of faults (soak; ci caps it)")
    run.add_argument("--out", help="output directory (default chaos-out/<seed>)")
    run.add_argument("--no-check", action="store_true", help=argparse.SUPPRESS)
    chk = sub.add_parser("check", help="check a finished run offline")
    chk.add_argument("path", help="the run's directory or its history.jsonl")
    args = ap.parse_args(argv)

    if args.cmd == "check":
        from chaos.checker import check_dir

        path = Path(args.path)
        summary = check_dir(path.parent if path.is_file() else path)
        import json

        print(json.dumps(summary["verdict"], indent=2))
        return 0 if summary["verdict"]["valid"] else 1

    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    out = Path(args.out or f"chaos-out/{seed}").resolve()
    from chaos import runner

    if os.environ.get("CHAOS_INSIDE") == "1":
        return runner.run_inner(args.profile, seed, args.duration, out)
    if os.geteuid() != 0:
        print("chaos: run needs root (network namespaces, nftables)", file=sys.stderr)
        return 2
    return runner.run_outer(args.profile, seed, args.duration, out)


if __name__ == "__main__":
    sys.exit(main())
