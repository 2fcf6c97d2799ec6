"""What every check writes into: named violations with their details, and notes."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any


class Report:
    def __init__(self) -> None:
        self.violations: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.notes: list[str] = []

    def add(self, name: str, /, **detail: Any) -> None:
        self.violations[name].append(detail)


def ts(iso: str | None) -> float | None:
    """Epoch seconds of an ISO-8601 instant (`Z` accepted), None for None or ''."""
    if not iso:
        return None
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")
