import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftcron.core import policy
from raftcron.core.policy import FIRE, SKIP_MISFIRE, OverlapDecision

MIN = 60_000


def decisions(plan):
    return [d for _, d in plan]


# --- misfire --------------------------------------------------------------------------

def test_on_time_instants_fire_under_every_policy():
    instants = [0, MIN, 2 * MIN]
    now = 2 * MIN + 30_000  # the oldest is 150 s late, grace 200 s
    for pol in ("skip", "run_once", "catch_up"):
        assert policy.plan_misfires(instants, now, pol, 200, 1) == [(t, FIRE) for t in instants]


def test_grace_boundary_is_inclusive():
    # now - t == grace is still on time; one ms more is missed
    assert policy.plan_misfires([0], 60_000, "skip", 60, 10) == [(0, FIRE)]
    assert policy.plan_misfires([0], 60_001, "skip", 60, 10) == [(0, SKIP_MISFIRE)]


def test_skip_skips_every_missed_instant():
    instants = [0, MIN, 2 * MIN, 3 * MIN]
    now = 3 * MIN + 10_000
    plan = policy.plan_misfires(instants, now, "skip", 30, 100)
    assert plan == [(0, SKIP_MISFIRE), (MIN, SKIP_MISFIRE), (2 * MIN, SKIP_MISFIRE),
                    (3 * MIN, FIRE)]


def test_run_once_fires_only_the_latest_missed():
    instants = [0, MIN, 2 * MIN, 3 * MIN]
    now = 10 * MIN
    plan = policy.plan_misfires(instants, now, "run_once", 30, 100)
    assert decisions(plan) == [SKIP_MISFIRE, SKIP_MISFIRE, SKIP_MISFIRE, FIRE]


def test_run_once_with_on_time_tail_still_fires_one_missed():
    instants = [0, MIN, 2 * MIN, 3 * MIN]
    now = 3 * MIN + 5_000  # only the last is within the 60 s grace
    plan = policy.plan_misfires(instants, now, "run_once", 60, 100)
    assert decisions(plan) == [SKIP_MISFIRE, SKIP_MISFIRE, FIRE, FIRE]


def test_catch_up_fires_the_latest_n_missed():
    instants = [i * MIN for i in range(6)]
    now = 100 * MIN
    plan = policy.plan_misfires(instants, now, "catch_up", 0, 2)
    assert decisions(plan) == [SKIP_MISFIRE] * 4 + [FIRE, FIRE]
    plan = policy.plan_misfires(instants, now, "catch_up", 0, 100)
    assert decisions(plan) == [FIRE] * 6


def test_catch_up_zero_fires_no_missed_instant():
    assert decisions(policy.plan_misfires([0, MIN], 10 * MIN, "catch_up", 0, 0)) == [
        SKIP_MISFIRE, SKIP_MISFIRE]


def test_unknown_misfire_policy_raises():
    with pytest.raises(ValueError):
        policy.plan_misfires([0], 10, "whatever", 0, 1)


def test_empty_instants():
    assert policy.plan_misfires([], 10, "run_once", 0, 1) == []


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 10_000), unique=True).map(sorted),
    st.integers(0, 20_000),
    st.sampled_from(["skip", "run_once", "catch_up"]),
    st.integers(0, 5),
    st.integers(0, 5),
)
def test_misfire_plan_properties(instants, now, pol, grace_s, catch_up_max):
    instants_ms = [t * 100 for t in instants]
    now_ms = now * 100
    plan = policy.plan_misfires(instants_ms, now_ms, pol, grace_s, catch_up_max)
    assert [t for t, _ in plan] == instants_ms  # every instant gets a decision, in order
    missed = [t for t in instants_ms if now_ms - t > grace_s * 1000]
    fired_missed = [t for t, d in plan if d == FIRE and t in missed]
    for t, d in plan:
        if t not in missed:
            assert d == FIRE
        else:
            assert d in (FIRE, SKIP_MISFIRE)
    expected_count = {"skip": 0, "run_once": min(1, len(missed)),
                      "catch_up": min(catch_up_max, len(missed))}[pol]
    assert len(fired_missed) == expected_count
    # the missed instants that fire are always the latest ones
    assert fired_missed == missed[len(missed) - len(fired_missed):]


