"""Checks on job side effects: the sink's offers against the cluster's attempts.

The sink records every offer with its raw fencing token (chaos/sink.py); the fence is
decided here, by replaying the offers of each key in arrival order: an offer is *accepted*
when its token is at least the highest accepted so far for its key, and *stale* otherwise
(a resource guarded by the token would refuse it). On that replay:

- stale_write: a stale offer whose attempt the cluster recorded as `succeeded`: the run's
  success was credited to a lease that had been superseded (a stale completion accepted);
- token_order: a newer attempt (higher number) of one occurrence wrote with a token that
  the fence ranks at or below an older one's, or the cluster's own attempts of one
  occurrence carry tokens that do not strictly increase with the attempt number;
- token_reused: one token offered by two attempts;
- double_effect: two accepted effects of different attempts of one occurrence although
  the first attempt's completion was acknowledged (`succeeded` on a node): a succeeded run
  ran again;
- double_execution: one attempt offered its effect twice or more. The effect is one
  `curl` without retry at the end of the job (an HTTP target: one request), and a worker
  starts an attempt only once its lease is acknowledged, so two offers of one attempt mean
  its job ran twice, whatever the tokens (the fence calls a second offer at the same token
  a replay, which a guarded resource would let through);
- early_fire: a scheduled run whose start record (posted by the job process before its
  own sleep; a group job's hold) or effect reached the sink more than the clock guard's
  bound plus the sink's clock error before its instant. The bound is the guard's: a
  leader whose clock is off by less than it (the clock nemesis bumps from 4 ms) may
  still lease, and a worker following it starts that much early by the real clock;
- success_without_effect: a `succeeded` occurrence of a sink-writing job whose succeeded
  attempt never offered its effect.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from chaos.report_model import Report, iso, ts

# The clock guard's bound (ARCHITECTURE.md 3.6-3.7: no job starts before its instant by the
# real clock, and a leader whose clock is off by more than this does not tick).
GUARD_BOUND_S = 0.5
# The sink stamps arrivals with the harness machine's own clock plus the one offset that
# every node starts with (passed on its command line), so its error against the nodes'
# unskewed clocks is the stamping granularity: the sink thread's scheduling delay only ever
# makes an effect look later, never earlier. 50 ms is a generous bound for that.
SINK_CLOCK_ERROR_S = 0.05
EARLY_BOUND_S = GUARD_BOUND_S + SINK_CLOCK_ERROR_S


def attempt_number(attempt_id: str | None) -> int | None:
    if not attempt_id or "~" not in attempt_id:
        return None
    try:
        return int(attempt_id.rsplit("~", 1)[1])
    except ValueError:
        return None


def merged_attempts(attempts: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """occurrence id -> attempts, merged over every node's read (a terminal status on any
    node wins over a non-terminal one on a lagging node)."""
    rank = {"succeeded": 3, "failed": 2, "lost": 2, "timed_out": 2, "cancelled": 2}
    best: dict[str, dict[str, Any]] = {}
    occ_of: dict[str, str] = {}
    for per_occ in attempts.values():
        for occ_id, lst in (per_occ or {}).items():
            for a in lst or []:
                cur = best.get(a["id"])
                if cur is None or rank.get(a["status"], 0) > rank.get(cur["status"], 0):
                    best[a["id"]] = a
                occ_of[a["id"]] = occ_id
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for aid, a in best.items():
        out[occ_of[aid]].append(a)
    for lst in out.values():
        lst.sort(key=lambda a: a["number"])
    return dict(out)


def replay_fence(sink: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The offers in arrival order, each with the checker's verdict (`accept`, `replay`
    for the same attempt writing again at the highest token, or `stale`)."""
    offers = sorted(sink, key=lambda s: s.get("seq", 0)) if all(
        "seq" in s for s in sink) else list(sink)
    highest: dict[str, tuple[int, str | None]] = {}
    out = []
    for s in offers:
        if s.get("event", "offer") != "offer":
            continue
        key, token = s.get("key") or s.get("occurrence") or "", int(s.get("token", -1))
        prev = highest.get(key)
        if prev is None or token > prev[0]:
            verdict = "accept"
        elif token == prev[0]:
            verdict = "replay" if s.get("attempt") == prev[1] else "accept"
        else:
            verdict = "stale"
        if verdict != "stale":
            highest[key] = (token, s.get("attempt"))
        out.append({**s, "fence": verdict, "fence_prev": prev[0] if prev else None})
    return out


