"""Planted product bugs the chaos checker must catch.

Each mutant is a small edit to the product's source, the kind of slip a change could
make: `python -m chaos.mutants` applies one at a time to a copy of the tree, runs the chaos
ci profile on it, and says CAUGHT (the checker judged the run invalid, naming the checks)
or MISSED (it judged it valid) for each. A mutant whose text no longer stands in its file
exactly once is STALE: the runner stops, since it would test nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    path: str  # relative to the repository's root
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str
    edits: tuple[Edit, ...]
    # The checks that should fire (informational: any violation counts as caught).
    expected: tuple[str, ...] = ()


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "early_start",
        "the worker starts every run leased ahead 0.8 s before its instant",
        (Edit("raftcron/worker/runner.py",
              "    return 0.0 if start is None else start\n",
              "    return 0.0 if start is None else start - 0.8\n"),),
        ("early_fire",),
    ),
    Mutant(
        "stale_token_accepted",
        "a completion from a lease that expired (its attempt lost, a retry holding a newer "
        "token) is accepted and credited as the run's outcome",
        (Edit("raftcron/state/attempts.py",
              '        if status != "running":\n'
              "            results.append({\"attempt_id\": attempt_id, **rejected(\n"
              "                errors.LEASE_EXPIRED,",
              '        if status not in ("running", "lost"):\n'
              "            results.append({\"attempt_id\": attempt_id, **rejected(\n"
              "                errors.LEASE_EXPIRED,"),),
        ("stale_write", "rerun_after_success", "double_effect"),
    ),
    Mutant(
        "leased_twice",
        "the dispatcher and the Lease apply take running attempts as well as pending ones, "
        "so one attempt is leased again while it runs",
        (Edit("raftcron/leader/dispatch.py",
              "            \"SELECT id, tenant, job_id, not_before_ms FROM attempts WHERE "
              "status = 'pending' \"\n"
              "            f\"AND queue IN ({marks}) AND not_before_ms <= ?{not_held} \"\n",
              "            \"SELECT id, tenant, job_id, not_before_ms FROM attempts WHERE "
              "status IN ('pending', 'running') \"\n"
              "            f\"AND queue IN ({marks}) AND not_before_ms <= ?{not_held} \"\n"),
         Edit("raftcron/state/attempts.py",
              "        if (row is None or row[4] != \"pending\" ",
              "        if (row is None or row[4] not in (\"pending\", \"running\") ")),
        ("double_execution", "double_effect", "token_order"),
    ),
)
