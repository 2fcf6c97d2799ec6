"""Attempt aggregate: leases with fencing tokens, heartbeats, completions, sweeps, retries."""

from __future__ import annotations

import sqlite3
from typing import Any

from raftcron.core import errors, identity, policy
from raftcron.core.chains import upstream_of
from raftcron.core.commands import Complete, Heartbeat, Lease, Release, Sweep
from raftcron.core.model import DEFAULT_ACK_TIMEOUT_S
from raftcron.core.protocol import (
    HANDED_BACK_CANCEL_LEVEL,
    KILLED_REASON_LEVEL,
    RELEASE_KEEPS_INSTANT_LEVEL,
    RELEASE_PREVIOUS_EPOCH_LEVEL,
)
from raftcron.core.run_times import heartbeat_start, reported_times
from raftcron.core.timefmt import ms_to_iso
from raftcron.state import run_alerts
from raftcron.state.attempt_rows import (
    A_ACK_DEADLINE,
    A_CANCEL,
    A_EXIT,
    A_EXPIRES,
    A_HB,
    A_ID,
    A_JOB,
    A_NOT_BEFORE,
    A_NUM,
    A_OCC,
    A_QUEUE,
    A_RUNTIME,
    A_STARTED,
    A_STATUS,
    A_TOKEN,
    A_WORKER,
)
from raftcron.state.attempt_rows import job_spec as _job_spec
from raftcron.state.attempt_rows import load_attempt as _load
from raftcron.state.attempt_rows import load_attempts as _load_many
from raftcron.state.attempt_rows import load_specs as _load_specs
from raftcron.state.cancellation import cancelled_by, end_cancelled
from raftcron.state.chains import start_followers
from raftcron.state.cluster_level import committed_level
from raftcron.state.context import ApplyContext, ok, parse_spec, rejected
from raftcron.state.db import META_FENCING_SEQ, META_UNACKED_LEASES
from raftcron.state.groups import GroupLimiter
from raftcron.state.one_step import rows_param, rows_table, select_all, update_all
from raftcron.state.tenants import RunLimiter, check_job_policy, policy_of

NOT_ACKNOWLEDGED = "not acknowledged"

LEASE_LOAD = (
    "SELECT a.id, a.occurrence_id, a.job_id, a.number, a.status, a.not_before_ms, "
    "o.scheduled_for_ms, o.kind, j.spec, a.tenant, j.paused, o.upstream, o.upstream_outcome "
    "FROM attempts a "
    "JOIN occurrences o ON o.id = a.occurrence_id LEFT JOIN jobs j ON j.id = a.job_id "
    "WHERE a.id IN ({marks})"
)
LEASE_LOAD_COLS = LEASE_LOAD.split(" FROM ")[0].count(",") + 1


