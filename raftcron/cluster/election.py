"""Elections in the pysyncobj adapter: pre-vote before a term is raised, and a log line
for every election started and every leader step-down, with its trigger.

`ElectionGuard` is mixed into `RaftNode` ahead of pysyncobj's `SyncObj`. It overrides
three of SyncObj's name-mangled internals (all called through `self`, so the override
takes effect): the message handler (to answer and count pre-votes, and to note when a
leader was last heard from), the connection callbacks (to learn which peers speak
pre-vote) and the state setter (to log step-downs). The election itself is still
pysyncobj's: at the start of each tick `_election_gate` runs before pysyncobj's own
election check and, when the election timer fired, either lets the election through
(pre-vote won, or a leadership transfer asked for it) or pushes the timer back by a
fresh election timeout and asks the peers instead. Everything here runs on the Raft
tick thread. See `raftcron.cluster.prevote` for the rules and the rolling-upgrade
choice.
"""

from __future__ import annotations

import logging
from typing import Any

from pysyncobj.monotonic import monotonic as raft_clock
from pysyncobj.syncobj import _RAFT_STATE

from raftcron.cluster import prevote
from raftcron.cluster.prevote import Decision, LogPosition, PreVoteRound

log = logging.getLogger("raftcron.raft")

# Every time here is on pysyncobj's clock (CLOCK_MONOTONIC_RAW, not time.monotonic): the
# election deadline and the leader's last answers are kept on it.

# A stall of the Raft thread this recent is named as a possible cause of an election.
STALL_RELEVANT_S = 5.0


def _addr(node: Any) -> str:
    return str(getattr(node, "address", node))


