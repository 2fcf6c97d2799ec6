"""What changed between two versions of a job (core.job_diff)."""

from __future__ import annotations

from raftcron.core.job_diff import changed_paths, changes, flatten
from raftcron.core.model import parse_job


def job(**fields: object) -> dict:
    base = {"id": "invoices", "schedule": {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
            "target": {"shell": "./send.sh"}}
    return parse_job({**base, **fields}).to_api()


def test_flatten_names_leaves_by_dotted_path_and_keeps_lists_whole() -> None:
    assert flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": {}, "f": None}) == {
        "a.b": 1, "a.c.d": [1, 2], "e": {}, "f": None}


def test_an_edit_names_each_changed_field_with_before_and_after() -> None:
    before = job()
    after = job(schedule={"cron": "0 10 * * 1-5", "timezone": "Europe/Berlin"},
                queue="billing", misfire_policy="skip")
    assert changes(before, after) == [
        {"field": "misfire_policy", "before": "run_once", "after": "skip"},
        {"field": "queue", "before": "default", "after": "billing"},
        {"field": "schedule.cron", "before": "0 9 * * 1-5", "after": "0 10 * * 1-5"},
    ]


def test_the_version_is_not_a_change_and_the_same_job_has_none() -> None:
    assert changes({**job(), "version": 1}, {**job(), "version": 2}) == []


def test_a_key_one_side_lacks_is_null_there() -> None:
    shell = job()
    http = job(target={"http": {"url": "https://example.com/run"}})
    diff = {c["field"]: (c["before"], c["after"]) for c in changes(shell, http)}
    assert diff["target.shell"] == ("./send.sh", None)
    assert diff["target.http.url"] == (None, "https://example.com/run")
    assert changed_paths(http, shell) == sorted(diff)


def test_values_shown_come_from_the_redacted_sides() -> None:
    before = {"target": {"http": {"headers": {"Authorization": "old"}}}}
    after = {"target": {"http": {"headers": {"Authorization": "new"}}}}
    hidden = {"target": {"http": {"headers": {"Authorization": "***"}}}}
    assert changes(before, after, shown_before=hidden, shown_after=hidden) == [
        {"field": "target.http.headers.Authorization", "before": "***", "after": "***"}]


def test_labels_added_or_removed_are_named_by_their_leaves_alone() -> None:
    """An empty `labels` that gains a label is `labels.team: null -> billing`, not also
    `labels: {} -> null` (and the reverse for a removal)."""
    bare, labelled = job(), job(labels={"team": "billing"})
    assert changes(bare, labelled) == [
        {"field": "labels.team", "before": None, "after": "billing"}]
    assert changes(labelled, bare) == [
        {"field": "labels.team", "before": "billing", "after": None}]