def lease(ctx: ApplyContext, cmd: Lease) -> dict[str, Any]:
    """Hand pending attempts to a worker, each with a fresh, strictly increasing token.

    Loads the whole batch in one query and writes it in two updates (state.one_step): a herd of
    leases is on the fire-lag critical path. `held_jobs` and `held_tenants` name what held
    runs back (an exclusive job with a run leased, a tenant at `max_concurrent_runs`): the
    dispatcher looks past their backlog until they are free again; `held_groups`
    ([tenant, group, [jobs]]) the concurrency groups that were full (state.groups).

    A lease the worker promised to acknowledge (`cmd.acknowledge`) gets an
    acknowledgement deadline, `ack_timeout_s` after it is handed out (`now_ms` is that
    instant); the sweeper releases it if the deadline passes unacknowledged.

    Ahead (`cmd.ahead_ms`, see core.commands.Lease): a run due by `now_ms + ahead_ms` may
    go, except a not-yet-due run of a paused job; it starts at its instant (`start_at_ms`,
    at least now), from which its heartbeat and runtime deadlines count. The
    acknowledgement deadline counts from now: the worker acknowledges on receipt, not at
    the instant.
    """
    conn = ctx.conn
    seq = ctx.meta(META_FENCING_SEQ)
    found: dict[str, tuple] = {}
    ids = list(dict.fromkeys(cmd.attempt_ids))
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        for row in select_all(conn, LEASE_LOAD.format(marks=",".join("?" * len(chunk))),
                              chunk, LEASE_LOAD_COLS):
            found[row[0]] = row
    running_now: dict[str, int] = {}
    limiter = RunLimiter(conn)
    groups = GroupLimiter(conn)
    held_groups: dict[tuple[str, str], set[str]] = {}
    att_updates: list[tuple] = []
    occ_updates: list[tuple] = []
    leases: list[dict[str, Any]] = []
    held_jobs: set[str] = set()
    held_tenants: set[str] = set()
    policies: dict[str, Any] = {}
    for attempt_id in ids:
        row = found.get(attempt_id)
        if (row is None or row[4] != "pending" or row[5] > cmd.now_ms + cmd.ahead_ms
                or row[8] is None or (row[5] > cmd.now_ms and row[10])):
            continue
        _, occ_id, job_id, number, _, not_before, scheduled_for, kind, spec_json, tenant = \
            row[:10]
        start = max(cmd.now_ms, not_before) if cmd.ahead_ms else cmd.now_ms
        spec = parse_spec(spec_json)
        denied = check_job_policy(conn, tenant, spec, policies)
        if denied is not None:
            _fail_outside_policy(ctx, row, denied["message"], cmd.now_ms)
            continue
        if policy.exclusive(spec["overlap_policy"]):
            if job_id not in running_now:
                running_now[job_id] = conn.execute(
                    "SELECT count(*) FROM attempts WHERE job_id = ? AND status = 'running'",
                    (job_id,),
                ).fetchone()[0]
            if running_now[job_id] > 0:
                held_jobs.add(job_id)
                continue
            running_now[job_id] += 1
        group = spec.get("concurrency_group")
        if not groups.allow(tenant, group):
            if job_id in running_now:
                running_now[job_id] -= 1
            held_groups.setdefault((tenant, group), set()).add(job_id)
            continue
        if not limiter.allow(tenant):
            if job_id in running_now:
                running_now[job_id] -= 1
            groups.give_back(tenant, group)
            held_tenants.add(tenant)
            continue
        seq += 1
        token = identity.fencing_token(cmd.epoch, seq)
        runtime = spec.get("max_runtime_s")
        ack_timeout_s = spec.get("ack_timeout_s", DEFAULT_ACK_TIMEOUT_S)
        att_updates.append((
            attempt_id, token, start + spec["heartbeat_timeout_s"] * 1000,
            start + runtime * 1000 if runtime else None,
            cmd.now_ms + ack_timeout_s * 1000 if cmd.acknowledge else None,
        ))
        occ_updates.append((occ_id, number))
        leases.append({
            "attempt_id": attempt_id,
            "occurrence_id": occ_id,
            "job_id": job_id,
            "tenant": tenant,  # the worker resolves the target's secret references in it
            "scheduled_for": ms_to_iso(scheduled_for),
            "kind": kind,
            "attempt": number,
            "fencing_token": token,
            "idempotency_key": occ_id,
            "target": spec["target"],
            "http_rule": policy_of(conn, tenant, policies).http_rule(),
            "max_runtime_s": runtime,
            "heartbeat_interval_s": max(1, spec["heartbeat_timeout_s"] // 3),
            **({"ack_timeout_s": ack_timeout_s} if cmd.acknowledge else {}),
            # The run's own instant, not `start`: a leader whose clock jumped ahead before its
            # guard noticed would otherwise name its own wrong "now" as the instant.
            **({"start_at_ms": not_before} if cmd.ahead_ms else {}),
            **({"upstream": upstream_of(row[11], row[12])} if row[11] else {}),
        })
    update_all(conn, "attempts", "status = 'running', worker_id = ?, leased_ms = ?, "
               "heartbeat_ms = ?, acked_ms = NULL",
               ("fencing_token", "lease_expires_ms", "runtime_deadline_ms", "ack_deadline_ms"),
               att_updates, leading=(cmd.worker_id, cmd.now_ms, cmd.now_ms))
    update_all(conn, "occurrences", "status = 'running'", ("attempts",), occ_updates)
    ctx.set_meta(META_FENCING_SEQ, seq)
    return ok(leases=leases, held_jobs=sorted(held_jobs), held_tenants=sorted(held_tenants),
              held_groups=[[t, g, sorted(j)] for (t, g), j in sorted(held_groups.items())])


def _fail_outside_policy(ctx: ApplyContext, row: tuple, why: str, now_ms: int) -> None:
    """A pending run whose job its tenant's current policy refuses (the policy changed after
    the job was saved): it is never handed out; it fails, without retries, saying why."""
    attempt_id, occ_id, job_id, number = row[0], row[1], row[2], row[3]
    ctx.conn.execute(
        "UPDATE attempts SET status = 'failed', finished_ms = ?, error = ? WHERE id = ?",
        (now_ms, why, attempt_id))
    _finish_occurrence(ctx, occ_id, "failed", now_ms, "policy")
    start_followers(ctx, [(job_id, occ_id, "failed")], now_ms)
    run_alerts.after_failure(ctx, job_id, occ_id, parse_spec(row[8]), now_ms, why)
    ctx.enqueue_outbox(
        "occurrence.failed",
        {"job_id": job_id, "occurrence_id": occ_id, "attempts": number, "reason": "policy"},
        now_ms,
    )


def _check_holder(att: tuple | None, token: Any, worker_id: str,
                  queues: list[str] | None = None) -> dict[str, Any] | None:
    """Why this worker may not act on this attempt (None: it may). `queues` are the queues
    the worker's token may lease (None: any); the attempt's stored queue must be one of
    them, whatever the token and worker id say (a token and an id can be guessed)."""
    if att is None:
        return rejected(errors.NOT_FOUND, "no such attempt")
    if queues is not None and att[A_QUEUE] not in queues:
        return rejected(errors.FORBIDDEN, f"the attempt is on queue {att[A_QUEUE]!r}, "
                        "which this worker's token may not lease", "attempt_id")
    if att[A_TOKEN] is None or att[A_TOKEN] != token:
        return rejected(errors.STALE_TOKEN, "the fencing token is not the attempt's current one")
    if att[A_WORKER] != worker_id:
        return rejected(errors.FOREIGN_LEASE, "the attempt is leased to another worker")
    return None


def heartbeat(ctx: ApplyContext, cmd: Heartbeat) -> dict[str, Any]:
    """Extend leases. The first heartbeat of a lease acknowledges it: once applied, the
    lease counts as delivered and is no longer released for want of an acknowledgement
    (a heartbeat ordered before the sweep wins, even one stamped after the deadline)."""
    conn = ctx.conn
    results = []
    found = _load_many(conn, [item[0] for item in cmd.attempts])
    extended: list[tuple] = []
    started: list[tuple] = []
    for item in cmd.attempts:
        attempt_id, token = item[:2]
        att = found.get(attempt_id)
        verdict = heartbeat_verdict(att, token, cmd.worker_id, cmd.queues)
        if verdict is not None:
            results.append({"attempt_id": attempt_id, **verdict})
            continue
        assert att is not None
        if cmd.before_start and not att[A_CANCEL] and _job_paused(conn, att[A_JOB]):
            _skip_paused(ctx, att, cmd.now_ms)
            found[attempt_id] = (*att[:A_STATUS], "cancelled", *att[A_STATUS + 1:])
            results.append({"attempt_id": attempt_id, **PAUSED_BEFORE_START})
            continue
        # A run leased ahead: its lease's length counts from its instant, as its expiry
        # does (from the lease, a dead worker would be noticed that lead late).
        since = att[A_HB]
        if att[A_HB] < att[A_NOT_BEFORE] < att[A_EXPIRES]:
            since = att[A_NOT_BEFORE]
        window = att[A_EXPIRES] - since
        beat, expires = max(cmd.now_ms, att[A_HB]), max(cmd.now_ms + window, att[A_EXPIRES])
        extended.append((attempt_id, beat, expires))
        if len(item) > 2 and item[2] is not None:  # its run started
            started.append((attempt_id, heartbeat_start(item[2], att[A_NOT_BEFORE],
                                                        cmd.now_ms)))
        # A repeat of this attempt later in the same command sees it extended.
        found[attempt_id] = (*att[:A_HB], beat, expires, *att[A_EXPIRES + 1:A_ACK_DEADLINE],
                             None, att[A_STARTED])
        results.append({"attempt_id": attempt_id, **ok(cancel=bool(att[A_CANCEL]))})
    update_all(conn, "attempts", "acked_ms = coalesce(acked_ms, ?), ack_deadline_ms = NULL",
               ("heartbeat_ms", "lease_expires_ms"), extended, leading=(cmd.now_ms,))
    if started:  # the first report of a start stands (one SQLite step for the batch)
        conn.execute(f"UPDATE attempts SET started_ms = u.started_ms FROM "
                     f"{rows_table(['id', 'started_ms'])} AS u WHERE attempts.id = u.id "
                     "AND attempts.started_ms IS NULL", (rows_param(started),))
    return ok(results=results)


PAUSED_BEFORE_START = rejected(
    errors.LEASE_EXPIRED, "the job was paused before this run started: the run is skipped "
    "(paused)")


def heartbeat_verdict(att: tuple | None, token: Any, worker_id: str,
                      queues: list[str] | None) -> dict[str, Any] | None:
    """A heartbeat's answer for one attempt when it changes nothing: not the holder, the lease
    ended, or timed out (cancel). None: the lease is live and this worker holds it.

    Shared by the apply and by the API's read-only check before a start
    (`before_start_answer`), so the two cannot disagree."""
    bad = _check_holder(att, token, worker_id, queues)
    if bad is not None:
        return bad
    assert att is not None
    if att[A_STATUS] == "timed_out":
        return ok(cancel=True)
    if att[A_STATUS] != "running":
        return rejected(errors.LEASE_EXPIRED, f"the lease ended: attempt is {att[A_STATUS]}")
    return None


# The read answers a check only for a lease that outlives it by this much; one closer to its
# expiry (or past it, not yet swept) is extended by a committed heartbeat, as before. More
# than the worker's longest check lead (worker.runner: 0.3 + 1.5 s), so a lease answered
# from the read is still live when its run starts.
BEFORE_START_READ_MARGIN_MS = 5_000


def before_start_answer(att: tuple | None, job_paused: bool, token: Any, worker_id: str,
                        queues: list[str] | None, now_ms: int) -> dict[str, Any] | None:
    """The check just before a run leased ahead starts, answered from a read of the state
    (after a barrier, so it sees every write acknowledged before the check), without a
    commit. None: only a committed `Heartbeat(before_start=True)` may answer: the run's job
    was paused since it was leased (the commit skips the run), the lease still awaits its
    acknowledgement (the commit acknowledges it; a read would leave it to be released by the
    sweeper while the worker starts it), or it expires within
    `BEFORE_START_READ_MARGIN_MS` of `now_ms` (the commit extends it). A lease granted
    without the acknowledgement promise has no deadline and counts as delivered already.

    Otherwise the answer is the one the committed heartbeat would give. The lease is not
    extended: the worker's heartbeat loop keeps waiting leases alive, and the lease was
    acknowledged on receipt, so there is nothing else for a commit to record."""
    verdict = heartbeat_verdict(att, token, worker_id, queues)
    if verdict is not None:
        return verdict
    assert att is not None
    if (att[A_ACK_DEADLINE] is not None or att[A_EXPIRES] - now_ms < BEFORE_START_READ_MARGIN_MS
            or (not att[A_CANCEL] and job_paused)):
        return None
    return ok(cancel=bool(att[A_CANCEL]))


def _job_paused(conn: sqlite3.Connection, job_id: str) -> bool:
    row = conn.execute("SELECT paused FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return bool(row and row[0])


def _skip_paused(ctx: ApplyContext, att: tuple, now_ms: int) -> None:
    """A run leased ahead whose job was paused before it started: it never runs, and its
    instant is accounted for as a paused skip, as if the pause had come before the claim."""
    ctx.conn.execute(
        "UPDATE attempts SET status = 'cancelled', finished_ms = ?, error = ? WHERE id = ?",
        (now_ms, "job paused before the run started", att[A_ID]))
    _finish_occurrence(ctx, att[A_OCC], "skipped", now_ms, policy.SKIP_PAUSED)


def _finish_occurrence(ctx: ApplyContext, occ_id: str, status: str, now_ms: int,
                       reason: str | None = None) -> None:
    ctx.conn.execute(
        "UPDATE occurrences SET status = ?, reason = coalesce(?, reason), finished_ms = ? "
        "WHERE id = ?",
        (status, reason, now_ms, occ_id),
    )


def retry_or_fail(ctx: ApplyContext, att: tuple, spec: dict | None, now_ms: int,
                  why: str, finished_ms: int | None = None) -> None:
    """After an attempt ended badly: schedule the next attempt, or end the occurrence
    (finished at `finished_ms`, the attempt's own finish, when its worker reported it)."""
    ended_ms = now_ms if finished_ms is None else finished_ms
    conn = ctx.conn
    occ_id = att[A_OCC]
    if spec is None:
        _finish_occurrence(ctx, occ_id, "cancelled", ended_ms, "job deleted")
        return
    number = att[A_NUM]
    if policy.should_retry(number, spec["max_attempts"]):
        delay = policy.retry_delay_ms(spec["retry_backoff_s"], number, att[A_ID])
        occ = conn.execute(
            "SELECT tenant, queue FROM occurrences WHERE id = ?", (occ_id,)
        ).fetchone()
        conn.execute(
            "INSERT INTO attempts (id, occurrence_id, job_id, tenant, queue, number, status, "
            "not_before_ms, created_ms) VALUES (?,?,?,?,?,?,'pending',?,?)",
            (identity.attempt_id(occ_id, number + 1), occ_id, att[A_JOB], occ[0], occ[1],
             number + 1, now_ms + delay, now_ms),
        )
        conn.execute(
            "UPDATE occurrences SET status = 'pending', attempts = ? WHERE id = ?",
            (number + 1, occ_id),
        )
        return
    _finish_occurrence(ctx, occ_id, "failed", ended_ms, why)
    start_followers(ctx, [(att[A_JOB], occ_id, "failed")], now_ms)
    run_alerts.after_failure(ctx, att[A_JOB], occ_id, spec, now_ms, why)
    ctx.enqueue_outbox(
        "occurrence.failed",
        {"job_id": att[A_JOB], "occurrence_id": occ_id, "attempts": number, "reason": why},
        now_ms,
    )


def complete(ctx: ApplyContext, cmd: Complete) -> dict[str, Any]:
    """Record outcomes. Successes (the common case) are written in two updates (state.one_step)."""
    conn = ctx.conn
    specs: dict[str, Any] = {}
    results = []
    found = _load_many(conn, [item[0] for item in cmd.completions])
    done_attempts: list[tuple] = []
    done_occurrences: list[tuple] = []
    for item in cmd.completions:
        attempt_id, token, outcome, exit_code, output = item[:5]
        if outcome not in ("succeeded", "failed"):
            results.append({"attempt_id": attempt_id, **rejected(
                errors.INVALID_STATE, "outcome must be succeeded or failed", "outcome")})
            continue
        att = found.get(attempt_id)
        bad = _check_holder(att, token, cmd.worker_id, cmd.queues)
        if bad is not None:
            results.append({"attempt_id": attempt_id, **bad})
            continue
        assert att is not None
        status = att[A_STATUS]
        if status in ("succeeded", "failed", "cancelled", "timed_out"):
            # A cancelled run ends `cancelled` whatever the outcome reported, so a resent
            # completion of it is the same one whatever its outcome.
            same = (status == outcome or status == "cancelled"
                    or (status == "timed_out" and outcome == "failed")) \
                and att[A_EXIT] == exit_code
            if same:
                results.append({"attempt_id": attempt_id, **ok(status=status, duplicate=True)})
            else:
                results.append({"attempt_id": attempt_id, **rejected(
                    errors.CONFLICT, f"the attempt already ended as {status}")})
            continue
        if status != "running":
            results.append({"attempt_id": attempt_id, **rejected(
                errors.LEASE_EXPIRED, f"the lease ended: attempt is {status}")})
            continue
        final = outcome
        by_hand = cancelled_by(conn, att[A_OCC]) if att[A_CANCEL] else None
        if by_hand is not None or (outcome == "failed" and att[A_CANCEL]):
            # A person's cancel is committed before this completion: it stands, even
            # against a success that raced the kill (fencing, not last-writer-wins).
            final = "cancelled"
        elif outcome == "failed" and att[A_RUNTIME] is not None and cmd.now_ms >= att[A_RUNTIME]:
            # The worker enforced max_runtime_s itself before the sweeper did.
            final = "timed_out"
        # A repeat of this attempt later in the same command must see it as ended.
        found[attempt_id] = (*att[:A_STATUS], final, *att[A_STATUS + 1 : A_EXIT], exit_code)
        started_ms, finished_ms = reported_times(item, att[A_NOT_BEFORE], cmd.now_ms,
                                                 att[A_STARTED])
        if final == "succeeded":
            done_attempts.append((attempt_id, finished_ms, started_ms, exit_code, output))
            done_occurrences.append((att[A_OCC], finished_ms))
            results.append({"attempt_id": attempt_id, **ok(status=final, duplicate=False)})
            continue
        conn.execute(
            "UPDATE attempts SET status = ?, finished_ms = ?, started_ms = ?, exit_code = ?, "
            "output = ? WHERE id = ?",
            (final, finished_ms, started_ms, exit_code, output, attempt_id),
        )
        if by_hand is not None:
            end_cancelled(ctx, att[A_OCC], att[A_JOB], finished_ms)
        elif final == "cancelled":
            _finish_occurrence(ctx, att[A_OCC], "cancelled", finished_ms,
                               _why_killed(conn, att[A_JOB], specs))
        else:
            spec = _job_spec(conn, att[A_JOB], specs)
            why = "max runtime exceeded" if final == "timed_out" else f"exit code {exit_code}"
            retry_or_fail(ctx, att, spec, cmd.now_ms, why, finished_ms)
        results.append({"attempt_id": attempt_id, **ok(status=final, duplicate=False)})
    update_all(conn, "attempts", "status = 'succeeded'",
               ("finished_ms", "started_ms", "exit_code", "output"), done_attempts)
    update_all(conn, "occurrences", "status = 'succeeded'", ("finished_ms",),
               done_occurrences)
    start_followers(ctx, [(found[a[0]][A_JOB], o[0], "succeeded") for a, o in
                          zip(done_attempts, done_occurrences, strict=True)], cmd.now_ms)
    _load_specs(conn, {found[a[0]][A_JOB] for a in done_attempts}, specs)
    run_alerts.after_successes(ctx, [(a[0], o[0], found[a[0]][A_JOB]) for a, o in
                                     zip(done_attempts, done_occurrences, strict=True)],
                               cmd.now_ms, lambda job_id: _job_spec(conn, job_id, specs))
    return ok(results=results)


def _why_killed(conn: sqlite3.Connection, job_id: str, specs: dict[str, Any]) -> str:
    """Why a run the cluster asked to stop (no person cancelled it) ended `cancelled`: its
    job was deleted, or a `replace` policy's next run replaced it. A level-1 build says
    `replaced` for both, and the states must agree until the cluster is at level 2."""
    if committed_level(conn) >= KILLED_REASON_LEVEL and _job_spec(conn, job_id, specs) is None:
        return "job deleted"
    return "replaced"


def _due_again(conn: sqlite3.Connection, att: tuple, now_ms: int) -> int:
    """When a run handed back unrun (released, or never acknowledged) is due again: at once,
    but never before its own instant. A run leased ahead can be handed back before it (its
    worker's clock stepped, or the poll's answer was never read); due at the release's time,
    the next poll would take it and start it at once, that much before its instant.
    (Below RELEASE_KEEPS_INSTANT_LEVEL, the release's time, as a level-1 build has it.)"""
    if committed_level(conn) < RELEASE_KEEPS_INSTANT_LEVEL:
        return now_ms
    return max(now_ms, att[A_NOT_BEFORE])


def _ends_when_handed_back(ctx: ApplyContext, att: tuple, now_ms: int,
                           specs: dict[str, Any]) -> bool:
    """A lease handed back unrun (never acknowledged, or released by its worker) whose run
    was asked to stop (a person's cancel, its job deleted, a `replace` policy's next run)
    ends `cancelled` instead of waiting again: pending, a deleted job's run would wait
    forever (nothing leases a run of a job that is gone) and a cancelled one would run
    after all. True when it ended. Below HANDED_BACK_CANCEL_LEVEL it waits again, as a
    level-1 build has it."""
    if not att[A_CANCEL] or committed_level(ctx.conn) < HANDED_BACK_CANCEL_LEVEL:
        return False
    ctx.conn.execute(
        "UPDATE attempts SET status = 'cancelled', finished_ms = ?, error = ? WHERE id = ?",
        (now_ms, "asked to stop before it started", att[A_ID]))
    if cancelled_by(ctx.conn, att[A_OCC]) is not None:
        end_cancelled(ctx, att[A_OCC], att[A_JOB], now_ms)
    else:
        _finish_occurrence(ctx, att[A_OCC], "cancelled", now_ms,
                           _why_killed(ctx.conn, att[A_JOB], specs))
    return True


def _release_unacknowledged(ctx: ApplyContext, att: tuple, now_ms: int) -> None:
    """Nobody confirmed receiving this lease: it is not assumed delivered (invariant 7).
    The attempt is pending again at once (not before its instant), under the same number
    (it does not use up an attempt); its token dies, so a late first holder is refused
    (stale token) and, as the worker starts nothing before its acknowledgement is
    accepted, never runs it."""
    ctx.conn.execute(
        "UPDATE attempts SET status = 'pending', worker_id = NULL, fencing_token = NULL, "
        "leased_ms = NULL, heartbeat_ms = NULL, lease_expires_ms = NULL, "
        "runtime_deadline_ms = NULL, ack_deadline_ms = NULL, acked_ms = NULL, "
        "not_before_ms = ?, unacked_releases = unacked_releases + 1, release_reason = ? "
        "WHERE id = ?",
        (_due_again(ctx.conn, att, now_ms), NOT_ACKNOWLEDGED, att[A_ID]),
    )
    ctx.conn.execute("UPDATE occurrences SET status = 'pending' WHERE id = ?", (att[A_OCC],))
    ctx.set_meta(META_UNACKED_LEASES, ctx.meta(META_UNACKED_LEASES) + 1)


def _unacknowledged_to_release(att: tuple, cmd: Sweep, previous_epochs: bool) -> bool:
    """Whether the sweep releases this running lease for want of an acknowledgement: its
    acknowledgement deadline passed, or (`previous_epochs`, from
    RELEASE_PREVIOUS_EPOCH_LEVEL on) an earlier epoch than the sweep's granted it.

    Why the second is safe whatever its deadline: the leader that granted it is gone or
    deposed, and most likely never delivered it (a leader killed between committing a
    lease and answering the poll). A worker that did receive it and is about to
    acknowledge it is refused (stale token), because this release is committed first, and
    a worker starts nothing before its acknowledgement is accepted: the run is simply
    leased again. An acknowledged lease (no deadline) is running on a worker and is left
    to its heartbeat timeout. Decided from the row and the command only (deterministic)."""
    deadline = att[A_ACK_DEADLINE]
    if deadline is None:
        return False
    if deadline < cmd.now_ms:
        return True
    return (previous_epochs and att[A_TOKEN] is not None
            and identity.token_epoch(att[A_TOKEN]) < cmd.epoch)


def sweep(ctx: ApplyContext, cmd: Sweep) -> dict[str, Any]:
    """Re-check each candidate at apply time: a heartbeat ordered before the sweep wins."""
    conn = ctx.conn
    specs: dict[str, Any] = {}
    lost: list[str] = []
    timed_out: list[str] = []
    unacknowledged: list[str] = []
    previous_epochs = committed_level(conn) >= RELEASE_PREVIOUS_EPOCH_LEVEL
    for attempt_id in cmd.attempt_ids:
        att = _load(conn, attempt_id)
        if att is None or att[A_STATUS] != "running":
            continue
        if _unacknowledged_to_release(att, cmd, previous_epochs):
            if not _ends_when_handed_back(ctx, att, cmd.now_ms, specs):
                _release_unacknowledged(ctx, att, cmd.now_ms)
            unacknowledged.append(attempt_id)
            continue
        if att[A_EXPIRES] < cmd.now_ms:
            new_status, why = "lost", "heartbeat timeout"
            lost.append(attempt_id)
        elif att[A_RUNTIME] is not None and att[A_RUNTIME] <= cmd.now_ms:
            new_status, why = "timed_out", "max runtime exceeded"
            timed_out.append(attempt_id)
        else:
            continue
        conn.execute(
            "UPDATE attempts SET status = ?, finished_ms = ?, error = ?, cancel_requested = 1 "
            "WHERE id = ?",
            (new_status, cmd.now_ms, why, attempt_id),
        )
        by_hand = cancelled_by(conn, att[A_OCC]) if att[A_CANCEL] else None
        if by_hand is not None:  # cancelled by a person: the lease ended, never retried
            end_cancelled(ctx, att[A_OCC], att[A_JOB], cmd.now_ms)
            continue
        spec = _job_spec(conn, att[A_JOB], specs)
        retry_or_fail(ctx, att, spec, cmd.now_ms, why)
    return ok(lost=lost, timed_out=timed_out, unacknowledged=unacknowledged)


def release(ctx: ApplyContext, cmd: Release) -> dict[str, Any]:
    """A worker hands a lease back unrun; the attempt is pending again (due at once, not
    before its instant) and its token dies."""
    conn = ctx.conn
    results = []
    for attempt_id, token in cmd.attempts:
        att = _load(conn, attempt_id)
        bad = _check_holder(att, token, cmd.worker_id, cmd.queues)
        if bad is None and att is not None and att[A_STATUS] != "running":
            bad = rejected(errors.LEASE_EXPIRED, f"the lease ended: attempt is {att[A_STATUS]}")
        if bad is not None:
            results.append({"attempt_id": attempt_id, **bad})
            continue
        assert att is not None
        if _ends_when_handed_back(ctx, att, cmd.now_ms, {}):
            results.append({"attempt_id": attempt_id, **ok()})
            continue
        conn.execute(
            "UPDATE attempts SET status = 'pending', worker_id = NULL, fencing_token = NULL, "
            "leased_ms = NULL, heartbeat_ms = NULL, lease_expires_ms = NULL, "
            "runtime_deadline_ms = NULL, ack_deadline_ms = NULL, acked_ms = NULL, "
            "not_before_ms = ? WHERE id = ?",
            (_due_again(conn, att, cmd.now_ms), attempt_id),
        )
        conn.execute("UPDATE occurrences SET status = 'pending' WHERE id = ?", (att[A_OCC],))
        results.append({"attempt_id": attempt_id, **ok()})
    return ok(results=results)
