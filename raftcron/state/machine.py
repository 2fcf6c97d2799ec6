"""The replicated state machine: `apply(index, command) -> result` over SQLite.

Every committed command is applied in ONE transaction that also records the applied log
index, so replaying the log after a restart is idempotent. `apply` is deterministic: it
never reads a clock or randomness; everything it needs travels in the command.

A domain rejection is a returned dict (`{"ok": False, "rejected": code, ...}`), identical
on every node. An exception escaping a handler is a bug or a broken invariant: the
transaction is rolled back and the exception propagates, and the node must stop (see
cluster.raft) rather than continue with a state the others may not have.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import sqlite3
from collections.abc import Callable
from typing import Any

from raftcron.core import commands as c
from raftcron.core import errors, protocol
from raftcron.state import (
    alerts,
    apply_jobs,
    attempts,
    availability,
    calendars,
    cancellation,
    channels,
    cluster_level,
    groups,
    jobs,
    occurrences,
    outbox,
    tenants,
    webhook_keys,
)
from raftcron.state.context import ApplyContext, ok, rejected
from raftcron.state.db import META_CLOCK, META_EPOCH, META_FENCING_SEQ, META_LAST_APPLIED

Handler = Callable[[ApplyContext, Any], dict[str, Any]]
Listener = Callable[[c.Command, dict[str, Any]], None]

log = logging.getLogger("raftcron.machine")


def _begin_epoch(ctx: ApplyContext, cmd: c.BeginEpoch) -> dict[str, Any]:
    current = ctx.meta(META_EPOCH)
    if cmd.term <= current:
        # `clock_ms` too: a leader that proposed its begin_epoch twice (the first timed
        # out, then committed) takes this answer to its second one as "begun".
        return rejected(errors.STALE_EPOCH, f"epoch {cmd.term} is not newer than {current}",
                        epoch=current, clock_ms=ctx.meta(META_CLOCK))
    ctx.set_meta(META_EPOCH, cmd.term)
    ctx.set_meta(META_FENCING_SEQ, 0)
    ctx.conn.execute(
        "INSERT INTO epochs (epoch, node_id, began_ms, log_index) VALUES (?, ?, ?, ?)",
        (cmd.term, cmd.node_id, cmd.now_ms, ctx.index),
    )
    return ok(epoch=cmd.term, clock_ms=ctx.meta(META_CLOCK))


def _not_behind_the_cluster(ctx: ApplyContext, cmd: c.Command) -> c.Command:
    """A command stamped by a node whose clock is behind, raised to the cluster's time.

    Client writes and worker calls carry the clock of the node that received them, which
    no guard confirms. A node 262 s behind (a chaos run) stamped completions 262 s in the
    past: retention pruned those occurrences seconds after they ran, history was lost,
    and heartbeats set lease deadlines already past. Time must not go backwards in the
    state, so nothing is stamped before the newest committed leader time (less a small
    limit: nodes' clocks differ by milliseconds, and those stamps stay as they were).
    Deterministic: the floor is state.

    There is no matching ceiling for a node that is *ahead*: the state cannot tell one.
    The newest committed leader time stops moving whenever no leader's clock is confirmed
    (nothing is claimed or confirmed then, minutes at a time), while honest writes and
    heartbeats keep committing at the real time; a ceiling of "that time plus a margin"
    would pull those stamps back and set lease deadlines already past, expiring live
    runs. The ahead case is closed where the stamp is made instead: the API stamps with
    the cluster's confirmed time (cluster.stamp_clock), or refuses."""
    now = getattr(cmd, "now_ms", None)
    if not isinstance(now, int):
        return cmd
    cluster_ms = ctx.meta(META_CLOCK)
    if now >= cluster_ms - STAMP_BEHIND_LIMIT_MS:
        return cmd
    return dataclasses.replace(cmd, now_ms=cluster_ms)  # type: ignore[type-var]


def _above_cluster_level(ctx: ApplyContext, cmd: c.Command) -> dict[str, Any] | None:
    """A rejection for a command that needs a protocol level the cluster has not committed.

    The API and the leader write nothing above the committed level; this makes a race
    (a level read just before another member joined, a proposer of a newer build) a
    rejected entry on every node that reads it, never state a member could not have.
    `SetClusterLevel` is what raises the level, so it is not held to it."""
    if isinstance(cmd, c.SetClusterLevel):
        return None
    req = protocol.required(cmd)
    if req is None:
        return None  # most entries: no read of the level
    level = cluster_level.committed_level(ctx.conn)
    if req.level <= level:
        return None
    return rejected(errors.NOT_UPGRADED, protocol.not_upgraded_message(req, level),
                    req.field, **protocol.refusal_details(req, level))


def _barrier(ctx: ApplyContext, cmd: c.Barrier) -> dict[str, Any]:
    return ok(index=ctx.index)


HANDLERS: dict[type[c.Command], Handler] = {
    c.PutJob: jobs.put_job,
    c.ApplyJobs: apply_jobs.apply_jobs,
    c.CreateJobs: jobs.create_jobs,
    c.DeleteJob: jobs.delete_job,
    c.PauseJob: jobs.pause_job,
    c.ResumeJob: jobs.resume_job,
    c.TriggerManual: occurrences.trigger_manual,
    c.Backfill: occurrences.backfill,
    c.Barrier: _barrier,
    c.PutCalendar: calendars.put_calendar,
    c.DeleteCalendar: calendars.delete_calendar,
    c.PutChannel: channels.put_channel,
    c.DeleteChannel: channels.delete_channel,
    c.BulkPause: calendars.bulk_pause,
    c.Prune: alerts.prune,
    c.PutTenant: tenants.put_tenant,
    c.RetryOutbox: outbox.retry_outbox,
    c.SetWebhookKey: webhook_keys.set_webhook_key,
    c.AlertAction: alerts.alert_action,
    c.CancelOccurrence: cancellation.cancel_occurrence,
    c.PutConcurrencyGroup: groups.put_group,
    c.BeginEpoch: _begin_epoch,
    c.Claim: occurrences.claim,
    c.Lease: attempts.lease,
    c.Sweep: attempts.sweep,
    c.RaiseAlert: alerts.raise_alert,
    c.ResolveAlert: alerts.resolve_alert,
    c.ConfirmClock: availability.confirm_clock,
    c.SetClusterLevel: cluster_level.set_cluster_level,
    c.AckOutbox: alerts.ack_outbox,
    c.RouteOutbox: outbox.route_outbox,
    c.AckDeliveries: outbox.ack_deliveries,
    c.Heartbeat: attempts.heartbeat,
    c.Complete: attempts.complete,
    c.Release: attempts.release,
}
assert set(HANDLERS) == set(c.COMMAND_TYPES.values()), "every command needs a handler"

# Leader commands whose decisions depend on time: the newest time they carried is the
# cluster clock a new leader must not be behind (ARCHITECTURE invariant 6).
CLOCKED = (c.Claim, c.Lease, c.Sweep)
# How far behind the cluster's committed time (the newest leader clock, META_CLOCK) a
# command from any node may be stamped before apply raises its `now_ms` to that time.
STAMP_BEHIND_LIMIT_MS = 2000

# The key under which a request's hash is kept in its stored result.
REQUEST_HASH_KEY = "_request_hash"

DEDUPED = (c.PutJob, c.CreateJobs, c.DeleteJob, c.PauseJob, c.ResumeJob, c.TriggerManual,
           c.Backfill, c.Prune, c.PutTenant, c.RetryOutbox, c.SetWebhookKey, c.AlertAction,
           c.CancelOccurrence, c.PutConcurrencyGroup, c.PutCalendar, c.DeleteCalendar,
           c.BulkPause, c.ApplyJobs, c.PutChannel, c.DeleteChannel)


class StateMachine:
    """Applies commands to one SQLite database. Only one thread may call `apply`."""

    def __init__(self, conn: sqlite3.Connection, listener: Listener | None = None,
                 bulk_claims: bool = True, speaks: int = protocol.PROTOCOL_LEVEL) -> None:
        """`bulk_claims=False` decides every claim item one by one instead of taking the
        common ones in set statements (the reference that path is tested against).

        `speaks`: the protocol level this node reads. An entry that needs more is
        undecodable here, as it is for a build of that level (the node stops, exit 70);
        below PROTOCOL_LEVEL only to emulate an older build in tests."""
        self.conn = conn
        self.speaks = speaks
        self.listener = listener
        self.handlers = dict(HANDLERS)
        if not bulk_claims:
            self.handlers[c.Claim] = functools.partial(occurrences.claim, bulk=False)

    @property
    def last_applied(self) -> int:
        row = self.conn.execute(
            "SELECT value FROM meta WHERE key = ?", (META_LAST_APPLIED,)
        ).fetchone()
        return int(row[0]) if row else 0

    def apply_bytes(self, index: int, data: bytes) -> dict[str, Any]:
        cmd = c.decode(data)
        # Judged on the bytes below this build's level (an older build refuses a field it
        # lacks even at its default); on the command otherwise, which is the same for
        # what this build writes and cheaper.
        beyond = protocol.unmet_entry(data, self.speaks) if self.speaks < \
            protocol.PROTOCOL_LEVEL else protocol.unmet(cmd, self.speaks)
        if beyond is not None:
            raise c.UndecodableCommand(
                f"{cmd.TYPE} ({beyond.feature}) needs protocol level {beyond.level}; this "
                f"node speaks level {self.speaks}")
        return self.apply(index, cmd)

    def apply(self, index: int, cmd: c.Command) -> dict[str, Any]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            ctx = ApplyContext(conn, index)
            if index <= ctx.meta(META_LAST_APPLIED):
                conn.execute("ROLLBACK")
                return ok(replayed=True)
            result = self._dispatch(ctx, cmd)
            ctx.set_meta(META_LAST_APPLIED, index)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if self.listener is not None:
            try:
                self.listener(cmd, result)
            except Exception:  # noqa: BLE001 - the entry is committed; a hook must not stop us
                log.exception("listener failed after applying index %d", index)
        return result

    def _dispatch(self, ctx: ApplyContext, cmd: c.Command) -> dict[str, Any]:
        if cmd.LEADER_ONLY:
            epoch = ctx.meta(META_EPOCH)
            if epoch == 0 or cmd.epoch != epoch:  # type: ignore[attr-defined]
                return rejected(
                    errors.STALE_EPOCH,
                    f"command from epoch {cmd.epoch} but the current epoch is {epoch}",  # type: ignore[attr-defined]
                    epoch=epoch,
                )
            if isinstance(cmd, CLOCKED):
                now = cmd.now_ms
                if now > ctx.meta(META_CLOCK):
                    ctx.set_meta(META_CLOCK, now)
        elif not isinstance(cmd, c.BeginEpoch):
            cmd = _not_behind_the_cluster(ctx, cmd)
        refused = _above_cluster_level(ctx, cmd)
        if refused is not None:
            return refused  # not recorded: the same request applies once the level rose
        if isinstance(cmd, DEDUPED):
            given = getattr(cmd, "request_hash", None)
            row = ctx.conn.execute(
                "SELECT result FROM requests WHERE request_id = ?", (cmd.request_id,)
            ).fetchone()
            if row is not None:
                stored = json.loads(row[0])
                stored_hash = stored.pop(REQUEST_HASH_KEY, None)
                if given is not None and stored_hash is not None and given != stored_hash:
                    return rejected(
                        errors.IDEMPOTENCY_KEY_REUSED,
                        "this Idempotency-Key was already used for a different request",
                        "Idempotency-Key")
                return {**stored, "replayed_request": True}
            result = self.handlers[type(cmd)](ctx, cmd)
            if result.get("rejected") == errors.RATE_LIMITED:
                return result  # a rate limit passes: a later retry must be applied afresh
            # The request's hash is kept inside the stored result (records written before
            # it have none, and replay as they always did).
            record = result if given is None else {**result, REQUEST_HASH_KEY: given}
            ctx.conn.execute(
                "INSERT INTO requests (request_id, result, applied_ms) VALUES (?, ?, ?)",
                (cmd.request_id, json.dumps(record, sort_keys=True), cmd.now_ms),
            )
            return result
        return self.handlers[type(cmd)](ctx, cmd)
