"""The smaller fields of a job definition: calendars, labels and the run bounds' order.

Pure: no clock, no I/O. core.model re-exports these names.
"""

from __future__ import annotations

import re
from typing import Any

from raftcron.core.errors import ValidationError

NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
MAX_CALENDARS = 8
MAX_LABELS = 16
LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9._-]{0,64}$")


def parse_calendar_names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_CALENDARS:
        raise ValidationError("calendars", f"must be a list of at most {MAX_CALENDARS} "
                              "calendar names")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise ValidationError(f"calendars.{i}",
                                  "must be 1-64 characters of A-Z a-z 0-9 . _ -")
    if len(set(value)) != len(value):
        raise ValidationError("calendars", "names a calendar twice")
    return tuple(value)


def parse_labels(value: Any) -> dict[str, str]:
    """`labels`: at most MAX_LABELS keys (names) with values of 0-64 name characters,
    the handle of a bulk pause (`POST /v1/jobs:pause {"label": "team=billing"}`)."""
    if not isinstance(value, dict) or len(value) > MAX_LABELS:
        raise ValidationError("labels", f"must be an object of at most {MAX_LABELS} labels")
    for key, val in value.items():
        if not NAME_RE.fullmatch(key):
            raise ValidationError("labels", f"label name {key[:70]!r} must be 1-64 "
                                  "characters of A-Z a-z 0-9 . _ -")
        if not isinstance(val, str) or not LABEL_VALUE_RE.fullmatch(val):
            raise ValidationError(f"labels.{key}", "must be 0-64 characters of "
                                  "A-Z a-z 0-9 . _ -")
    return dict(value)


def check_run_bounds(ints: dict[str, int | None]) -> None:
    """The duration bounds must leave room for a run: `min_duration_s` at most
    `max_duration_s`, and both below `max_runtime_s` (a run is killed at that age, so a
    bound at or past it could never be reached)."""
    lo, hi, kill = ints["min_duration_s"], ints["max_duration_s"], ints["max_runtime_s"]
    if lo is not None and hi is not None and lo > hi:
        raise ValidationError("min_duration_s", "must be at most max_duration_s")
    if kill is not None:
        if hi is not None and hi >= kill:
            raise ValidationError("max_duration_s", "must be less than max_runtime_s "
                                  "(a run is killed at max_runtime_s)")
        if lo is not None and lo >= kill:
            raise ValidationError("min_duration_s", "must be less than max_runtime_s "
                                  "(a run is killed at max_runtime_s)")
