"""The membership change on synthetic runs: a change that failed, did not complete or is
missing makes the run INVALID; the removed node is checked up to its cut-off and required
nowhere after; the fresh node is required in the final reads and the digest barrier."""

from __future__ import annotations

import json
from pathlib import Path

from chaos.checker import check_dir, load_run
from tests.chaos.test_checker import (
    T0,
    check,
    clean_run,
    digest_mark,
    hist_op,
    iso,
    membership_change,
    write_dir,
)

MEMBERSHIP = ("membership_missing", "membership_failed", "departure_read_missing",
              "member_set_wrong", "departed_digest_not_compared", "departed_digest_divergence")


def without_membership(run: dict) -> list[dict]:
    return [h for h in run["history"] if h.get("process") != "membership"]


def test_clean_run_with_the_change_is_valid_and_reports_each_membership_check() -> None:
    summary = check(clean_run())
    assert summary["verdict"]["valid"], summary["violations"]
    assert all(summary["verdict"]["checks"][k] == 0 for k in MEMBERSHIP)
    assert summary["stats"]["membership"][0]["removed"] == "n0"
    assert summary["stats"]["membership"][0]["added"] == "n3"
    assert summary["stats"]["membership"][0]["digest_mark"] == {
        "mark": "digest-mark-" + "7" * 32, "index": 70, "compared": ["n0", "n1", "n2"]}


def test_a_run_without_the_change_is_invalid() -> None:
    run = clean_run()
    run["history"] = without_membership(run)
    v = check(run)["violations"]
    assert [x["problem"] for x in v["membership_missing"]] == [
        "the run holds no membership change"]


def test_a_failed_change_is_invalid_and_the_removed_node_is_still_required() -> None:
    run = clean_run()
    run["history"] = without_membership(run) + membership_change(
        T0 + 18, removed="n0", added="n3", outcome="fail")
    v = check(run)["violations"]
    assert [x["error"] for x in v["membership_failed"]] == ["StepError: n3 did not catch up"]
    # Not removed after all: n0 is expected in the final reads and the digest barrier.
    assert [x["node"] for x in v["final_read_missing"]] == ["n0"]
    assert v["digest_not_compared"][0]["missing"] == ["n0"]


def test_a_change_that_never_completed_is_invalid() -> None:
    run = clean_run()
    run["history"] = without_membership(run) + membership_change(
        T0 + 18, removed="n0", added="n3", outcome=None)
    v = check(run)["violations"]
    assert len(v["membership_failed"]) == 1
    assert "did not complete" in v["membership_failed"][0]["error"]


def test_the_removed_node_without_its_departure_read_is_invalid() -> None:
    run = clean_run()
    run["departed"] = {}
    v = check(run)["violations"]
    assert [x["node"] for x in v["departure_read_missing"]] == ["n0"]
    run = clean_run()
    run["departed"]["n0"]["occurrences_incomplete"] = True
    assert "departure_read_missing" in check(run)["violations"]


def test_the_departure_read_is_read_from_its_file(tmp_path: Path) -> None:
    run = clean_run()
    write_dir(tmp_path, run)
    assert load_run(tmp_path)["departed"] == json.loads(json.dumps(run["departed"]))
    (tmp_path / "departed.json").unlink()
    summary = check_dir(tmp_path)
    assert summary["verdict"]["checks"]["departure_read_missing"] == 1


def test_the_removed_node_is_checked_up_to_its_cut_off_only() -> None:
    run = clean_run()
    before, after = iso(T0 + 10), iso(T0 + 24)  # the cut-off is T0 + 18
    occs = run["departed"]["n0"]["occurrences"]
    occs[:] = [o for o in occs if o["scheduled_for"] != before]
    lost = check(run)["violations"]["lost_instant"]
    assert [(x["node"], x["scheduled_for"]) for x in lost] == [("n0", before)]
    # An instant past the cut-off is not owed by the removed node: no violation.
    run = clean_run()
    assert not any(o["scheduled_for"] == after for o in run["departed"]["n0"]["occurrences"])
    assert check(run)["verdict"]["valid"]


