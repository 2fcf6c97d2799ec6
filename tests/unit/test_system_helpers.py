"""The system tests' own assertion helper must be able to fail."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.system.helpers import assert_every_second_once

T = 1_793_512_700


def occs(*instants: int) -> list[dict[str, str]]:
    return [{"kind": "scheduled", "scheduled_for": datetime.fromtimestamp(t, UTC).isoformat()}
            for t in instants]


def test_empty_list_fails() -> None:
    with pytest.raises(AssertionError, match="only 0"):
        assert_every_second_once([])


def test_hole_and_duplicate_fail() -> None:
    with pytest.raises(AssertionError, match="missing"):
        assert_every_second_once(occs(T, T + 1, T + 3))
    with pytest.raises(AssertionError, match="duplicate"):
        assert_every_second_once(occs(T, T + 1, T + 1))


def test_covering_fails_when_the_span_is_short() -> None:
    assert assert_every_second_once(occs(T, T + 1, T + 2, T + 3),
                                    covering=(T + 0.5, T + 2.5)) == [T, T + 1, T + 2, T + 3]
    with pytest.raises(AssertionError, match="do not span"):
        assert_every_second_once(occs(T, T + 1, T + 2), covering=(T + 0.5, T + 2.5))


def test_at_least() -> None:
    with pytest.raises(AssertionError, match="only 2"):
        assert_every_second_once(occs(T, T + 1), at_least=3)