class ElectionGuard:
    """Pre-vote and election/step-down logging for a SyncObj subclass (see module doc)."""

    # Attributes of SyncObj read here (name-mangled; set by SyncObj.__init__).
    _SyncObj__raftState: int
    _SyncObj__raftCurrentTerm: int
    _SyncObj__raftElectionDeadline: float
    _SyncObj__transferInProgress: bool
    _SyncObj__selfNode: Any
    _SyncObj__otherNodes: set[Any]
    _SyncObj__connectedNodes: set[Any]
    _SyncObj__lastResponseTime: dict[Any, float]
    _SyncObj__transport: Any
    _SyncObj__votedForNodeId: Any

    def _init_election_guard(self, pre_vote: bool = True) -> None:
        """Call before SyncObj.__init__ (its tick thread may tick before it returns)."""
        self.pre_vote_enabled = pre_vote
        self.elections_started = 0
        self.leader_step_downs = 0
        self.pre_vote_rounds = 0
        self._round: PreVoteRound | None = None
        self._round_seq = 0
        self._trigger: str | None = None  # why the first round since a leader contact began
        self._trigger_at = 0.0
        self._speaks_pre_vote: set[Any] = set()
        self._connected_since: dict[Any, float] = {}
        self._last_leader_contact: float | None = None
        self._last_leader: Any = None
        self._timeout_drawn: float | None = None
        self._timeout_drawn_at = 0.0
        self._last_stall: tuple[float, float] | None = None  # (when, seconds)
        self._step_down_cause: str | None = None
        self._led_term = 0
        self._stepped_down_at: float | None = None
        self._gate_failures = 0

    # --- hooks into SyncObj -------------------------------------------------------------
    def _onTick(self, timeToWait: float = 0.0) -> None:  # noqa: N802,N803 - pysyncobj's
        deadline = self._SyncObj__raftElectionDeadline
        try:
            self._election_gate()
        except Exception:  # noqa: BLE001 - never stop the Raft thread over this
            # Undo what the gate did to the timer, so that pysyncobj decides this tick by
            # plain Raft: a broken gate must not leave the node unable to stand at all.
            self._SyncObj__raftElectionDeadline = deadline
            self._round = None
            self._gate_failures += 1
            n = self._gate_failures
            if n in (1, 10, 100) or n % 1000 == 0:  # not a line per tick
                log.exception("election gate failed (%d times); such a tick follows "
                              "plain Raft", n)
        super()._onTick(timeToWait)  # type: ignore[misc]

    def _SyncObj__generateRaftTimeout(self) -> float:  # noqa: N802
        self._timeout_drawn = super()._SyncObj__generateRaftTimeout()  # type: ignore[misc]
        self._timeout_drawn_at = raft_clock()
        return self._timeout_drawn

    def _SyncObj__onNodeConnected(self, node: Any) -> None:  # noqa: N802
        super()._SyncObj__onNodeConnected(node)  # type: ignore[misc]
        self._connected_since[node] = raft_clock()
        self._speaks_pre_vote.discard(node)  # a new connection may be a new version
        if self.pre_vote_enabled:
            self._SyncObj__transport.send(node, {"type": prevote.HELLO})

    def _SyncObj__onNodeDisconnected(self, node: Any) -> None:  # noqa: N802
        super()._SyncObj__onNodeDisconnected(node)  # type: ignore[misc]
        self._connected_since.pop(node, None)
        self._speaks_pre_vote.discard(node)

    def _SyncObj__setState(self, newState: int) -> None:  # noqa: N802,N803
        old = self._SyncObj__raftState
        super()._SyncObj__setState(newState)  # type: ignore[misc]
        if newState == _RAFT_STATE.LEADER and old != _RAFT_STATE.LEADER:
            self._led_term = self._SyncObj__raftCurrentTerm
        elif old == _RAFT_STATE.LEADER and newState != _RAFT_STATE.LEADER:
            self.leader_step_downs += 1
            self._stepped_down_at = raft_clock()
            log.info("stepping down as leader of term %d: %s", self._led_term,
                     self._step_down_cause or self._fallback_cause())

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:  # noqa: N802
        mtype = message.get("type") if isinstance(message, dict) else None
        if not self.pre_vote_enabled:
            pass  # like an older version: pysyncobj drops the pre-vote messages
        elif mtype == prevote.HELLO:
            self._speaks_pre_vote.add(node)
            return
        elif mtype == prevote.REQUEST:
            self._answer_pre_vote(node, message)
            return
        elif mtype == prevote.RESPONSE:
            self._on_pre_vote_response(node, message)
            return
        term = message.get("term") if isinstance(message, dict) else None
        current = self._SyncObj__raftCurrentTerm
        if isinstance(term, int) and term > current and self._is_leader_now():
            self._step_down_cause = (f"{mtype} at the higher term {term} "
                                     f"from {_addr(node)}")
        if mtype == "append_entries" and isinstance(term, int) and term >= current:
            self._last_leader_contact = raft_clock()
            self._last_leader = node
            self._round = None
            self._trigger = None
        try:
            super()._SyncObj__onMessageReceived(node, message)  # type: ignore[misc]
        finally:
            self._step_down_cause = None

    # --- the gate in front of pysyncobj's election check ----------------------------------
    def _election_gate(self) -> None:
        if self._SyncObj__selfNode is None or not self._SyncObj__transport.ready:
            return
        if self._is_leader_now():
            self._round = None
            return
        now = raft_clock()
        r = self._round
        if r is not None and r.base_term != self._SyncObj__raftCurrentTerm:
            self._round = r = None  # the term moved on (a vote granted, a new leader)
        if r is not None and not r.won:
            self._progress(r, now)
        if self._SyncObj__raftElectionDeadline >= now or not self._SyncObj__connectedNodes:
            return  # pysyncobj will not start an election this tick either
        if self._SyncObj__transferInProgress:
            self._log_election(now, "the leader handed leadership over (timeout_now)")
            return
        if not self.pre_vote_enabled:
            self._log_election(now, "pre-vote disabled")
            return
        if r is None or not r.won:
            r = self._start_round(now)
            if not r.won:
                return
        self._round = None
        self._log_election(now, self._won_description(r, now))

    def _start_round(self, now: float) -> PreVoteRound:
        if self._trigger is None:
            self._trigger = self._describe_trigger(now)
            self._trigger_at = now
        self._round_seq += 1
        self.pre_vote_rounds += 1
        r = PreVoteRound(self._round_seq, self._SyncObj__raftCurrentTerm, now)
        self._round = r
        # The round lasts one fresh election timeout; pysyncobj must not raise the term
        # meanwhile. A round not won by then is followed by a new one.
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()
        log.debug("pre-vote round %d for term %d (%s)", r.round_id, r.base_term + 1,
                  self._trigger)
        for node in self._SyncObj__otherNodes:
            self._send_request(node, r)
        self._progress(r, now)
        return r

    def _send_request(self, node: Any, r: PreVoteRound) -> None:
        own = self._own_log()
        self._SyncObj__transport.send(node, {
            "type": prevote.REQUEST, "term": r.base_term + 1, "round": r.round_id,
            "last_log_index": own.index, "last_log_term": own.term,
        })

    def _progress(self, r: PreVoteRound, now: float) -> None:
        """Ask again the peers that refused only for a recent leader contact that has aged
        out since (a leader that just died), and decide whether the round is won."""
        for node in r.due_for_asking_again(now):
            self._send_request(node, r)
        silent = self._SyncObj__otherNodes - r.granted - set(r.refused)
        old = prevote.assumed_old(silent, speaks_pre_vote=self._speaks_pre_vote,
                                  connected_since=self._connected_since, now=now,
                                  hello_grace_s=self._hello_grace_s())
        if prevote.has_majority(len(r.granted) + len(old), len(self._SyncObj__otherNodes)):
            r.won = True
            r.assumed_old = old
            self._SyncObj__raftElectionDeadline = 0.0  # pysyncobj starts it this tick

    def _answer_pre_vote(self, node: Any, message: dict[str, Any]) -> None:
        if node not in self._SyncObj__otherNodes:
            return
        self._speaks_pre_vote.add(node)
        try:
            proposed = int(message["term"])
            candidate_log = LogPosition(int(message["last_log_term"]),
                                        int(message["last_log_index"]))
            round_id = message["round"]
        except (KeyError, TypeError, ValueError):
            log.warning("malformed pre-vote request from %s ignored", _addr(node))
            return
        now = raft_clock()
        since = (None if self._last_leader_contact is None
                 else now - self._last_leader_contact)
        own_round = self._round
        competing = (None if own_round is None
                     or own_round.base_term != self._SyncObj__raftCurrentTerm
                     else own_round.base_term + 1)
        voted = self._SyncObj__votedForNodeId
        decision: Decision = prevote.decide(
            is_leader=self._is_leader_now(), since_leader_contact_s=since,
            min_timeout_s=float(self._conf().raftMinTimeout), proposed_term=proposed,
            current_term=self._SyncObj__raftCurrentTerm, candidate_log=candidate_log,
            own_log=self._own_log(),
            voted_for_other=voted is not None and voted != getattr(node, "id", node),
            competing_for_term=competing,
            asker_wins_tie=(own_round is not None and not own_round.won
                            and _addr(node) < _addr(self._SyncObj__selfNode)))
        log.debug("pre-vote for %s at term %d: %s", _addr(node), proposed,
                  "granted" if decision.granted else f"refused ({decision.reason})")
        if decision.granted:
            # Give the asker the time to win the real election before this node's own
            # timer fires: a yes followed by an election of our own is a split vote.
            self._round = None
            self._SyncObj__raftElectionDeadline = max(
                self._SyncObj__raftElectionDeadline, now + self._SyncObj__generateRaftTimeout())
        self._SyncObj__transport.send(node, {
            "type": prevote.RESPONSE, "term": proposed, "round": round_id,
            "granted": decision.granted, "reason": decision.reason,
            "retry_after_s": decision.retry_after_s,
        })

    def _on_pre_vote_response(self, node: Any, message: dict[str, Any]) -> None:
        self._speaks_pre_vote.add(node)
        r = self._round
        if (r is None or r.won or message.get("round") != r.round_id
                or message.get("term") != r.base_term + 1
                or node not in self._SyncObj__otherNodes):
            return  # a late answer to an earlier round
        retry = message.get("retry_after_s")
        now = raft_clock()
        r.record(node, message.get("granted") is True, str(message.get("reason", "")),
                 float(retry) if isinstance(retry, (int, float)) else None, now)
        self._progress(r, now)

    # --- descriptions for the log -------------------------------------------------------
    def note_stall(self, seconds: float) -> None:
        self._last_stall = (raft_clock(), seconds)

    def _describe_trigger(self, now: float) -> str:
        led = self._stepped_down_at
        if led is not None and (self._last_leader_contact is None
                                or led > self._last_leader_contact):
            contact = (f"no append_entries from a leader since this node stopped leading "
                       f"term {self._led_term} {now - led:.2f} s ago")
        elif self._last_leader_contact is None:
            contact = "no append_entries from a leader since this node started"
        else:
            contact = (f"no append_entries from a leader for "
                       f"{now - self._last_leader_contact:.2f} s "
                       f"(last from {_addr(self._last_leader)})")
        drawn = ("?" if self._timeout_drawn is None else
                 f"{self._timeout_drawn:.2f} s, {now - self._timeout_drawn_at:.2f} s ago")
        stall = f"no Raft thread stall in the last {STALL_RELEVANT_S:.0f} s"
        if self._last_stall is not None and now - self._last_stall[0] < STALL_RELEVANT_S:
            stall = (f"the Raft thread stalled {self._last_stall[1]:.2f} s, "
                     f"{now - self._last_stall[0]:.2f} s ago")
        return f"{contact}; election timeout drawn {drawn}; {stall}"

    def _won_description(self, r: PreVoteRound, now: float) -> str:
        granted = ", ".join(sorted(_addr(n) for n in r.granted)) or "nobody"
        text = f"pre-vote granted by {granted} after {now - r.started_at:.3f} s"
        if r.assumed_old:
            text += (", and counted from " + ", ".join(sorted(_addr(n) for n in r.assumed_old))
                     + " (never announced pre-vote: an older version)")
        return text

    def _log_election(self, now: float, how: str) -> None:
        self.elections_started += 1
        if self._trigger is None:
            trigger = self._describe_trigger(now)
        else:  # described when the first pre-vote round since a leader contact began
            trigger = f"{self._trigger}; first pre-vote round {now - self._trigger_at:.2f} s ago"
        self._trigger = None
        log.info("starting an election for term %d: %s; %s",
                 self._SyncObj__raftCurrentTerm + 1, trigger, how)

    def _fallback_cause(self) -> str:
        now = raft_clock()
        ages = ", ".join(f"{_addr(n)} {now - t:.2f} s ago"
                         for n, t in sorted(self._SyncObj__lastResponseTime.items(),
                                            key=lambda kv: _addr(kv[0])))
        return (f"no answer from a majority within leaderFallbackTimeout "
                f"{self._conf().leaderFallbackTimeout} s (last answers: {ages or 'none'})")

    # --- small reads of SyncObj state ---------------------------------------------------
    def _is_leader_now(self) -> bool:
        return self._SyncObj__raftState == _RAFT_STATE.LEADER

    def _own_log(self) -> LogPosition:
        return LogPosition(int(self._SyncObj__getCurrentLogTerm()),  # type: ignore[attr-defined]
                           int(self._SyncObj__getCurrentLogIndex()))  # type: ignore[attr-defined]

    def _conf(self) -> Any:
        return self._SyncObj__conf  # type: ignore[attr-defined]

    def _hello_grace_s(self) -> float:
        """How long a connected peer may stay silent about pre-vote before it is taken
        for an older version: one maximum election timeout (a HELLO takes milliseconds)."""
        return float(self._conf().raftMaxTimeout)