def test_an_acknowledged_write_before_the_cut_off_must_be_on_the_removed_node() -> None:
    run = clean_run()
    run["history"] += hist_op(8, "trigger", "ok", T0 + 12, job="j", key="k9",
                              response={"id": "j@manual-9"})
    for node in run["final"]["nodes"].values():
        node["occurrences"].append({**node["occurrences"][-1], "id": "j@manual-9",
                                    "kind": "manual", "idempotency_key": "k9"})
    lost = check(run)["violations"]["lost_ack"]
    assert [(x["node"], x["op"]) for x in lost] == [("n0", "trigger")]
    # Acknowledged after the cut-off: the removed node never had to hold it.
    run = clean_run()
    run["history"] += hist_op(8, "trigger", "ok", T0 + 30, job="j", key="k9",
                              response={"id": "j@manual-9"})
    for node in run["final"]["nodes"].values():
        node["occurrences"].append({**node["occurrences"][-1], "id": "j@manual-9",
                                    "kind": "manual", "idempotency_key": "k9"})
    assert "lost_ack" not in check(run)["violations"]


def test_the_fresh_node_is_required_in_the_final_reads_and_the_digest_barrier() -> None:
    run = clean_run()
    del run["final"]["nodes"]["n3"]
    del run["final"]["digests"]["n3"]
    v = check(run)["violations"]
    assert [x["node"] for x in v["final_read_missing"]] == ["n3"]
    assert v["digest_not_compared"][0]["missing"] == ["n3"]


def test_the_fresh_node_digest_differing_at_the_barrier_index() -> None:
    run = clean_run()
    run["final"]["digests"]["n3"]["digest"] = "other"
    div = check(run)["violations"]["digest_divergence"]
    assert [(d["index"], sorted(d["groups"].values())) for d in div] == [
        (99, [["n1", "n2"], ["n3"]])]


def test_the_fresh_node_is_checked_for_lost_instants() -> None:
    run = clean_run()
    gone = iso(T0 + 30)
    occs = run["final"]["nodes"]["n3"]["occurrences"]
    occs[:] = [o for o in occs if o["scheduled_for"] != gone]
    lost = check(run)["violations"]["lost_instant"]
    assert [(x["node"], x["scheduled_for"]) for x in lost] == [("n3", gone)]


def test_a_member_whose_view_still_lists_the_removed_node() -> None:
    run = clean_run()
    run["final"]["nodes"]["n1"]["cluster"]["peers"].append({"id": "n0"})
    run["final"]["nodes"]["n2"]["cluster"]["peers"] = [{"id": "n1"}]
    wrong = check(run)["violations"]["member_set_wrong"]
    assert [(x["node"], x["peers"], x["expected"]) for x in wrong] == [
        ("n1", ["n0", "n2", "n3"], ["n2", "n3"]), ("n2", ["n1"], ["n1", "n3"])]


# --- the removed node's digest at the mark made before its removal ---------------------------

def without_mark(run: dict) -> dict:
    """`run` without its membership change's digest mark (the periodic ones stay)."""
    run["history"] = [h for h in run["history"]
                      if not (h.get("f") == "digest-mark" and h.get("process") == "membership")]
    return run


def with_mark(run: dict, **kw) -> dict:
    """`run` with its digest-mark line replaced by `digest_mark(**kw)` (of n0 unless
    told), written after the departure read."""
    hist = without_mark(run)["history"]
    at = next(h["cluster_wall"] for h in hist if h.get("f") == "departure-read")
    hist.append(digest_mark(at + 0.1, **{"removed": "n0", **kw}))
    return run


def test_a_change_without_a_digest_mark_is_invalid() -> None:
    run = without_mark(clean_run())
    summary = check(run)
    assert not summary["verdict"]["valid"]
    v = summary["violations"]
    assert [(x["node"], x["problem"]) for x in v["departed_digest_not_compared"]] == [
        ("n0", "no digest-mark record: the removed node's state was not compared")]


def test_a_mark_for_another_node_or_change_does_not_count() -> None:
    # An earlier try chose n1 (its removal was refused), or another change made the mark.
    for kw in ({"removed": "n1"}, {"op": 91}):
        v = check(with_mark(clean_run(), **kw))["violations"]
        assert [x["node"] for x in v["departed_digest_not_compared"]] == ["n0"], kw


