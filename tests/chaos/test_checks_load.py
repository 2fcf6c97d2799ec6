"""The checks of the larger chaos load on synthetic runs: tenant quotas, retention, and the
backup -> restore digest. Each check flags the history built to break it, and the clean
variant of the same history stays VALID."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.checks_retention import CLOCK_SLACK_S
from tests.chaos.test_checker import END, T0, check, clean_run, hist_op, iso, occ, ts_of

# --- tenant quotas ---------------------------------------------------------------------------

MINUTE = (T0 // 60 + 1) * 60  # the first whole UTC minute inside the synthetic run


def quota_run(fired: int, quota_skips: int, *, limit: int | None = 3,
              concurrent: int | None = None) -> dict[str, Any]:
    """A clean run plus tenant t2 (fires quota `limit`) with `fired` fires and
    `quota_skips` quota skips in one minute, on every node."""
    run = clean_run()
    body = {"max_jobs": 10, "max_concurrent_runs": concurrent, "max_fires_per_minute": limit}
    run["history"] += hist_op(20, "tenant", "ok", T0 - 6, tenant="t2", body=body)
    occs = []
    for i in range(fired + quota_skips):
        o = occ(MINUTE + i, job=f"t2-{i}", status="succeeded" if i < fired else "skipped",
                reason=None if i < fired else "quota")
        occs.append({**o, "tenant": "t2"})
    for node in run["final"]["nodes"].values():
        node["occurrences"] = node["occurrences"] + occs
    return run


def test_quota_skips_in_a_full_minute_are_valid() -> None:
    assert check(quota_run(3, 2))["violations"] == {}


def test_more_fires_in_a_minute_than_the_quota() -> None:
    v = check(quota_run(4, 0))["violations"]
    assert set(v) == {"quota_fires_exceeded"}
    assert {x["fires"] for x in v["quota_fires_exceeded"]} == {4}
    assert len(v["quota_fires_exceeded"]) == 3  # once per node


def test_quota_skip_while_the_minute_had_room() -> None:
    v = check(quota_run(2, 1))["violations"]
    assert set(v) == {"quota_skip_unjustified"}
    assert v["quota_skip_unjustified"][0]["fires"] == 2


def test_quota_skip_in_a_tenant_without_a_fires_quota() -> None:
    v = check(quota_run(1, 1, limit=None))["violations"]
    assert set(v) == {"quota_skip_unjustified"}
    assert "has none" in v["quota_skip_unjustified"][0]["problem"]


def test_committed_tenant_row_wins_over_the_request() -> None:
    run = quota_run(3, 0)
    for node in run["final"]["nodes"].values():
        node["tenants"] = [{"name": "t2", "max_jobs": 10, "max_concurrent_runs": None,
                            "max_fires_per_minute": 2}]
    assert set(check(run)["violations"]) == {"quota_fires_exceeded"}


def with_attempts(run: dict[str, Any], spans: list[tuple[float, float]]) -> dict[str, Any]:
    """Give the t2 occurrences (in order) one attempt each, leased and finished as given."""
    t2 = [o for o in run["final"]["nodes"]["n1"]["occurrences"] if o.get("tenant") == "t2"]
    for o, (start, end) in zip(t2, spans, strict=False):
        run["final"]["attempts"]["n1"][o["id"]] = [
            {"id": o["id"] + "~1", "number": 1, "status": "succeeded",
             "leased_at": iso(start), "finished_at": iso(end), "fencing_token": 7}]
    return run


def test_more_runs_at_once_than_max_concurrent_runs() -> None:
    run = with_attempts(quota_run(3, 0, concurrent=2),
                        [(MINUTE, MINUTE + 3), (MINUTE + 0.2, MINUTE + 3),
                         (MINUTE + 0.4, MINUTE + 3)])
    v = check(run)["violations"]
    assert set(v) == {"quota_concurrency_exceeded"}
    assert v["quota_concurrency_exceeded"][0]["running"] == 3


def test_runs_one_after_another_are_within_max_concurrent_runs() -> None:
    run = with_attempts(quota_run(3, 0, concurrent=2),
                        [(MINUTE, MINUTE + 3), (MINUTE + 0.2, MINUTE + 3),
                         (MINUTE + 3.1, MINUTE + 5)])
    v = check(run)
    assert v["violations"] == {}
    assert v["stats"]["tenants"]["peak_concurrent_runs"] == 2


@pytest.mark.parametrize("fault_from, fault_to", [(MINUTE + 2.5, MINUTE + 4),
                                                   (MINUTE - 5, MINUTE - 1)])
def test_a_time_stamped_during_a_clock_fault_is_not_counted(fault_from: float,
                                                            fault_to: float) -> None:
    """Finish times (first case) and lease times (second: 1 s after the fault, inside
    its slack) that a skewed clock may have stamped are not evidence either way."""
    run = with_attempts(quota_run(3, 0, concurrent=2),
                        [(MINUTE, MINUTE + 3), (MINUTE + 0.2, MINUTE + 3),
                         (MINUTE + 0.4, MINUTE + 3)])
    assert set(check(run)["violations"]) == {"quota_concurrency_exceeded"}
    run["history"] += [{"seed": 7, "process": "nemesis", "type": t, "f": "clock-strobe",
                        "op": 30, "cluster_wall": at, "wall": at, "mono": 0,
                        "targets": ["n2"]}
                       for t, at in (("invoke", fault_from), ("start", fault_from),
                                     ("stop", fault_to))]
    assert check(run)["violations"] == {}


def test_a_finish_stamped_by_a_node_whose_clock_was_far_ahead_is_not_counted() -> None:
    """A follower 262 s ahead took two completions during its bump: their finish times lie
    262 s after the fault, nowhere near its window, and made both runs look running for
    minutes (--profile long seed 452126309: 82 quota_concurrency_exceeded)."""
    bump_from, bump_to, ahead = MINUTE + 5, MINUTE + 6, 100.0
    run = with_attempts(quota_run(3, 0, concurrent=2),
                        [(MINUTE, bump_from + 0.5 + ahead), (MINUTE + 0.2, bump_from + 0.6 + ahead),
                         (MINUTE + 10, MINUTE + 12)])
    run["history"] += [{"seed": 7, "process": "nemesis", "type": t, "f": "clock-bump",
                        "op": 31, "cluster_wall": at, "wall": at, "mono": 0,
                        "targets": ["n2"], "offset_ms": int(ahead * 1000)}
                       for t, at in (("invoke", bump_from), ("start", bump_from),
                                     ("stop", bump_to))]
    assert check(run)["violations"] == {}
    # The same finish times without the fault that explains them: three runs at once.
    run["history"] = [h for h in run["history"] if h.get("op") != 31]
    assert set(check(run)["violations"]) == {"quota_concurrency_exceeded"}


# --- retention -------------------------------------------------------------------------------

RETENTION_S = 20
HORIZON = END - RETENTION_S + CLOCK_SLACK_S
PRUNED_BEFORE = T0 + 15  # finished occurrences of earlier instants were pruned


def finished(o: dict[str, Any]) -> dict[str, Any]:
    return {**o, "tenant": "default", "finished_at": iso(ts_of(o) + 0.5)}


def retention_run(*, observe: bool = True) -> dict[str, Any]:
    """The clean run with retention on: its early history (scheduled and the manual run) is
    gone from every final read, and an observation read it while it was there."""
    run = clean_run()
    run["meta"]["retention_s"] = RETENTION_S
    everything = run["final"]["nodes"]["n1"]["occurrences"]
    gone = [o for o in everything if ts_of(o) < PRUNED_BEFORE]
    for node in run["final"]["nodes"].values():
        node["occurrences"] = [o for o in node["occurrences"] if ts_of(o) >= PRUNED_BEFORE]
    for o in gone:
        del run["final"]["attempts"]["n1"][o["id"]]
    run["observed"] = [{"cluster_wall": T0 + 18, "node": "n2", "since": T0 - 20,
                        "until": T0 + 22, "occurrences": [finished(o) for o in gone],
                        "attempts": {}}] if observe else []
    return run


def test_pruned_history_that_was_observed_finished_is_not_lost() -> None:
    summary = check(retention_run())
    assert summary["violations"] == {}
    assert summary["stats"]["retention"]["restored_pruned"] == 11  # 10 scheduled, 1 manual


def test_without_the_retention_step_the_same_run_loses_instants() -> None:
    run = retention_run()
    run["meta"].pop("retention_s")
    v = check(run)["violations"]
    assert {"lost_instant", "lost_ack"} <= set(v)


def test_a_pruned_instant_no_observation_saw_is_lost() -> None:
    run = retention_run()
    run["observed"][0]["occurrences"] = [o for o in run["observed"][0]["occurrences"]
                                         if o["scheduled_for"] != iso(T0 + 6)]
    v = check(run)["violations"]
    assert set(v) == {"lost_instant"}
    assert [x["scheduled_for"] for x in v["lost_instant"]] == [iso(T0 + 6)] * 3


def test_a_lost_recent_instant_is_still_flagged() -> None:
    run = retention_run()
    for node in run["final"]["nodes"].values():
        node["occurrences"] = [o for o in node["occurrences"]
                               if o["scheduled_for"] != iso(T0 + 30)]
    v = check(run)["violations"]
    assert set(v) == {"lost_instant"}
    assert {x["scheduled_for"] for x in v["lost_instant"]} == {iso(T0 + 30)}


def test_absent_though_it_finished_after_the_horizon() -> None:
    run = retention_run()
    recent = next(o for o in run["final"]["nodes"]["n3"]["occurrences"]
                  if o["scheduled_for"] == iso(T0 + 24))
    run["observed"].append({"cluster_wall": T0 + 26, "node": "n1", "since": T0 + 10,
                            "until": T0 + 26, "occurrences": [finished(recent)],
                            "attempts": {}})
    run["final"]["nodes"]["n3"]["occurrences"].remove(recent)
    v = check(run)["violations"]
    # Retention does not explain it, so on n3 it is a lost instant as well.
    assert set(v) == {"retention_early", "lost_instant"}
    assert v["retention_early"][0]["node"] == "n3"
    assert [x["node"] for x in v["lost_instant"]] == ["n3"]


@pytest.mark.parametrize("seen_at, flagged", [(HORIZON + 2, True), (HORIZON - 5, False)])
def test_absent_after_being_seen_unfinished(seen_at: float, flagged: bool) -> None:
    run = retention_run()
    o = {**occ(T0 + 8), "tenant": "default", "status": "running"}
    run["observed"][0]["occurrences"] = [x for x in run["observed"][0]["occurrences"]
                                         if x["id"] != o["id"]]
    run["observed"].append({"cluster_wall": seen_at, "node": "n1", "since": T0,
                            "until": T0 + 10, "occurrences": [o], "attempts": {}})
    v = check(run)["violations"]
    assert set(v) == ({"retention_unfinished", "lost_instant"} if flagged else set())


def test_a_member_that_lagged_saw_running_what_the_others_saw_finished() -> None:
    """A member catching up (one just added) still held a run unfinished when observed
    after the horizon, while another member had observed its end before the horizon:
    it applied that end later and pruned it, as the others did."""
    run = retention_run()
    o = {**occ(T0 + 8), "tenant": "default", "status": "running"}
    assert any(x["id"] == o["id"] and x["status"] == "succeeded"
               for x in run["observed"][0]["occurrences"])  # n2 saw it finished
    run["observed"].append({"cluster_wall": HORIZON + 2, "node": "n1", "since": T0,
                            "until": T0 + 10, "occurrences": [o], "attempts": {}})
    summary = check(run)
    assert summary["violations"] == {}
    assert summary["stats"]["retention"]["restored_pruned"] == 11
    # Only another member's finished observation excuses it: alone, it is flagged.
    run["observed"][0]["occurrences"] = [x for x in run["observed"][0]["occurrences"]
                                         if x["id"] != o["id"]]
    assert set(check(run)["violations"]) == {"retention_unfinished", "lost_instant"}


def test_no_observation_or_a_gap_is_unobserved() -> None:
    v = check(retention_run(observe=False))["violations"]
    assert "retention_unobserved" in v
    run = retention_run()
    first = run["observed"][0]
    run["observed"] = [{**first, "until": T0 + 2},
                       {**first, "since": T0 + 6, "cluster_wall": T0 + 19}]
    v = check(run)["violations"]
    assert [(x["since"], x["until"]) for x in v["retention_unobserved"]] == [
        (iso(T0 + 2), iso(T0 + 6))]


# --- backup -> restore -----------------------------------------------------------------------

def backup_lines(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [h for h in run["history"] if h.get("process") == "backup"]


def test_restored_digest_differs_from_the_cluster_digest() -> None:
    run = clean_run()
    backup_lines(run)[1]["restored_digest"] = "other"
    v = check(run)["violations"]
    assert set(v) == {"backup_digest_mismatch"}
    assert v["backup_digest_mismatch"][0]["index"] == 50


def test_restored_digest_after_a_membership_change_leaves_the_member_records_out() -> None:
    """The backup's own digests recorded: it must be the source's at N, and the restored
    one must be it without the member records (a restore drops them)."""
    run = clean_run()
    ok = backup_lines(run)[1]
    ok.update(cluster_digest="whole", backup_digest="whole",
              backup_digest_without_members="plain", restored_digest="plain")
    assert "backup_digest_mismatch" not in check(run)["violations"]
    ok.update(backup_digest="another")  # the backup is not the state the node reported
    assert len(check(run)["violations"]["backup_digest_mismatch"]) == 1
    ok.update(backup_digest="whole", restored_digest="whole")  # restore kept the members
    assert len(check(run)["violations"]["backup_digest_mismatch"]) == 1


def test_a_failed_backup_or_one_without_outcome() -> None:
    run = clean_run()
    ok = backup_lines(run)[1]
    ok.update(type="fail", error="BackupError: raftcron backup exited 1")
    assert set(check(run)["violations"]) == {"backup_failed"}
    run["history"].remove(ok)
    v = check(run)["violations"]
    assert v["backup_failed"] == [{"op": 4, "error": "no outcome recorded"}]


def test_a_run_without_a_backup_check_is_invalid() -> None:
    run = clean_run()
    run["history"] = [h for h in run["history"] if h.get("process") != "backup"]
    assert set(check(run)["violations"]) == {"backup_missing"}


def test_a_node_read_later_may_lack_what_retention_pruned_meanwhile() -> None:
    run = retention_run()
    recent = next(o for o in run["final"]["nodes"]["n3"]["occurrences"]
                  if o["scheduled_for"] == iso(T0 + 22))
    run["observed"][0]["occurrences"].append(finished(recent))  # finished at T0 + 22.5
    run["final"]["nodes"]["n3"]["occurrences"].remove(recent)
    assert set(check(run)["violations"]) == {"retention_early", "lost_instant"}
    # n3 was read 5 s after the final reads began: its horizon is 5 s later (and the
    # observations must reach that far).
    run["observed"][0]["until"] = T0 + 27
    run["history"].append({"seed": 7, "process": "harness", "type": "note", "f": "final-read",
                           "node": "n3", "cluster_wall": END + 5, "wall": END + 5, "mono": 0})
    assert check(run)["violations"] == {}


def test_a_finish_stamped_far_from_a_clock_fault_the_run_spanned_is_not_counted() -> None:
    """A run that ended during a leader clock bump got its finish stamped by the skewed
    leader, far outside the fault's window (chaos seed 1801: 131 s later): the run looked
    running all that time. A run that spanned a clock fault has no finish time to trust."""
    spans = [(MINUTE, MINUTE + 40), (MINUTE + 20.2, MINUTE + 23), (MINUTE + 20.4, MINUTE + 23)]
    run = with_attempts(quota_run(3, 0, concurrent=2), spans)
    assert set(check(run)["violations"]) == {"quota_concurrency_exceeded"}
    run["history"] += [{"seed": 7, "process": "nemesis", "type": t, "f": "clock-bump-leader",
                        "op": 31, "cluster_wall": at, "wall": at, "mono": 0,
                        "targets": ["n1"]}
                       for t, at in (("invoke", MINUTE + 5), ("start", MINUTE + 5),
                                     ("stop", MINUTE + 10))]
    assert check(run)["violations"] == {}


def test_a_clock_bumps_offset_does_not_exempt_runs_long_after_it() -> None:
    """A follower bumped 100 s ahead for a second: stamps its skewed clock took lie up to
    100 s after the window, but only for events that happened in the window (issue 37,
    item 8). Three runs at once 45 s after the bump, their effects at the sink then too,
    were once exempted by the whole shifted range; they are counted."""
    bump_from, bump_to = MINUTE + 5, MINUTE + 6
    spans = [(MINUTE + 50, MINUTE + 53), (MINUTE + 50.2, MINUTE + 53),
             (MINUTE + 50.4, MINUTE + 53)]
    run = with_attempts(quota_run(3, 0, concurrent=2), spans)
    run["history"] += [{"seed": 7, "process": "nemesis", "type": t, "f": "clock-bump",
                        "op": 32, "cluster_wall": at, "wall": at, "mono": 0,
                        "targets": ["n2"], "offset_ms": 100_000}
                       for t, at in (("invoke", bump_from), ("start", bump_from),
                                     ("stop", bump_to))]
    v = check(run)["violations"]
    assert set(v) == {"quota_concurrency_exceeded"}
    # The same stamps for runs whose effects reached the sink during the bump: explained.
    t2 = [o for o in run["final"]["nodes"]["n1"]["occurrences"] if o.get("tenant") == "t2"]
    for i, o in enumerate(t2[:3]):
        run["sink"].append({"event": "offer", "seq": 40_000 + i, "key": o["id"],
                            "occurrence": o["id"], "job": o["job_id"],
                            "attempt": o["id"] + "~1", "token": 7,
                            "scheduled_for": o["scheduled_for"],
                            "cluster_wall": bump_from + 0.5})
    assert "quota_concurrency_exceeded" not in check(run)["violations"]