# --- overlap --------------------------------------------------------------------------

@pytest.mark.parametrize(
    "pol, running, queued, expected",
    [
        ("allow", 0, 0, OverlapDecision(True)),
        ("allow", 3, 5, OverlapDecision(True)),
        ("forbid", 0, 0, OverlapDecision(True)),
        ("forbid", 1, 0, OverlapDecision(False)),
        ("forbid", 0, 1, OverlapDecision(False)),
        ("replace", 0, 0, OverlapDecision(True, False)),
        ("replace", 2, 0, OverlapDecision(True, True)),
        ("replace", 0, 1, OverlapDecision(True, True)),
        ("replace", 1, 1, OverlapDecision(True, True)),
        ("buffer_one", 0, 0, OverlapDecision(True)),
        ("buffer_one", 1, 0, OverlapDecision(True)),
        ("buffer_one", 1, 1, OverlapDecision(False)),
        ("buffer_one", 0, 1, OverlapDecision(False)),
    ],
)
def test_decide_overlap(pol, running, queued, expected):
    assert policy.decide_overlap(pol, running, queued) == expected


def test_only_replace_cancels():
    for pol in ("allow", "forbid", "buffer_one"):
        assert not policy.decide_overlap(pol, 5, 0).cancel_running


def test_unknown_overlap_policy_raises():
    with pytest.raises(ValueError):
        policy.decide_overlap("sometimes", 0, 0)


def test_exclusive():
    assert not policy.exclusive("allow")
    for pol in ("forbid", "replace", "buffer_one"):
        assert policy.exclusive(pol)


# --- retry ----------------------------------------------------------------------------

def test_should_retry():
    assert policy.should_retry(1, 3)
    assert policy.should_retry(2, 3)
    assert not policy.should_retry(3, 3)
    assert not policy.should_retry(1, 1)


def test_zero_backoff_is_zero():
    assert policy.retry_delay_ms(0, 1, "k") == 0
    assert policy.retry_delay_ms(0, 7, "k") == 0


def test_backoff_is_deterministic_and_key_dependent():
    a = policy.retry_delay_ms(10, 2, "job@x~2")
    assert a == policy.retry_delay_ms(10, 2, "job@x~2")
    others = {policy.retry_delay_ms(10, 2, f"job@x~{i}") for i in range(20)}
    assert len(others) > 1


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 600), st.integers(1, 40), st.text(max_size=20))
def test_backoff_bounds(base_s, n, key):
    raw = min(base_s * 1000 * 2 ** (n - 1), policy.MAX_BACKOFF_MS)
    d = policy.retry_delay_ms(base_s, n, key)
    assert raw <= d <= raw * 1.5


def test_backoff_grows_exponentially_for_a_fixed_key():
    # with jitter fraction j fixed by the key, delay(n) = base*2^(n-1)*(1+j/2)
    d1 = policy.retry_delay_ms(1, 1, "k")
    d2 = policy.retry_delay_ms(1, 2, "k")
    d3 = policy.retry_delay_ms(1, 3, "k")
    assert abs(d2 - 2 * d1) <= 2
    assert abs(d3 - 4 * d1) <= 4
    assert 1000 <= d1 <= 1500


def test_backoff_is_capped():
    d = policy.retry_delay_ms(600, 30, "k")
    assert policy.MAX_BACKOFF_MS <= d <= policy.MAX_BACKOFF_MS * 1.5
    assert policy.retry_delay_ms(600, 30, "k") == policy.retry_delay_ms(600, 100, "k")
