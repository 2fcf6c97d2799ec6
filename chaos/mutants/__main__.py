"""`python -m chaos.mutants [--seed N] [NAME ...]`: each planted bug, CAUGHT or MISSED.

For each mutant: the tracked files of this checkout are copied to a scratch directory,
the mutant's edits applied there, and the chaos ci profile run from that copy (its node
and worker processes import the mutated `raftcron`: the copy leads PYTHONPATH). The
checker's verdict decides: invalid is CAUGHT (with the checks that fired), valid is
MISSED. Exit 0 only when every mutant run was CAUGHT. Needs root, like `chaos run`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chaos.mutants import MUTANTS, Mutant

ROOT = Path(__file__).resolve().parent.parent.parent


class StaleMutant(Exception):
    """An edit's text no longer stands exactly once in its file."""


def copy_tree(dest: Path) -> None:
    """The files git tracks (and untracked, unignored ones), as they are now."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def apply(mutant: Mutant, tree: Path) -> None:
    for edit in mutant.edits:
        path = tree / edit.path
        text = path.read_text()
        if text.count(edit.old) != 1:
            raise StaleMutant(f"{mutant.name}: {edit.path} holds its text "
                              f"{text.count(edit.old)} times, not once")
        path.write_text(text.replace(edit.old, edit.new))


def run_one(mutant: Mutant, seed: int, out: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as scratch:
        tree = Path(scratch)
        copy_tree(tree)
        apply(mutant, tree)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
        started = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "chaos", "run", "--profile", "ci", "--seed", str(seed),
             "--out", str(out)], cwd=tree, env=env, capture_output=True, text=True)
        elapsed = time.monotonic() - started
    (out / "mutant-run.log").parent.mkdir(parents=True, exist_ok=True)
    (out / "mutant-run.log").write_text(run.stdout + run.stderr)
    verdict = _verdict(run.stdout)
    if verdict is None:
        return {"mutant": mutant.name, "result": "ERROR", "exit": run.returncode,
                "elapsed_s": round(elapsed), "log": str(out / "mutant-run.log")}
    fired = sorted(verdict.get("violations", {}))
    return {"mutant": mutant.name, "result": "MISSED" if verdict.get("valid") else "CAUGHT",
            "violations": verdict.get("violations", {}), "expected": list(mutant.expected),
            "expected_fired": sorted(set(fired) & set(mutant.expected)),
            "elapsed_s": round(elapsed), "out": str(out)}


def _verdict(stdout: str) -> dict | None:
    """The checker's verdict: the last JSON object `chaos run` printed at the start of a
    line (lines after it, such as where the report went, are ignored)."""
    start = stdout.rfind("\n{")
    text = stdout[start + 1:] if start >= 0 else stdout
    try:
        verdict, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    return verdict if isinstance(verdict, dict) else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos.mutants")
    ap.add_argument("names", nargs="*", help="mutants to run (default: all)")
    ap.add_argument("--seed", type=int, default=101)
    ap.add_argument("--out", default="chaos-out/mutants")
    ap.add_argument("--list", action="store_true", help="list the mutants and stop")
    args = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        print(f"chaos.mutants: no mutant named {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if args.list:
        for m in chosen:
            print(f"{m.name}: {m.bug}")
        return 0
    try:
        for m in chosen:  # every mutant applies before any run starts
            with tempfile.TemporaryDirectory() as scratch:
                for edit in m.edits:
                    (Path(scratch) / edit.path).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(ROOT / edit.path, Path(scratch) / edit.path)
                apply(m, Path(scratch))
    except StaleMutant as e:
        print(f"chaos.mutants: STALE {e}", file=sys.stderr)
        return 2
    results = []
    for m in chosen:
        print(f"chaos.mutants: {m.name}: {m.bug} (seed {args.seed})", flush=True)
        result = run_one(m, args.seed, Path(args.out).resolve() / m.name)
        results.append(result)
        print(f"chaos.mutants: {result['result']:6} {m.name} "
              f"{json.dumps(result.get('violations', {}))} ({result['elapsed_s']} s)",
              flush=True)
    print(json.dumps(results, indent=2))
    return 0 if all(r["result"] == "CAUGHT" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