def test_a_mark_the_removed_node_did_not_answer_is_invalid() -> None:
    digests = {"n0": {"error": "no digest within 20 s: HTTP 404"},
               "n1": {"index": 70, "digest": "d70"}, "n2": {"index": 70, "digest": "d70"}}
    v = check(with_mark(clean_run(), digests=digests))["violations"]
    [x] = v["departed_digest_not_compared"]
    assert x["errors"] == {"n0": "no digest within 20 s: HTTP 404"}


def test_a_mark_only_the_removed_node_answered_is_invalid() -> None:
    digests = {"n0": {"index": 70, "digest": "d70"}, "n1": {"error": "HTTP 403"},
               "n2": {"index": 70, "error": "the digest failed: OperationalError"}}
    v = check(with_mark(clean_run(), digests=digests))["violations"]
    assert len(v["departed_digest_not_compared"]) == 1
    # No mark made at all: no digest from anyone.
    run = clean_run()
    run["history"] = [h if h.get("f") != "digest-mark" else
                      {k: v for k, v in h.items() if k not in ("mark", "index", "digests")}
                      | {"error": "making the mark: HTTP 503"} for h in run["history"]]
    v = check(run)["violations"]
    assert [x["error"] for x in v["departed_digest_not_compared"]] == [
        "making the mark: HTTP 503"]


def test_one_member_compared_is_enough_and_the_other_is_noted() -> None:
    digests = {"n0": {"index": 70, "digest": "d70"}, "n1": {"index": 70, "digest": "d70"},
               "n2": {"error": "no digest within 20 s: ConnectError"}}
    summary = check(with_mark(clean_run(), digests=digests))
    assert summary["verdict"]["valid"], summary["violations"]
    assert any("n2 not compared" in n for n in summary["notes"])


def test_the_removed_nodes_digest_differing_at_the_mark_is_a_divergence() -> None:
    digests = {"n0": {"index": 70, "digest": "other"}, "n1": {"index": 70, "digest": "d70"},
               "n2": {"index": 70, "digest": "d70"}}
    v = check(with_mark(clean_run(), digests=digests))["violations"]
    assert [(x["node"], x["index"], x["groups"]) for x in v["departed_digest_divergence"]] == [
        ("n0", 70, {"d70": ["n1", "n2"], "other": ["n0"]})]
    assert "departed_digest_not_compared" not in v


def test_one_mark_at_different_indexes_is_a_divergence() -> None:
    digests = {"n0": {"index": 71, "digest": "d70"}, "n1": {"index": 70, "digest": "d70"},
               "n2": {"index": 70, "digest": "d70"}}
    v = check(with_mark(clean_run(), digests=digests))["violations"]
    assert [x["indexes"] for x in v["departed_digest_divergence"]] == [
        {"n0": 71, "n1": 70, "n2": 70}]


def test_the_report_lists_both_digest_mark_checks(tmp_path: Path) -> None:
    run = without_mark(clean_run())
    write_dir(tmp_path, run)
    check_dir(tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "| departed_digest_not_compared | 1 |" in report
    assert "| departed_digest_divergence | 0 |" in report


def test_a_mark_made_again_counts_and_every_mark_must_agree() -> None:
    """The harness makes another mark when the removed node did not answer one: the
    second compares, and a divergence at any of them stays a divergence."""
    unanswered = {"n0": {"error": "no digest within 20 s: ConnectTimeout"},
                  "n1": {"index": 70, "digest": "d70"}, "n2": {"index": 70, "digest": "d70"}}
    run = with_mark(clean_run(), digests=unanswered)
    at = next(h["cluster_wall"] for h in run["history"] if h.get("f") == "digest-mark")
    run["history"].append(digest_mark(at + 1, removed="n0"))
    assert check(run)["verdict"]["valid"], check(run)["violations"]
    diverged = {"n0": {"index": 70, "digest": "other"}, "n1": {"index": 70, "digest": "d70"}}
    run = with_mark(clean_run(), digests=diverged)
    run["history"].append(digest_mark(at + 1, removed="n0"))
    v = check(run)["violations"]
    assert [x["groups"] for x in v["departed_digest_divergence"]] == [
        {"d70": ["n1"], "other": ["n0"]}]