def sink_writing_jobs(ops: list[dict[str, Any]]) -> set[str]:
    """Jobs whose target posts its effect to the sink (every run of them must show up)."""
    out = set()
    for op in ops:
        target = (op["invoke"].get("spec") or {}).get("target", {})
        if op["f"] == "create" and "/effect" in str(target.get("shell", "")) + str(
                (target.get("http") or {}).get("url", "")):
            out.add(op["invoke"]["job"])
    return out


def resolve_offers(sink: list[dict[str, Any]], nodes: dict[str, Any],
                   merged: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The offers, each naming its attempt and instant. HTTP targets do not name their
    attempt: the token (unique per attempt) does."""
    by_token = {a["fencing_token"]: a["id"] for lst in merged.values() for a in lst
                if a.get("fencing_token") is not None}
    sched_of = {o["id"]: o["scheduled_for"] for n in nodes.values()
                for o in n.get("occurrences", [])}
    return [s if s.get("attempt") and s.get("scheduled_for") else
            {**s, "attempt": s.get("attempt") or by_token.get(int(s.get("token", -1))),
             "scheduled_for": s.get("scheduled_for") or sched_of.get(s.get("occurrence"))}
            for s in sink]


def check_effects(rep: Report, sink: list[dict[str, Any]], nodes: dict[str, Any],
                  attempts: dict[str, Any], ops: list[dict[str, Any]],
                  starts: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """`sink`: the offers; `starts`: the records a job process posts as it starts, before
    its own sleep (`start`, and a group job's `hold` of phase start), which the
    early-start check judges as well as the effects."""
    merged = merged_attempts(attempts)
    sink = resolve_offers(sink, nodes, merged)
    offers = replay_fence(sink)
    status_of = {a["id"]: a["status"] for lst in merged.values() for a in lst}
    kinds = {o["id"]: o["kind"] for n in nodes.values() for o in n.get("occurrences", [])}
    _check_tokens(rep, offers, merged, status_of)
    reexec = _check_double_effect(rep, offers, status_of)
    _check_double_execution(rep, offers)
    early = _check_early(rep, [*offers, *starts], kinds)
    _check_success_has_effect(rep, offers, nodes, merged, sink_writing_jobs(ops))
    stale = [o for o in offers if o["fence"] == "stale"]
    return {"offers": len(offers),
            "accepted": sum(1 for o in offers if o["fence"] == "accept"),
            "replays": sum(1 for o in offers if o["fence"] == "replay"),
            "stale_fenced": len(stale),
            "stale_examples": [{k: s.get(k) for k in ("key", "attempt", "token", "fence_prev",
                                                      "worker", "cluster_wall")}
                               for s in stale[:20]],
            "keys": len({o.get("key") for o in offers}),
            "re_executions_accepted": reexec, "earliest_effect_s": early,
            "early_bound_s": EARLY_BOUND_S}


def _check_tokens(rep: Report, offers: list[dict[str, Any]],
                  merged: dict[str, list[dict[str, Any]]], status_of: dict[str, str]) -> None:
    owner: dict[int, str] = {}
    accepted_numbers: dict[str, int] = {}
    for s in offers:
        attempt = s.get("attempt") or ""
        token = int(s.get("token", -1))
        first = owner.setdefault(token, attempt)
        if first != attempt:
            rep.add("token_reused", key=s.get("key"), token=token, attempts=[first, attempt])
        if s["fence"] == "stale":
            if status_of.get(attempt) == "succeeded":
                rep.add("stale_write", key=s.get("key"), attempt=attempt, token=token,
                        fenced_by=s["fence_prev"],
                        problem="a superseded lease's run was recorded succeeded")
            number = attempt_number(attempt)
            newest = accepted_numbers.get(s.get("key") or "")
            if number is not None and newest is not None and number > newest:
                rep.add("token_order", key=s.get("key"), attempt=attempt, token=token,
                        fenced_by=s["fence_prev"],
                        problem="a newer attempt's write ranks below an older attempt's")
        elif s["fence"] == "accept":
            number = attempt_number(attempt)
            if number is not None:
                accepted_numbers[s.get("key") or ""] = number
    for occ_id, lst in merged.items():
        tokens = [(a["number"], a.get("fencing_token")) for a in lst
                  if a.get("fencing_token") is not None]
        for (n1, t1), (n2, t2) in zip(tokens, tokens[1:], strict=False):
            if t2 <= t1:
                rep.add("token_order", occurrence=occ_id, attempts=[n1, n2], tokens=[t1, t2],
                        problem="the cluster's attempt tokens do not increase")


def _check_double_effect(rep: Report, offers: list[dict[str, Any]],
                         status_of: dict[str, str]) -> int:
    per_occ: dict[str, list[str]] = defaultdict(list)
    for s in offers:
        if s["fence"] == "accept" and s.get("occurrence"):
            if s.get("attempt") not in per_occ[s["occurrence"]]:
                per_occ[s["occurrence"]].append(s.get("attempt") or "")
    reexec = 0
    for occ_id, attempts in per_occ.items():
        if len(attempts) < 2:
            continue
        reexec += len(attempts) - 1
        first = attempts[0]
        if status_of.get(first) == "succeeded":
            rep.add("double_effect", occurrence=occ_id, attempts=attempts,
                    problem=f"{first} was acknowledged as succeeded, yet "
                            f"{attempts[1]} wrote its effect too")
    return reexec


def _check_double_execution(rep: Report, offers: list[dict[str, Any]]) -> None:
    by_attempt: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in offers:
        if s.get("attempt"):
            by_attempt[s["attempt"]].append(s)
    for attempt, lst in sorted(by_attempt.items()):
        if len(lst) > 1:
            rep.add("double_execution", occurrence=lst[0].get("occurrence"), attempt=attempt,
                    offers=len(lst), tokens=[s.get("token") for s in lst],
                    seqs=[s.get("seq") for s in lst],
                    workers=sorted({str(s.get("worker")) for s in lst}),
                    problem="one attempt wrote its effect more than once: its job ran twice")


def _check_early(rep: Report, offers: list[dict[str, Any]],
                 kinds: dict[str, str]) -> float | None:
    earliest = None
    for s in offers:
        sched = ts(s.get("scheduled_for"))
        occ = s.get("occurrence") or ""
        kind = kinds.get(occ) or kind_from_id(occ)
        if kind != "scheduled" or sched is None or s.get("cluster_wall") is None:
            continue
        early = sched - s["cluster_wall"]
        earliest = early if earliest is None else max(earliest, early)
        if early > EARLY_BOUND_S:
            rep.add("early_fire", occurrence=occ, attempt=s.get("attempt"),
                    measured_at=s.get("event", "offer"),
                    token=s.get("token"), effect_at=iso(s["cluster_wall"]),
                    scheduled_for=s.get("scheduled_for"), early_s=round(early, 3),
                    bound_s=EARLY_BOUND_S)
    return None if earliest is None else round(earliest, 3)


def _check_success_has_effect(rep: Report, offers: list[dict[str, Any]],
                              nodes: dict[str, Any], merged: dict[str, list[dict[str, Any]]],
                              writers: set[str]) -> None:
    offered_by_attempt = {s.get("attempt") for s in offers}
    offered_by_occ = {s.get("occurrence") for s in offers}
    seen: set[str] = set()
    for nid, node in sorted(nodes.items()):
        for o in node.get("occurrences", []):
            if o["status"] != "succeeded" or o["job_id"] not in writers or o["id"] in seen:
                continue
            seen.add(o["id"])
            won = [a["id"] for a in merged.get(o["id"], []) if a["status"] == "succeeded"]
            ok = any(a in offered_by_attempt for a in won) if won else o["id"] in offered_by_occ
            if not ok:
                rep.add("success_without_effect", node=nid, occurrence=o["id"],
                        succeeded_attempts=won)


def kind_from_id(occ: str) -> str:
    """An occurrence's kind from its id alone (for one no read shows: core.identity)."""
    for marker, kind in (("@manual-", "manual"), ("@after-", "chained"),
                         ("@backfill-", "backfill")):
        if marker in occ:
            return kind
    return "scheduled"
