"""Protocol levels: which log entries a build can read, and when a cluster may write them.

A node of an older build that meets a committed entry it cannot decode stops (exit 70)
rather than diverge. So a build must not write an entry some member cannot read: every
command kind, every optional command field and every optional job field that an older
build would refuse is tagged here with the level that introduced it, and is written only
once the cluster's committed level (`SetClusterLevel`, raised by the leader when every
member announced it speaks that level) reaches it.

The levels, read from `git log`:

- **1** - every command and field up to commit 4aaeeff (the build before calendars,
  cancel, concurrency groups and clock confirmations). A state with no committed level
  (every database written before levels existed) is at level 1.
  `tests/fixtures/protocol_level1.json` is that build's codec, read from it.
- **2** - this build: calendars (`PutCalendar`, `DeleteCalendar`), bulk pause
  (`BulkPause`), cancel (`CancelOccurrence`), concurrency groups (`PutConcurrencyGroup`),
  `ConfirmClock` and `SetClusterLevel`; the fields `Lease.ahead_ms` and
  `Heartbeat.before_start` (dispatch ahead) and `RaiseAlert.deadline_ms` (the
  `cluster_unavailable` cause); the sixth field of a claim item (which schedules named
  the instant); the job fields `schedules`, `calendars`, `labels`, `concurrency_group`,
  `start_deadline_s`, `min_duration_s`, `max_duration_s` and `alert_after_failures`;
  the `who` of the job commands, and the history of edits apply records from them;
  one-time (`at`) and interval (`every_s`, `anchor_ms`) schedules in a job spec;
  a run handed back before its instant stays due at its instant (apply); a sweep
  releases an unacknowledged lease of an earlier epoch at once (apply); `min_duration_s`
  counts from the later of a run's lease and its instant (apply), or from the start a
  worker reported: a completion item's sixth and seventh fields (the run's start and
  duration, recorded as `started_ms` and `finished_ms`) and a heartbeat item's third (a
  running run's start); the tenant quota
  fields `PutTenant.max_schedules` and `max_pending_runs`, the defaults of the
  state-bounding quotas (core.tenant_policy.QUOTA_DEFAULTS) and a backfill that creates
  nothing for an instant the job already has waiting, running or done (apply); a run
  stopped because its job was deleted ends `job deleted`, not `replaced` (apply); a lease
  handed back unrun after its run was asked to stop ends cancelled (apply); notification
  channels (`PutChannel`, `DeleteChannel`, `{"channel": name}` entries in a job's
  `notify`, and the `job.recovered` event apply writes for a job that names one); a
  reported start or finish lies at most the clock tolerance after its command's stamp
  (apply, core.run_times); a heartbeat extends a run leased ahead by its lease's length
  counted from its instant (apply). Level 2 is
  not released yet, so these apply rules joined it rather than making a level 3: two
  builds from before and after one of them, mixed in one cluster, could disagree on it.

A tagged field is written only when it differs from its default (`Command.args`), so an
entry that uses none of a level's features is byte for byte what the older build wrote.
Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from raftcron.core import commands as c

PROTOCOL_LEVEL = 2
# The level of a state without a committed level, and of a member that announced none.
BASE_LEVEL = 1


@dataclass(frozen=True, slots=True)
class Requirement:
    """The newest level an entry needs, and the feature (and field) that needs it."""

    level: int
    feature: str
    field: str | None = None


COMMAND_LEVELS: dict[type[c.Command], Requirement] = {
    c.PutCalendar: Requirement(2, "calendars"),
    c.DeleteCalendar: Requirement(2, "calendars"),
    c.BulkPause: Requirement(2, "bulk pause"),
    c.ApplyJobs: Requirement(2, "jobs as code"),
    c.CancelOccurrence: Requirement(2, "cancel"),
    c.PutConcurrencyGroup: Requirement(2, "concurrency groups"),
    c.ConfirmClock: Requirement(2, "clock confirmations"),
    c.PutChannel: Requirement(2, "notification channels"),
    c.DeleteChannel: Requirement(2, "notification channels"),
}

# Optional fields of older command kinds: (kind, field) -> what needs them when they are
# not at their default.
FIELD_LEVELS: dict[tuple[type[c.Command], str], Requirement] = {
    (c.Lease, "ahead_ms"): Requirement(2, "dispatch ahead", "ahead_ms"),
    (c.Heartbeat, "before_start"): Requirement(2, "dispatch ahead", "before_start"),
    (c.RaiseAlert, "deadline_ms"): Requirement(2, "cluster_unavailable cause", "deadline_ms"),
    **{(kind, "who"): Requirement(2, "history of edits", "who")
       for kind in (c.PutJob, c.CreateJobs, c.DeleteJob, c.PauseJob, c.ResumeJob)},
    **{(c.PutTenant, name): Requirement(2, "tenant quotas on schedules and pending runs",
                                        name)
       for name in ("max_schedules", "max_pending_runs")},
}
# Apply records a job's history of edits (state.job_history) only from this level on: a
# level-1 build has no such table, and its state must stay the same as the others'.
JOB_HISTORY_LEVEL = 2
# A run handed back before its instant (a Release, or an unacknowledged lease the sweeper
# releases) stays due at its instant from this level on. Mostly a run leased ahead
# (Lease.ahead_ms, level 2) is handed back before it; an at-instant lease can be too, by a
# release stamped with a clock that lags the instant's. A level-1 build makes it due at
# the release's time, and the states must agree until then.
RELEASE_KEEPS_INSTANT_LEVEL = 2
# A sweep releases an unacknowledged lease granted in an earlier epoch at once, whatever
# its acknowledgement deadline, from this level on (state.attempts.sweep): a new leader
# need not wait out the ack timeout of what its dead predecessor leased but never
# delivered. A level-1 build waits for the deadline, and the states must agree until then;
# the sweeper proposes such leases only from this level on (leader.sweeper).
RELEASE_PREVIOUS_EPOCH_LEVEL = 2
# An alert raised again (state.alerts.open_alert) takes the new raise's occurrence only
# from this level on (run alerts re-raise `failures:<job>` for another occurrence); a
# level-1 build keeps the first raise's, and the states must agree until then.
ALERT_REOCCURRENCE_LEVEL = 2

# From this level on, apply bounds what each tenant keeps in the state: a null
# `max_jobs`, `max_schedules` or `max_pending_runs` is its default
# (core.tenant_policy.QUOTA_DEFAULTS), schedules are counted at job create and edit, and
# pending runs at backfill and manual trigger (state.tenants). A level-1 build has no
# such quotas (a null max_jobs is unlimited there), and the states must agree until then.
TENANT_QUOTAS_LEVEL = 2
# From this level on, a backfill creates nothing for an instant the job already has a
# run of (scheduled or backfilled, under any request key) waiting, running or succeeded
# (state.backfills); a level-1 build names a backfill's occurrences by (job, instant,
# key) alone, so every new key made every instant again, and the states must agree
# until then.
BACKFILL_BY_INSTANT_LEVEL = 2
# From this level on, a running run stopped because its job was deleted ends `cancelled`
# with reason `job deleted`, like the deleted job's waiting runs (state.attempts); a
# level-1 build says `replaced`, and the states must agree until then.
KILLED_REASON_LEVEL = 2
# From this level on, a lease handed back unrun (unacknowledged, or released) whose run was
# asked to stop ends `cancelled` rather than pending again (state.attempts); a level-1
# build makes it pending (where a deleted job's run then waits forever), and the states
# must agree until then.
HANDED_BACK_CANCEL_LEVEL = 2

# Optional fields of a job spec (PutJob.job, CreateJobs.jobs): an older build's Job refuses
# any key it does not know.
JOB_FIELD_LEVELS: dict[str, Requirement] = {
    "schedules": Requirement(2, "several schedules", "schedules"),
    "calendars": Requirement(2, "calendars", "calendars"),
    "labels": Requirement(2, "labels", "labels"),
    "concurrency_group": Requirement(2, "concurrency groups", "concurrency_group"),
    "start_deadline_s": Requirement(2, "run bounds", "start_deadline_s"),
    "min_duration_s": Requirement(2, "run bounds", "min_duration_s"),
    "max_duration_s": Requirement(2, "run bounds", "max_duration_s"),
    "alert_after_failures": Requirement(2, "run bounds", "alert_after_failures"),
    "after": Requirement(2, "chains", "after"),
}

# A claim item with the names of the schedules that matched (older builds take 5 fields).
CLAIM_MATCHED = Requirement(2, "several schedules", "items")
# A completion item with the run's reported start and duration (older builds take 5).
COMPLETION_TIMES = Requirement(2, "recorded start times", "completions")
# A route held for a muted channel: [receiver, signer, held until] (older builds take 2).
MUTED_ROUTE = Requirement(2, "muted channels", "routes")
# A heartbeat item with its running run's start (older builds take 2 fields).
HEARTBEAT_START = Requirement(2, "recorded start times", "attempts")


def _newest(reqs: list[Requirement]) -> Requirement | None:
    return max(reqs, key=lambda r: r.level, default=None)


# A schedule of a job spec that is one-time (`at`) or an interval (`every_s`): an older
# build's Schedule refuses those keys.
SCHEDULE_KINDS = Requirement(2, "one-time and interval schedules", "schedule")
# A `notify` entry naming a channel ({"channel": name}): an older build reads only URLs.
NOTIFY_CHANNELS = Requirement(2, "notification channels", "notify")


def _job_requirements(spec: Any) -> list[Requirement]:
    if not isinstance(spec, dict):
        return []
    reqs = [req for key, req in JOB_FIELD_LEVELS.items() if key in spec]
    schedules = [spec.get("schedule"), *(spec.get("schedules") or ())]
    if any(isinstance(s, dict) and ("at" in s or "every_s" in s) for s in schedules):
        reqs.append(SCHEDULE_KINDS)
    if any(isinstance(e, dict) for e in spec.get("notify") or ()):
        reqs.append(NOTIFY_CHANNELS)
    return reqs


def required(cmd: c.Command) -> Requirement | None:
    """The newest level `cmd` needs to be read (None: level 1, any build reads it): that
    of its encoding, which leaves a tagged field out while at its default."""
    return entry_required(type(cmd), cmd.args())


def entry_required(cls: type[c.Command], args: dict[str, Any]) -> Requirement | None:
    """The newest level an entry of kind `cls` with encoded arguments `args` needs, judged
    as an older build reads it: a field it lacks is a keyword its dataclass refuses,
    whatever the value (an entry written with `"ahead_ms": 0` stops it too)."""
    if cls is c.SetClusterLevel:
        level = args.get("level")
        level = level if type(level) is int else PROTOCOL_LEVEL
        return Requirement(max(level, 2), f"cluster level {level}")
    reqs: list[Requirement] = []
    kind = COMMAND_LEVELS.get(cls)
    if kind is not None:
        reqs.append(kind)
    for (tagged, name), req in FIELD_LEVELS.items():
        if tagged is cls and name in args:
            reqs.append(req)
    if cls is c.PutJob:
        reqs.extend(_job_requirements(args.get("job")))
    elif cls is c.CreateJobs:
        for spec in args.get("jobs") or ():
            reqs.extend(_job_requirements(spec))
    elif cls is c.Claim:
        if any(isinstance(item, list) and len(item) > 5 for item in args.get("items") or ()):
            reqs.append(CLAIM_MATCHED)
    elif cls is c.Complete:
        if any(isinstance(item, list) and len(item) > 5
               for item in args.get("completions") or ()):
            reqs.append(COMPLETION_TIMES)
    elif cls is c.RouteOutbox:
        if any(isinstance(route, list) and len(route) > 1 and isinstance(route[1], list)
               and any(isinstance(r, list) and len(r) > 2 for r in route[1])
               for route in args.get("routes") or ()):
            reqs.append(MUTED_ROUTE)
    elif cls is c.Heartbeat:
        if any(isinstance(item, list) and len(item) > 2
               for item in args.get("attempts") or ()):
            reqs.append(HEARTBEAT_START)
    return _newest(reqs)


def unmet_entry(data: bytes, level: int) -> Requirement | None:
    """What in the encoded entry `data` a build of `level` cannot read (None: nothing).
    `data` must decode (commands.decode)."""
    obj = json.loads(data)
    req = entry_required(c.COMMAND_TYPES[obj["t"]], obj["a"])
    return req if req is not None and req.level > level else None


def unmet(cmd: c.Command, level: int) -> Requirement | None:
    """What in `cmd` needs more than `level` (None: nothing, it may be written)."""
    req = required(cmd)
    return req if req is not None and req.level > level else None


def not_upgraded_message(req: Requirement, level: int) -> str:
    return (f"{req.feature} needs protocol level {req.level}: cluster not fully upgraded "
            f"(level {level} of {req.level})")


def refusal_details(req: Requirement, level: int) -> dict[str, Any]:
    """The fields of a refusal, beside its code and message."""
    return {"feature": req.feature, "cluster_level": level, "required_level": req.level}
