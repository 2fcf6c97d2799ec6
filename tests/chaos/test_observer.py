"""The observer's timing: successive bands overlap enough to ride out an outage."""

from __future__ import annotations

from chaos.observer import BAND_OLD_S, BAND_S, BAND_YOUNG_S, PERIOD_S, RETRY_S, next_wait_s
from chaos.procs import RETENTION_S


def test_a_failed_observation_is_tried_again_soon() -> None:
    assert next_wait_s(False, 0.1) == RETRY_S < PERIOD_S
    assert next_wait_s(False, 30.0) == RETRY_S


def test_an_answered_observation_waits_out_its_period() -> None:
    assert next_wait_s(True, 4.0) == PERIOD_S - 4.0
    assert next_wait_s(True, PERIOD_S + 3) == 0.0


def test_every_instant_is_read_young_enough_and_bands_survive_a_long_outage() -> None:
    # Read at least once before anything can be pruned (an occurrence finishes at the
    # earliest a 1 s lookahead before its instant).
    assert BAND_YOUNG_S + PERIOD_S < RETENTION_S - 1
    # No node answering for 30 s (seen in a ci run), plus one failed try's timeouts (3
    # nodes x 5 s), still leaves the next band overlapping the last one.
    assert BAND_S - PERIOD_S > 30 + 15 - PERIOD_S + RETRY_S
    assert BAND_OLD_S > RETENTION_S
