"""Pre-vote (Raft thesis §9.6) for the pysyncobj adapter: the pure parts.

pysyncobj raises its term as soon as its election timer fires. A follower that was
paused or cut off therefore comes back with a higher term and deposes a healthy leader
(each such return costs an election and discards the commands in flight). With
pre-vote, a follower whose timer fires first asks its peers "would you vote for me at
term + 1?" and raises its term only when a majority (itself included) says yes. A peer
says yes only when it has not heard from a leader within its minimum election timeout
and the asker's log is at least as up to date as its own. Answering changes nothing on
the peer: no term, no vote.

Rolling upgrades. A node of an older version ignores the pre-vote messages (pysyncobj
drops message types it does not know). Counting its silence as "no" could block
elections for good: if the old node's log is behind, it cannot win a real election
either. So every node announces that it speaks pre-vote (`HELLO`) on each new
connection, and a peer that has been connected for `hello_grace_s` without announcing
it is counted as "yes": it would grant or refuse the real vote by plain Raft rules
anyway, so the cluster behaves exactly as before the upgrade with respect to that peer.
A peer that announced pre-vote and does not answer (paused, partitioned) counts as
"no". A peer connected for less than the grace counts as "no" for now: the round is
re-evaluated every tick until the election timer fires again and a new round starts.

This module holds the message names, the vote decision and the tally; the wiring into
pysyncobj's tick and message handler is in `raftcron.cluster.raft.RaftNode`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field

# Message types; pysyncobj ignores types it does not know, so older nodes drop these.
HELLO = "rc_pre_vote_hello"
REQUEST = "rc_pre_vote"
RESPONSE = "rc_pre_vote_response"

# Refusal reasons (sent in the response, shown in the logs).
REFUSED_LEADER = "I am the leader"
REFUSED_LEASE = "heard from a leader recently"
REFUSED_TERM = "my term is higher"
REFUSED_LOG = "my log is more up to date"
REFUSED_VOTED = "I voted for another node in that term"
REFUSED_COMPETING = "I am asking for that term myself"


@dataclass(frozen=True)
class LogPosition:
    """The (term, index) of the last entry of a log; compared as Raft compares logs."""

    term: int
    index: int

    def at_least_as_up_to_date_as(self, other: LogPosition) -> bool:
        return (self.term, self.index) >= (other.term, other.index)


@dataclass(frozen=True)
class Decision:
    granted: bool
    reason: str = ""
    # When refused only because a leader was heard from recently: in how many seconds
    # that contact is older than the minimum election timeout (the asker may ask again).
    retry_after_s: float | None = None


def decide(*, is_leader: bool, since_leader_contact_s: float | None, min_timeout_s: float,
           proposed_term: int, current_term: int, candidate_log: LogPosition,
           own_log: LogPosition, voted_for_other: bool = False,
           competing_for_term: int | None = None, asker_wins_tie: bool = True) -> Decision:
    """Whether this node would vote for a candidate at `proposed_term`.

    `since_leader_contact_s` is the time since this node last accepted an append_entries
    from a leader (None: never). A leader never grants: it is the leader others hear
    from. The term check refuses an asker that is behind (it would lose the real election
    anyway); the log check is Raft's voting rule (§5.4.1).

    Two more refusals avoid split votes (two candidates at one term, each with its own
    vote, so nobody wins and the cluster waits another election timeout):
    - `voted_for_other`: this node already voted for another node at `current_term`, so
      it would refuse the real vote at that term too;
    - `competing_for_term`: this node is running its own pre-vote round for that term
      (or has won it). Of two such askers only one may get the other's yes: the one whose
      log is newer, or with equal logs the one for which `asker_wins_tie` holds (a fixed
      order of node addresses, the same on both). The tie winner by address whose log is
      behind cannot win the real election (the other refuses it for its log): refusing
      the other too would leave both refusing each other in every round, and no leader.
    """
    if is_leader:
        return Decision(False, REFUSED_LEADER)
    if proposed_term < current_term:
        return Decision(False, REFUSED_TERM)
    if proposed_term == current_term and voted_for_other:
        return Decision(False, REFUSED_VOTED)
    if not candidate_log.at_least_as_up_to_date_as(own_log):
        return Decision(False, REFUSED_LOG)
    if since_leader_contact_s is not None and since_leader_contact_s < min_timeout_s:
        return Decision(False, REFUSED_LEASE,
                        retry_after_s=min_timeout_s - since_leader_contact_s)
    if competing_for_term is not None and competing_for_term >= proposed_term \
            and not asker_wins_tie and own_log.at_least_as_up_to_date_as(candidate_log):
        return Decision(False, REFUSED_COMPETING)
    return Decision(True)


@dataclass
class PreVoteRound:
    """One round of pre-vote: asked at `base_term` for `base_term + 1`."""

    round_id: int
    base_term: int
    started_at: float
    granted: set[Hashable] = field(default_factory=set)
    refused: dict[Hashable, str] = field(default_factory=dict)
    # Peers refused only for a recent leader contact: when to ask them again.
    ask_again_at: dict[Hashable, float] = field(default_factory=dict)
    won: bool = False
    # Silent peers counted as a yes when the round was won (see `assumed_old`).
    assumed_old: set[Hashable] = field(default_factory=set)

    def record(self, peer: Hashable, granted: bool, reason: str,
               retry_after_s: float | None, now: float) -> None:
        if granted:
            self.granted.add(peer)
            self.refused.pop(peer, None)
            self.ask_again_at.pop(peer, None)
            return
        self.refused[peer] = reason
        if retry_after_s is not None:
            self.ask_again_at[peer] = now + max(0.0, retry_after_s)
        else:
            self.ask_again_at.pop(peer, None)

    def due_for_asking_again(self, now: float) -> list[Hashable]:
        due = [p for p, at in self.ask_again_at.items() if at <= now]
        for p in due:
            del self.ask_again_at[p]
        return due


def assumed_old(peers: Iterable[Hashable], *, speaks_pre_vote: set[Hashable],
                connected_since: Mapping[Hashable, float], now: float,
                hello_grace_s: float) -> set[Hashable]:
    """Peers counted as a yes because they run a version without pre-vote: connected for
    at least the grace and never announced pre-vote on this connection."""
    return {p for p in peers
            if p not in speaks_pre_vote and p in connected_since
            and now - connected_since[p] >= hello_grace_s}


def has_majority(yes_from_peers: int, voters_besides_self: int) -> bool:
    """Yes from this node plus `yes_from_peers` is a majority of the voters."""
    return 1 + yes_from_peers > (voters_besides_self + 1) / 2
