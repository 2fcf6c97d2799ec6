"""chaos/checks_groups.py on synthetic runs: the holders of a concurrency group recorded
by the sink, replayed in arrival order, against the group's limit."""

from __future__ import annotations

from typing import Any

from tests.chaos.test_checker import T0, check, clean_run, hist_op, iso

GROUP = "chaos-db"


def hold(seq: int, attempt: str, token: int, phase: str) -> dict[str, Any]:
    return {"event": "hold", "seq": seq, "phase": phase, "group": GROUP, "job": "group-0",
            "occurrence": attempt.rsplit("~", 1)[0], "attempt": attempt, "token": token,
            "worker": "w1", "wall": T0 + seq / 10}


def group_run(spans: list[tuple[int, int]], *, limit: int = 2,
              statuses: list[str] | None = None) -> dict[str, Any]:
    """A clean run plus a group of `limit` whose holders (one attempt each) start and end
    at the given sink sequence numbers (after the clean run's own offers)."""
    run = clean_run()
    run["history"] += hist_op(30, "group", "ok", T0 - 6, group=GROUP, body={"limit": limit})
    base = 10_000
    for i, (start, end) in enumerate(spans):
        occ_id = f"group-{i}@{iso(T0 + 3 * i)}"
        attempt = f"{occ_id}~1"
        status = (statuses or [])[i] if statuses else "succeeded"
        run["sink"] += [hold(base + start, attempt, 100 + i, "start"),
                        hold(base + end, attempt, 100 + i, "end")]
        run["final"]["attempts"]["n1"][occ_id] = [
            {"id": attempt, "number": 1, "status": status, "fencing_token": 100 + i,
             "leased_at": iso(T0 + 3 * i), "finished_at": iso(T0 + 3 * i + 1)}]
    return run


def test_holders_within_the_limit_are_valid() -> None:
    result = check(group_run([(1, 4), (2, 5), (4, 7), (5, 8)]))
    assert result["violations"] == {}
    assert result["stats"]["groups"]["peak"] == {GROUP: 2}
    assert result["stats"]["groups"]["counted"] == {GROUP: 4}


def test_three_holders_of_a_group_of_two_are_flagged() -> None:
    v = check(group_run([(1, 6), (2, 6), (3, 6)]))["violations"]
    assert set(v) == {"group_limit_exceeded"}
    [x] = v["group_limit_exceeded"]
    assert x["limit"] == 2 and len(x["holders"]) == 3


def test_a_holder_whose_lease_was_taken_back_is_left_out() -> None:
    """A lost lease frees its slot while its process may run on: not a violation."""
    result = check(group_run([(1, 6), (2, 6), (3, 6)],
                             statuses=["lost", "succeeded", "succeeded"]))
    assert result["violations"] == {}
    assert result["stats"]["groups"]["left_out"] == 1


def test_a_holder_with_a_stale_token_or_a_missing_end_is_left_out() -> None:
    run = group_run([(1, 6), (2, 6), (3, 6)])
    run["sink"] = [s for s in run["sink"]
                   if not (s.get("event") == "hold" and s["phase"] == "end"
                           and s["attempt"].startswith("group-2@"))]
    assert check(run)["violations"] == {}
    run = group_run([(1, 6), (2, 6), (3, 6)])
    for s in run["sink"]:
        if s.get("event") == "hold" and s["attempt"].startswith("group-0@"):
            s["token"] = 99  # an older lease's process
    assert check(run)["violations"] == {}


def test_a_group_without_one_counted_holder_fails_closed() -> None:
    v = check(group_run([]))["violations"]
    assert set(v) == {"group_unobserved"}


def test_holds_are_not_offers() -> None:
    """The hold records do not count as effects (no double effect, no stale write)."""
    result = check(group_run([(1, 4), (2, 5)]))
    assert result["violations"] == {}
    assert result["stats"]["sink"] == check(clean_run())["stats"]["sink"]
