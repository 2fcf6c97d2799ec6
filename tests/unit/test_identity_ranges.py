"""Per-job and per-occurrence reads select id ranges; these must hold exactly the ids of
that job or occurrence, and a job's scheduled ids must sort by instant."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from raftcron.core import identity

JOB_IDS = st.text(alphabet=string.ascii_letters + string.digits + "._-", min_size=1,
                  max_size=12)
# Whole seconds from 1970 to 9999 (cron instants have no sub-second part).
INSTANTS = st.integers(min_value=0, max_value=253_402_300_799).map(lambda s: s * 1000)


def occurrence_ids(job_id: str, instant: int, key: str) -> list[str]:
    return [
        identity.scheduled_occurrence_id(job_id, instant),
        identity.manual_occurrence_id(job_id, key),
        identity.backfill_occurrence_id(job_id, instant, key),
    ]


def within(value: str, bounds: tuple[str, str]) -> bool:
    return bounds[0] <= value < bounds[1]


@given(JOB_IDS, JOB_IDS, INSTANTS, st.text(max_size=8))
def test_a_jobs_range_holds_its_occurrences_and_no_others(a: str, b: str, instant: int,
                                                         key: str) -> None:
    for occ in occurrence_ids(b, instant, key):
        assert within(occ, identity.job_occurrences(a)) == (a == b), (a, occ)


@given(JOB_IDS, JOB_IDS, INSTANTS, st.text(max_size=8))
def test_the_scheduled_range_holds_only_scheduled_occurrences(a: str, b: str, instant: int,
                                                             key: str) -> None:
    scheduled, manual, backfill = occurrence_ids(b, instant, key)
    assert within(scheduled, identity.job_scheduled_occurrences(a)) == (a == b)
    assert not within(manual, identity.job_scheduled_occurrences(a))
    assert not within(backfill, identity.job_scheduled_occurrences(a))


@given(JOB_IDS, JOB_IDS, INSTANTS, st.text(max_size=8))
def test_the_manual_range_holds_only_manual_occurrences(a: str, b: str, instant: int,
                                                       key: str) -> None:
    scheduled, manual, backfill = occurrence_ids(b, instant, key)
    assert within(manual, identity.job_manual_occurrences(a)) == (a == b)
    assert not within(scheduled, identity.job_manual_occurrences(a))
    assert not within(backfill, identity.job_manual_occurrences(a))


@given(JOB_IDS, st.lists(INSTANTS, min_size=2, max_size=20, unique=True))
def test_scheduled_ids_sort_by_instant(job_id: str, instants: list[int]) -> None:
    ids = {identity.scheduled_occurrence_id(job_id, t): t for t in instants}
    assert [ids[i] for i in sorted(ids)] == sorted(instants)


@given(JOB_IDS, INSTANTS, INSTANTS, st.integers(min_value=0, max_value=999))
def test_the_after_range_starts_no_later_than_any_later_instant(
        job_id: str, after_s: int, instant: int, ms: int) -> None:
    after = after_s + ms
    occ = identity.scheduled_occurrence_id(job_id, instant)
    if instant > after:
        assert within(occ, identity.job_scheduled_occurrences_after(job_id, after))


@given(JOB_IDS, JOB_IDS, INSTANTS, INSTANTS, st.integers(min_value=1, max_value=120))
def test_an_occurrences_range_holds_exactly_its_attempts(a: str, b: str, t1: int, t2: int,
                                                         number: int) -> None:
    occ_a = identity.scheduled_occurrence_id(a, t1)
    occ_b = identity.scheduled_occurrence_id(b, t2)
    attempt = identity.attempt_id(occ_b, number)
    assert within(attempt, identity.occurrence_attempts(occ_a)) == (occ_a == occ_b)
    assert not within(occ_b, identity.occurrence_attempts(occ_a))
