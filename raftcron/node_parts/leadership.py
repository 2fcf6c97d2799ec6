"""Leading: a node that becomes leader of a term begins its epoch (`begin_epoch`, only
once a majority confirms its clock) and starts the leader duties; one whose clock no
majority confirms hands leadership to a peer; a leader shutting down hands it over first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from raftcron.cluster.proposer import ProposalError, post_to_loop
from raftcron.core import commands as c
from raftcron.leader.duties import LeaderDuties
from raftcron.node_parts.base import NodeBase

log = logging.getLogger("raftcron.node")

MAX_CLOCK_BEHIND_MS = 2000
BEGIN_EPOCH_RETRY_S = 0.2
HANDOVER_TIMEOUT_S = 2.0


class Leadership(NodeBase):
    """Follows the Raft role from the tick thread and acts on it: begins epochs, steps
    down when the clock is untrusted, hands leadership over on shutdown."""

    def _on_tick(self) -> None:
        role = (self.raft.is_leader(), self.raft.term())
        if role != self._role:
            self._role = role
            if self.loop is not None:
                post_to_loop(self.loop, self._role_changed, role)

    def _role_changed(self, role: tuple[bool, int]) -> None:
        is_leader, term = role
        log.info("term %d: %s", term, "leader" if is_leader else
                 f"follower (leader at {self.raft.leader_addr() or 'none yet'})")
        if self.duties and (not is_leader or term != self.duties.epoch):
            log.info("stopping leader duties of epoch %d", self.duties.epoch)
            self.duties.stop()
            self.duties = None
        if is_leader and self.duties is None and self._beginning != term and not self.stopping:
            self._beginning = term
            asyncio.get_running_loop().create_task(self._begin_epoch(term))

    async def _commit_begin_epoch(self, term: int) -> dict[str, Any] | None:
        """Propose `begin_epoch(term)` until its result is known, while this node leads
        `term` with a confirmed clock. None: leadership moved on first.

        A proposal that timed out may still commit (a follower catching up holds the
        majority back for a while): giving up would leave a leader without duties until
        the next election, firing nothing (a chaos run saw 70 s). Proposing again is safe:
        a second `begin_epoch` of the same term is refused as not newer, with the epoch,
        and that answer means "begun"."""
        assert self.proposer is not None
        while True:
            if not await self._wait_clock_confirmed(term):
                return None
            try:
                return await self.proposer.propose_leader(
                    c.BeginEpoch(term, self.config.node_id, int(time.time() * 1000))
                )
            except ProposalError as e:
                log.warning("begin_epoch(%d) not committed yet (%s): proposing it again",
                            term, e.message)
            await asyncio.sleep(BEGIN_EPOCH_RETRY_S)
            if self._role != (True, term) or self.stopping:
                return None

    async def _begin_epoch(self, term: int) -> None:
        result = await self._commit_begin_epoch(term)
        if result is None:
            self._beginning = None
            return
        if not result.get("ok") and result.get("epoch") != term:
            log.info("begin_epoch(%d) rejected: %s", term, result.get("message"))
            self._beginning = None
            return
        if self._role != (True, term):
            self._beginning = None
            return
        clock_ms = result.get("clock_ms", 0)
        while int(time.time() * 1000) < clock_ms - MAX_CLOCK_BEHIND_MS:
            # Time never goes backwards in the state: a leader whose clock is behind the
            # newest committed time must not tick until it catches up.
            if not self.skew_blocked:
                log.error("clock is %d ms behind the cluster; not ticking",
                          clock_ms - int(time.time() * 1000))
            self.skew_blocked = True
            await asyncio.sleep(0.5)
            if self._role != (True, term):
                self._beginning = None
                return
        self.skew_blocked = False
        self._beginning = None
        if self.stopping:
            return
        log.info("epoch %d begins on %s", term, self.config.node_id)
        self.duties = LeaderDuties(term, self.proposer, self.open_reader, self._duties_exited,
                                   self.duty_settings, self.metrics.on_duty_event)
        for duty in (self.duties.ticker, self.duties.sweeper, self.duties.dispatcher,
                     self.duties.deadlines, self.duties.retention, self.duties.backlog,
                     self.duties.run_bounds, self.duties.availability):
            if duty is not None:
                duty.gate = self.clock_guard.confirmed
        for duty in (self.duties.dispatcher, self.duties.deadlines, self.duties.availability,
                     self.duties.sweeper):
            duty.level = self.levels.writable
        self.duties.start()

    def _leading_epoch(self) -> int | None:
        """The epoch whose duties run on this node (None: it does not lead one)."""
        duties = self.duties
        return None if duties is None or duties.stopped else duties.epoch

    async def _wait_clock_confirmed(self, term: int) -> bool:
        """Until a majority confirms this node's clock, while it still leads `term`.

        An unconfirmed leader proposes no command of its own, not even `begin_epoch`:
        each would carry its clock (`now_ms`), and a fast clock committed once holds back
        every later leader (the MAX_CLOCK_BEHIND_MS wait). Meanwhile the step-down loop
        hands leadership to a peer. False: leadership moved on first."""
        logged = False
        while not self.clock_guard.confirmed():
            if not logged:
                log.warning("term %d: leader, but this node's clock is not confirmed by a "
                            "majority yet: beginning no epoch, leasing nothing", term)
                logged = True
            await asyncio.sleep(0.1)
            if self._role != (True, term) or self.stopping:
                return False
        if logged:
            log.info("term %d: clock confirmed by a majority", term)
        return True

    async def _step_down_when_clock_untrusted(self) -> None:
        """A leader whose clock no majority confirms (off, not measured, or its probes
        failing) does not tick; after a few seconds it hands leadership to a peer
        instead of leaving the cluster idle."""
        untrusted_since: float | None = None
        handing_over = False
        while True:
            await asyncio.sleep(0.5)
            if not self.raft.is_leader() or self.clock_guard.confirmed():
                untrusted_since = None
                handing_over = False
                continue
            if untrusted_since is None:
                untrusted_since = time.monotonic()
                log.error("clock not confirmed by a majority (skew %s ms, %d of %d peers "
                          "agree): not ticking", self.clock_guard.skew_ms(),
                          self.clock_guard.agreeing(), len(self.clock_guard.peer_urls))
            elif handing_over or time.monotonic() - untrusted_since > 3.0:
                # Hand over to a peer that answers (a paused peer still accepts TCP and
                # would swallow the request). pysyncobj denies a transfer to a follower
                # that lacks an entry (a heartbeat in flight, common under load), so it is
                # asked again every half second until this node no longer leads: with
                # pre-vote, no stray election deposes a leader that does not tick.
                alive = self.clock_guard.recently_seen()
                by_url = {p.http_url: p.raft_addr for p in self.config.peers}
                target = next((by_url[u] for u in alive if u in by_url), None)
                if not handing_over:
                    log.error("handing leadership over to %s: this node's clock is not "
                              "confirmed", target or "any follower")
                handing_over = True
                self.transfer.request(target)

    def _duties_exited(self, duties: LeaderDuties, exc: BaseException | None) -> None:
        if self.duties is duties:
            self.duties = None
        # Still leader in the same term (e.g. a transient proposal timeout): begin again.
        if self._role[0] and self._role[1] == duties.epoch and self._beginning is None:
            self._beginning = duties.epoch
            asyncio.get_running_loop().call_later(
                0.2, lambda: asyncio.ensure_future(self._begin_epoch(duties.epoch))
            )

    async def hand_over(self, timeout_s: float = HANDOVER_TIMEOUT_S) -> bool:
        """Stop the leader duties and ask pysyncobj to transfer leadership to a caught-up
        follower (Raft TimeoutNow), waiting until this node no longer leads. A follower
        returns at once. True when leadership moved within `timeout_s`."""
        if not self.raft.is_leader():
            return False
        if self.duties:
            self.duties.stop()
            self.duties = None
        term = self.raft.term()
        deadline = time.monotonic() + timeout_s
        log.info("shutting down as leader of term %d: transferring leadership", term)
        while self.raft.is_leader() and time.monotonic() < deadline:
            # The target must have every entry: a denied request (a heartbeat still in
            # flight) is simply asked again.
            done = self.transfer.request()
            until = min(deadline, time.monotonic() + 0.3)
            while self.raft.is_leader() and time.monotonic() < until:
                await asyncio.sleep(0.01 if not done.is_set() else 0.02)
        if self.raft.is_leader():
            log.warning("leadership transfer did not complete within %.1f s; stopping "
                        "anyway (the others elect a leader after the election timeout)",
                        timeout_s)
            return False
        log.info("leadership handed over (term %d -> %d, leader %s)", term, self.raft.term(),
                 self.raft.leader_addr())
        return True
