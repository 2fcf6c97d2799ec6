"""The table of `raftcron job history` (no cluster needed)."""

from __future__ import annotations

from typing import Any

from raftcron.cli.history import change_lines, history_rows, shown


def entry(kind: str, changes: list[dict[str, Any]] | None, **extra: Any) -> dict[str, Any]:
    return {"seq": 2, "version": 2, "kind": kind, "at": "2026-12-01T09:00:00Z",
            "by": "ops#ab12", "note": None, "changes": changes, **extra}


def test_values_are_text_as_is_and_anything_else_compact_json() -> None:
    assert shown("0 9 * * 1-5") == "0 9 * * 1-5"
    assert shown(None) == "-"
    assert shown(True) == "true" and shown(["a", "b"]) == '["a","b"]'


def test_each_changed_field_gets_a_line_under_its_change() -> None:
    rows = history_rows([entry("edit", [
        {"field": "schedule.cron", "before": "0 9 * * *", "after": "0 10 * * *"},
        {"field": "queue", "before": "default", "after": "billing"}])])
    assert rows == [("2", "2", "edit", "2026-12-01T09:00:00Z", "ops#ab12",
                     "schedule.cron: 0 9 * * * → 0 10 * * *"),
                    ("", "", "", "", "", "queue: default → billing")]


def test_a_change_without_fields_says_why() -> None:
    assert change_lines(entry("create", None)) == ["created"]
    assert change_lines(entry("edit", [])) == ["no field changed"]
    assert change_lines(entry("edit", None)) == ["(the version before is not in the history)"]
    assert change_lines(entry("bulk_pause", [{"field": "paused", "before": False,
                                              "after": True}], note="freeze")) == [
        "note: freeze", "paused: false → true"]
    assert history_rows([entry("delete", [], by=None)])[0][4] == "-"
