"""The checker fails closed on gaps that once passed (issue 37, item 8): a failed attempt
read, one node's final read, and a run dir whose meta.json names no profile."""

from __future__ import annotations

from tests.chaos.test_checker import check, clean_run


def test_a_failed_attempt_read_is_missing_evidence_not_no_attempts() -> None:
    run = clean_run()
    per = run["final"]["attempts"]["n1"] = dict(run["final"]["attempts"]["n1"])
    failed, gone = sorted(per)[3], sorted(per)[4]
    per[failed] = per[gone] = None
    run["final"]["attempts_gone"] = {"n1": [gone]}  # answered 404: pruned meanwhile
    v = check(run)["violations"]
    assert set(v) == {"attempts_read_missing"}
    [x] = v["attempts_read_missing"]
    assert (x["node"], x["examples"]) == ("n1", [failed])


def test_a_member_without_an_attempts_read_is_missing_evidence() -> None:
    run = clean_run()
    del run["final"]["attempts"]["n3"]
    v = check(run)["violations"]
    assert [x["node"] for x in v["attempts_read_missing"]] == ["n3"]


def test_a_run_with_one_nodes_final_read_is_invalid() -> None:
    """No node-start notes to say which nodes ran: the final reads must still hold a
    cluster's worth of nodes."""
    run = clean_run()
    run["history"] = [h for h in run["history"] if h.get("f") != "node-start"]
    for key in ("nodes", "digests", "attempts"):
        run["final"][key] = {"n1": run["final"][key]["n1"]}
    v = check(run)["violations"]
    assert "final_read_missing" in v


def test_membership_and_backup_checks_are_required_without_a_profile() -> None:
    run = clean_run()
    run["meta"].pop("profile")
    run["history"] = [h for h in run["history"]
                      if h.get("process") not in ("membership", "backup")
                      and h.get("f") != "departure-read"]
    v = check(run)["violations"]
    assert {"membership_missing", "backup_missing"} <= set(v)
