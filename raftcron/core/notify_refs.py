"""A job's `notify` list: webhook URLs, and `{"channel": "<name>"}` references to the
notification channels of its tenant (core.channels).

Kept apart from core.channels so that core.model can parse the list without importing
the channels (which import the model). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from raftcron.core.errors import ValidationError

# core.model.NAME_RE (tests/unit/test_channels.py keeps them equal).
CHANNEL_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# The receiver an outbox delivery to a channel is routed to (leader.outbox).
RECEIVER_PREFIX = "channel:"


def receiver_of(name: str) -> str:
    return RECEIVER_PREFIX + name


def parse_notify(value: Any, max_items: int, is_url: Callable[[Any], bool]
                 ) -> tuple[Any, ...]:
    """A job's `notify`: webhook URLs (`is_url`) and channel references, at most
    `max_items` in all; errors name the entry (`notify.2`, `notify.1.channel`)."""
    if not isinstance(value, list) or len(value) > max_items:
        raise ValidationError("notify", f"must be a list of at most {max_items} webhook "
                              'URLs or {"channel": "<name>"} references')
    out: list[Any] = []
    for i, entry in enumerate(value):
        if isinstance(entry, dict):
            unknown = sorted(set(entry) - {"channel"})
            if unknown:
                raise ValidationError(f"notify.{i}.{unknown[0]}", "unknown field")
            name = entry.get("channel")
            if not isinstance(name, str) or not CHANNEL_NAME_RE.fullmatch(name):
                raise ValidationError(f"notify.{i}.channel", "is required: a channel name "
                                      "(1-64 characters of A-Z a-z 0-9 . _ -)")
            out.append({"channel": name})
        elif not is_url(entry):
            raise ValidationError(f"notify.{i}", 'must be an http(s) URL or {"channel": '
                                  '"<name>"}')
        else:
            out.append(entry)
    return tuple(out)


def notify_urls(notify: Any) -> tuple[str, ...]:
    """The webhook URLs of a stored `notify` list (its channel references left out)."""
    return tuple(e for e in notify or () if isinstance(e, str))


def channel_refs(notify: Any) -> list[tuple[int, str]]:
    """(position, channel name) of each channel a stored `notify` list names."""
    return [(i, e["channel"]) for i, e in enumerate(notify or ())
            if isinstance(e, dict) and isinstance(e.get("channel"), str)]
