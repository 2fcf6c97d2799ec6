"""The pre-vote decision and tally (raftcron.cluster.prevote), without a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raftcron.cluster import prevote
from raftcron.cluster.prevote import Decision, LogPosition, PreVoteRound, decide
from raftcron.config import ConfigError, load_config

OWN = LogPosition(term=5, index=100)


def ask(**overrides: Any) -> prevote.Decision:
    args: dict[str, Any] = {
        "is_leader": False, "since_leader_contact_s": 1.0, "min_timeout_s": 0.3,
        "proposed_term": 6, "current_term": 5, "candidate_log": OWN, "own_log": OWN,
    }
    args.update(overrides)
    return decide(**args)


def test_grants_when_no_leader_was_heard_within_the_minimum_timeout_and_log_is_as_new() -> None:
    assert ask().granted
    assert ask(since_leader_contact_s=0.3).granted  # exactly the minimum: silent long enough
    assert ask(since_leader_contact_s=None).granted  # never heard from a leader


def test_refuses_while_a_leader_was_heard_recently_and_says_when_to_ask_again() -> None:
    d = ask(since_leader_contact_s=0.1)
    assert not d.granted and d.reason == prevote.REFUSED_LEASE
    assert d.retry_after_s == pytest.approx(0.2)


def test_a_leader_never_grants() -> None:
    d = ask(is_leader=True, since_leader_contact_s=None)
    assert not d.granted and d.reason == prevote.REFUSED_LEADER
    assert d.retry_after_s is None


def test_refuses_an_asker_whose_term_is_behind() -> None:
    d = ask(proposed_term=5, current_term=6)
    assert not d.granted and d.reason == prevote.REFUSED_TERM
    assert ask(proposed_term=6, current_term=6).granted  # a candidate at our term + 0


@pytest.mark.parametrize("candidate, granted", [
    (LogPosition(5, 99), False),   # same last term, shorter log
    (LogPosition(4, 500), False),  # longer log of an older term
    (LogPosition(5, 100), True),   # identical
    (LogPosition(5, 101), True),   # longer, same term
    (LogPosition(6, 1), True),     # newer last term wins over length
])
def test_log_must_be_at_least_as_up_to_date(candidate: LogPosition, granted: bool) -> None:
    d = ask(candidate_log=candidate)
    assert d.granted is granted
    if not granted:
        assert d.reason == prevote.REFUSED_LOG and d.retry_after_s is None


def test_log_refusal_wins_over_lease_so_the_asker_does_not_ask_again() -> None:
    d = ask(candidate_log=LogPosition(5, 1), since_leader_contact_s=0.0)
    assert d.reason == prevote.REFUSED_LOG and d.retry_after_s is None


@pytest.mark.parametrize("yes, others, majority", [
    (0, 0, True),   # a single node elects itself
    (0, 2, False), (1, 2, True), (2, 2, True),
    (1, 4, False), (2, 4, True),
    (0, 1, False), (1, 1, True),  # two voters need both
])
def test_majority_counts_this_node(yes: int, others: int, majority: bool) -> None:
    assert prevote.has_majority(yes, others) is majority


def test_round_records_answers_and_asks_lease_refusers_again_once_due() -> None:
    r = PreVoteRound(round_id=1, base_term=5, started_at=10.0)
    r.record("b", False, prevote.REFUSED_LEASE, 0.05, now=10.0)
    r.record("c", False, prevote.REFUSED_LOG, None, now=10.0)
    assert r.due_for_asking_again(10.04) == []
    assert r.due_for_asking_again(10.05) == ["b"]
    assert r.due_for_asking_again(10.06) == []  # asked once per refusal
    r.record("b", True, "", None, now=10.07)
    assert r.granted == {"b"} and set(r.refused) == {"c"}


def test_a_peer_that_never_announced_pre_vote_counts_as_yes_only_after_the_grace() -> None:
    connected = {"old": 0.0, "fresh": 9.9, "new": 0.0}
    old = prevote.assumed_old(["old", "fresh", "new", "gone"], speaks_pre_vote={"new"},
                              connected_since=connected, now=10.0, hello_grace_s=0.6)
    # "fresh" may still announce it; "new" did (its silence is a no); "gone" is not
    # connected: it cannot vote at all.
    assert old == {"old"}


def _config(tmp_path: Path, raft_table: str) -> str:
    (tmp_path / "s").write_text("x" * 32)
    path = tmp_path / "n.toml"
    path.write_text('node_id = "n1"\ndata_dir = "d"\nraft_addr = "127.0.0.1:1"\n'
                    'http_port = 2\nsecret_file = "s"\ntokens_file = "t.json"\n'
                    f'[raft]\n{raft_table}\n')
    return str(path)


def test_pre_vote_is_on_unless_the_config_turns_it_off(tmp_path: Path) -> None:
    assert "preVote" not in load_config(_config(tmp_path, "")).raft_overrides
    off = load_config(_config(tmp_path, "preVote = false")).raft_overrides
    assert off["preVote"] is False


@pytest.mark.parametrize("value", ['"no"', "0", '"false"'])
def test_a_pre_vote_setting_that_is_not_a_boolean_is_a_config_error(
        tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match="raft.preVote"):
        load_config(_config(tmp_path, f"preVote = {value}"))


def test_a_vote_already_given_at_that_term_refuses_but_a_higher_term_is_free() -> None:
    assert ask(proposed_term=6, current_term=6, voted_for_other=True) == Decision(
        False, prevote.REFUSED_VOTED)
    assert ask(proposed_term=7, current_term=6, voted_for_other=True).granted


def test_of_two_askers_for_one_term_only_the_tie_winner_gets_a_yes() -> None:
    assert ask(proposed_term=6, competing_for_term=6, asker_wins_tie=False) == Decision(
        False, prevote.REFUSED_COMPETING)
    assert ask(proposed_term=6, competing_for_term=6, asker_wins_tie=True).granted
    # A round for an older term is not competing with an asker for a newer one.
    assert ask(proposed_term=7, current_term=6, competing_for_term=6,
               asker_wins_tie=False).granted
    # An asker whose log is newer than this node's wins the tie: this node cannot win
    # the real election against it (the asker would refuse it for its log).
    newer = LogPosition(term=5, index=101)
    assert ask(proposed_term=6, competing_for_term=6, asker_wins_tie=False,
               candidate_log=newer).granted
