from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from raftcron.core.timefmt import ISO_MAX_MS, ISO_MIN_MS, ms_to_iso, parse_iso_ms

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def written(ms: int) -> str:
    """The instant written from exact integer arithmetic."""
    dt = EPOCH + timedelta(milliseconds=ms)
    return dt.isoformat(timespec="milliseconds" if ms % 1000 else "seconds").replace(
        "+00:00", "Z")


def test_far_instants_keep_their_millisecond():
    assert ms_to_iso(203_716_219_437_219) == "8425-07-05T14:43:57.219Z"
    assert ms_to_iso(ISO_MAX_MS + 999) == "9999-12-31T23:59:59.999Z"
    assert ms_to_iso(ISO_MIN_MS + 1) == "0001-01-01T00:00:00.001Z"
    assert ms_to_iso(-1) == "1969-12-31T23:59:59.999Z"
    assert ms_to_iso(1_772_953_200_000) == "2026-03-08T07:00:00Z"
    assert ms_to_iso(None) is None


@settings(deadline=None)
@given(st.integers(ISO_MIN_MS, ISO_MAX_MS + 999))
def test_every_instant_is_written_exactly(ms):
    assert ms_to_iso(ms) == written(ms)


@settings(deadline=None)
@given(st.integers(0, ISO_MAX_MS + 999))
def test_written_instants_read_back(ms):
    assert parse_iso_ms(ms_to_iso(ms), "at") == ms

