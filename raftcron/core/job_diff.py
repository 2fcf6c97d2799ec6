"""What changed between two versions of a job, field by field (pure).

Both sides are jobs in their API shape (`Job.to_api()`). Objects are compared key by key
down to their leaves, named by dotted paths (`schedule.cron`, `target.http.url`,
`labels.team`); lists are compared whole (`schedules`, `calendars`). A key one side
lacks counts as null there. `version` is never a change: every edit moves it.
"""

from __future__ import annotations

from typing import Any

IGNORED = frozenset({"version"})


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of `value` by dotted path; a non-empty object is a branch, anything else
    (an empty object included) a leaf."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}{key}."))
        return out
    return {prefix.removesuffix("."): value}


def changed_paths(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The paths whose values differ, sorted. An empty object on one side that the other
    side fills is named by the filled leaves alone (`labels.team: null -> billing`), not
    also as `labels: {} -> null`."""
    old = {k: v for k, v in flatten(before).items() if k.split(".")[0] not in IGNORED}
    new = {k: v for k, v in flatten(after).items() if k.split(".")[0] not in IGNORED}
    paths = old.keys() | new.keys()
    return sorted(path for path in paths if old.get(path) != new.get(path)
                  and not _emptied_or_filled(path, old, new, paths))


def _emptied_or_filled(path: str, old: dict[str, Any], new: dict[str, Any],
                       paths: set[str]) -> bool:
    """`path` is an empty object on one side and a branch with leaves on the other."""
    emptied = old.get(path) == {} and path not in new
    filled = new.get(path) == {} and path not in old
    return (emptied or filled) and any(p.startswith(f"{path}.") for p in paths)


def changes(before: dict[str, Any], after: dict[str, Any], *,
            shown_before: dict[str, Any] | None = None,
            shown_after: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """`[{"field", "before", "after"}]` for each changed path of `before` → `after`.

    Values come from `shown_before`/`shown_after` when given (the same jobs with their
    secrets redacted): a changed secret is then named, with `***` on both sides, and
    never shown."""
    old = flatten(shown_before if shown_before is not None else before)
    new = flatten(shown_after if shown_after is not None else after)
    return [{"field": path, "before": old.get(path), "after": new.get(path)}
            for path in changed_paths(before, after)]
