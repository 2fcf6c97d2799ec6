"""Tenant quotas, checked on every node against what the state recorded.

The quotas come from the run's `tenant` operations (PUT /v1/tenants/{name}) and, where a
node answered, its committed tenants (they win):

- quota_fires_exceeded: more fires (scheduled or manual occurrences not skipped) in one
  UTC minute of their instants than the tenant's max_fires_per_minute;
- quota_skip_unjustified: an occurrence skipped as `quota` in a minute whose fires did not
  fill the quota (fires only grow, so the final count is at least what the state machine
  saw when it skipped), or in a tenant without a fires quota;
- quota_concurrency_exceeded: when one of the tenant's attempts was leased, more of its
  attempts were running than max_concurrent_runs. Lease times are stamped by the leader;
  finish times by whichever node took the completion, so an attempt counts as running
  only while certainly so: leased at or before the instant, finished at least
  CONCURRENCY_MARGIN_S after it, and neither leased nor finished during (or near) a
  clock fault, whose skewed node may have stamped it (a leader under a clock strobe
  stamped leases 4 s off in a long run: with such stamps the check cannot decide); a
  skewed node's stamps lie in the fault's window shifted by the fault's offset.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from chaos.report_model import Report, iso, ts

QUOTAS = ("max_jobs", "max_concurrent_runs", "max_fires_per_minute")
CONCURRENCY_MARGIN_S = 1.0
CLOCK_FAULTS = ("clock-bump", "clock-bump-leader", "clock-strobe")
CLOCK_FAULT_SLACK_S = 2.0
# A run's lease or completion happened within this of its effect (the leases taken ahead,
# the command's own sleep, a completion retried): an effect this long after a clock fault
# ended may still have had its lease or finish stamped during it.
REAL_SLACK_S = 10.0


def tenant_quotas(ops: list[dict[str, Any]], nodes: dict[str, Any]) -> dict[str, dict]:
    out: dict[str, dict[str, Any]] = {}
    for op in ops:
        if op["f"] == "tenant" and (op.get("done") or {}).get("type") == "ok":
            body = op["invoke"].get("body") or {}
            out[op["invoke"]["tenant"]] = {k: body.get(k) for k in QUOTAS}
    for node in nodes.values():
        for t in node.get("tenants") or []:
            out[t["name"]] = {k: t.get(k) for k in QUOTAS}
    return out


def _minute(o: dict[str, Any]) -> int:
    return int((ts(o["scheduled_for"]) or 0) // 60)


def check_fire_quotas(rep: Report, nodes: dict[str, Any], quotas: dict[str, dict]) -> int:
    """The fires checks on every node; the number of `quota` skips on the fullest node."""
    most = 0
    for nid, node in sorted(nodes.items()):
        fired: Counter[tuple[str, int]] = Counter()
        skips: dict[tuple[str, int], list[str]] = defaultdict(list)
        for o in node.get("occurrences", []):
            tenant = o.get("tenant", "default")
            limit = (quotas.get(tenant) or {}).get("max_fires_per_minute")
            if o["status"] == "skipped" and o["reason"] == "quota":
                if limit is None:
                    rep.add("quota_skip_unjustified", node=nid, occurrence=o["id"],
                            tenant=tenant, problem="skipped as quota; the tenant has none")
                else:
                    skips[(tenant, _minute(o))].append(o["id"])
            elif o["kind"] in ("scheduled", "manual") and o["status"] != "skipped":
                fired[(tenant, _minute(o))] += 1
        for (tenant, minute), n in sorted(fired.items()):
            limit = (quotas.get(tenant) or {}).get("max_fires_per_minute")
            if limit is not None and n > limit:
                rep.add("quota_fires_exceeded", node=nid, tenant=tenant,
                        minute=iso(minute * 60), fires=n, limit=limit)
        for (tenant, minute), ids in sorted(skips.items()):
            limit = quotas[tenant]["max_fires_per_minute"]
            if fired[(tenant, minute)] < limit:
                rep.add("quota_skip_unjustified", node=nid, tenant=tenant,
                        minute=iso(minute * 60), fires=fired[(tenant, minute)], limit=limit,
                        skipped=len(ids), example=ids[0],
                        problem="skipped as quota while the minute's quota had room")
        most = max(most, sum(len(v) for v in skips.values()))
    return most


def _clock_fault_during(start: float, stop: float, windows: list[dict[str, Any]],
                        end: float) -> bool:
    """Whether a clock fault was on at some time in [start, stop]: a completion taken then
    may carry the skewed node's stamp, minutes away from the fault's window (a leader 131 s
    ahead stamped a run's finish two minutes after it ended: the run looked running all
    that time)."""
    return any(w["kind"] in CLOCK_FAULTS
               and w["start"] - CLOCK_FAULT_SLACK_S <= stop
               and start <= (w["stop"] or end) + CLOCK_FAULT_SLACK_S for w in windows)


def _clock_fault_near(t: float, windows: list[dict[str, Any]], end: float,
                      real: float | None = None) -> bool:
    """Could a node under a clock fault have stamped `t`? A stamp taken during the fault's
    window (with slack) may be anything; one taken by the skewed node lies in the window
    shifted by the offset it set (a bump by `offset_ms`: 262 s ahead, a follower's
    completion stamps lay minutes after the window; a strobe by 0 to `delta_ms`). The
    shifted range is exempt only for an event known to have happened during the window:
    `real`, the harness's own time of it (the attempt's effect at the sink). Without it,
    only the window itself: a shift of up to 262 s either side would exempt most of a
    run."""
    for w in windows:
        if w["kind"] not in CLOCK_FAULTS:
            continue
        lo, hi = w["start"] - CLOCK_FAULT_SLACK_S, (w["stop"] or end) + CLOCK_FAULT_SLACK_S
        if lo <= t <= hi:
            return True
        if real is None or not lo <= real <= hi + REAL_SLACK_S:
            continue
        info = w.get("info") or {}
        shifts = [0.0, (info.get("offset_ms") or 0) / 1000, (info.get("delta_ms") or 0) / 1000]
        if lo + min(shifts) <= t <= hi + max(shifts):
            return True
    return False


def check_concurrency(rep: Report, nodes: dict[str, Any], attempts: dict[str, list[dict]],
                      quotas: dict[str, dict], windows: list[dict[str, Any]],
                      window_end: float, running_at_end: set[str] | None = None,
                      effects: dict[str, float] | None = None) -> int:
    """The concurrency check over every attempt known (final reads and observations);
    the most attempts seen running at once in a limited tenant. `running_at_end`: the
    attempts a final read shows running (None: every attempt whose status is running).
    Only those run until the end of the window; one last *observed* running whose final
    read is gone (retention pruned it) has an unknown end and is not counted. `effects`:
    attempt id -> when its effect reached the sink (the real time of the run)."""
    effects = effects or {}
    tenant_of = {o["id"]: o.get("tenant", "default")
                 for node in nodes.values() for o in node.get("occurrences", [])}
    spans: dict[str, list[tuple[float, float | None, str]]] = defaultdict(list)
    for occ_id, lst in attempts.items():
        tenant = tenant_of.get(occ_id)
        if tenant is None or (quotas.get(tenant) or {}).get("max_concurrent_runs") is None:
            continue
        for a in lst or []:
            start = ts(a.get("leased_at"))
            real = effects.get(a["id"])
            if start is None or _clock_fault_near(start, windows, window_end, real):
                continue  # no lease time, or one a skewed leader may have stamped
            end = ts(a.get("finished_at"))
            if end is None and a["status"] == "running" and (
                    running_at_end is None or a["id"] in running_at_end):
                end = window_end
            if end is not None and (_clock_fault_near(end, windows, window_end, real)
                                    or _clock_fault_during(start, end, windows, window_end)):
                end = None  # its finish time may come from a skewed clock: not counted
            spans[tenant].append((start, end, a["id"]))
    peak = 0
    for tenant, lst in sorted(spans.items()):
        limit = quotas[tenant]["max_concurrent_runs"]
        for start, _, att_id in lst:
            running = [b for s, e, b in lst if b != att_id and s <= start
                       and e is not None and e >= start + CONCURRENCY_MARGIN_S]
            peak = max(peak, len(running) + 1)
            if len(running) + 1 > limit:
                rep.add("quota_concurrency_exceeded", tenant=tenant, attempt=att_id,
                        leased_at=iso(start), running=len(running) + 1, limit=limit,
                        others=sorted(running)[:10])
    return peak
