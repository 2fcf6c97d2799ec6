"""The port ranges test clusters draw from (raftcron.testing.free_port_base)."""

from __future__ import annotations

import pytest

from raftcron.testing import PORT_RANGE, PORT_RANGE_ENV, free_port_base, port_range


def test_ports_stay_below_the_ephemeral_range_by_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORT_RANGE_ENV, raising=False)
    assert port_range() == PORT_RANGE
    for _ in range(50):
        base = free_port_base(3)
        assert PORT_RANGE[0] <= base and base + 100 + 3 <= PORT_RANGE[1] < 32768


def test_a_narrowed_range_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, "26400-26700")
    bases = {free_port_base(3) for _ in range(50)}
    assert all(26400 <= b and b + 103 <= 26700 for b in bases)


@pytest.mark.parametrize("raw", ["26400", "a-b", "26400-26400", "70000-70100", "80-90"])
def test_a_malformed_range_is_refused_with_its_value(
        monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, raw)
    with pytest.raises(ValueError, match=PORT_RANGE_ENV):
        port_range()


def test_a_range_too_small_for_the_cluster_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, "26400-26450")
    with pytest.raises(RuntimeError, match="too small"):
        free_port_base(3)
