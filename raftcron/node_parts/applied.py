"""What an applied command wakes on a node. The apply listener runs on the Raft tick
thread right after the entry's transaction; the leader duties it wakes (ticker,
dispatcher, outbox) run on the event loop, so it posts the rest there."""

from __future__ import annotations

import time
from typing import Any

from raftcron.cluster.proposer import post_to_loop
from raftcron.core import commands as c
from raftcron.leader.dispatch import freed_by
from raftcron.node_parts.base import NodeBase

JOB_COMMANDS = (c.PutJob, c.CreateJobs, c.DeleteJob, c.PauseJob, c.ResumeJob)
WORK_COMMANDS = (c.Claim, c.TriggerManual, c.Backfill, c.Complete, c.Sweep, c.Release,
                 c.PutJob, c.ResumeJob, c.DeleteJob, c.PutTenant, c.PutConcurrencyGroup)
OUTBOX_COMMANDS = (c.RaiseAlert, c.ResolveAlert, c.Complete, c.Sweep, c.RetryOutbox)


def changed_job_ids(cmd: c.Command) -> set[str]:
    """The jobs a job command touched: the ticker reloads exactly these."""
    if isinstance(cmd, c.CreateJobs):
        return {job["id"] for job in cmd.jobs}
    if isinstance(cmd, c.PutJob):
        return {cmd.job["id"]}
    return {cmd.job_id}  # type: ignore[attr-defined]


class AppliedHooks(NodeBase):
    """The apply listener (`StateMachine(listener=...)`) and what it wakes."""

    def _on_applied(self, cmd: c.Command, result: dict[str, Any]) -> None:
        # First: right after the entry's transaction, before the next one (a mark pins
        # the state at its own index).
        self.digest_marks.on_applied(cmd, result)
        if isinstance(cmd, c.SetClusterLevel) and result.get("ok"):
            self.levels.note_committed(int(result.get("level", 0)))
        loop = self.loop
        if loop is None or not result.get("ok"):
            return
        if cmd.LEADER_ONLY or isinstance(cmd, c.BeginEpoch):
            # This node's clock minus the leader's, as committed (plus replication delay).
            sent_ms: int = cmd.now_ms  # type: ignore[attr-defined]
            self.metrics.skew_ms = int(time.time() * 1000) - sent_ms
            if isinstance(cmd, c.BeginEpoch | c.ConfirmClock):
                # Proposed only while a majority confirms the leader's clock.
                epoch = cmd.term if isinstance(cmd, c.BeginEpoch) else cmd.epoch
                self.stamp_clock.observe(sent_ms, epoch, self.raft.applying_live())
        post_to_loop(loop, self._handle_applied, cmd, result)

    def _handle_applied(self, cmd: c.Command, result: dict[str, Any]) -> None:
        if isinstance(cmd, c.BeginEpoch):
            self.metrics.epoch_changes.inc()
        duties = self.duties
        if duties is None or duties.stopped:
            return
        if isinstance(cmd, c.Lease) and cmd.epoch == duties.epoch:
            self.metrics.observe_leases(cmd.now_ms, result.get("leases") or [])
        if isinstance(cmd, OUTBOX_COMMANDS):
            duties.outbox.notify()
        if isinstance(cmd, JOB_COMMANDS):
            duties.ticker.notify_jobs_changed(changed_job_ids(cmd))
        if isinstance(cmd, c.BulkPause):
            duties.ticker.notify_jobs_changed(set(result.get("job_ids") or ()))
            duties.dispatcher.notify()
        if isinstance(cmd, c.PutCalendar | c.DeleteCalendar):
            duties.ticker.notify_calendars_changed()
        if isinstance(cmd, WORK_COMMANDS):
            jobs, tenants = freed_by(cmd)
            duties.dispatcher.free(jobs, tenants)
            duties.dispatcher.notify()
