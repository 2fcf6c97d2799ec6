"""The chaos checker on small synthetic runs: each kind of violation is reported, and a
clean run reports none. Most tests narrow the required coverage to nothing (`check`), since
a synthetic run shows no fault; the coverage tests use the checker's default."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from chaos.checker import CHECKS, check_dir, check_run
from chaos.workload import effect_cmd

T0 = 1_793_512_700  # 2026-11-01T05:58:20Z, an even second
END = T0 + 40
JOB_SPEC = {"id": "j", "schedule": {"cron": "*/2 * * * * *"}, "misfire_policy": "skip",
            "misfire_grace_s": 2, "overlap_policy": "allow", "target": {"shell": effect_cmd()},
            "heartbeat_timeout_s": 6, "retry_backoff_s": 1}


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def occ(t: int, *, version: int = 1, status: str = "succeeded", reason: str | None = None,
        epoch: int = 3, created: float | None = None, job: str = "j") -> dict[str, Any]:
    return {"id": f"{job}@{iso(t)}", "job_id": job, "kind": "scheduled",
            "scheduled_for": iso(t), "job_version": version, "status": status,
            "reason": reason, "idempotency_key": None, "attempts": 1, "epoch": epoch,
            "created_at": iso(created if created is not None else t - 0.5)}


def hist_op(op: int, f: str, type_: str, at: float, **fields: Any) -> list[dict[str, Any]]:
    base = {"seed": 7, "process": "client", "f": f, "op": op, "node": "n1"}
    inv = {**base, "type": "invoke", "wall": at, "cluster_wall": at, "mono": at, **fields}
    done = {**base, "type": type_, "wall": at + 0.1, "cluster_wall": at + 0.1,
            "mono": at + 0.1, **fields}
    if "response" in fields:
        inv.pop("response")
    return [inv, done]


def harness(f: str, at: float, **fields: Any) -> dict[str, Any]:
    return {"seed": 7, "process": "harness", "type": "note", "f": f, "wall": at,
            "cluster_wall": at, "mono": at, **fields}


def offer(seq: int, o: dict[str, Any], attempt: str, token: int, at: float) -> dict[str, Any]:
    return {"event": "offer", "seq": seq, "key": o["id"], "occurrence": o["id"],
            "job": o["job_id"], "attempt": attempt, "scheduled_for": o["scheduled_for"],
            "token": token, "response": 200, "cluster_wall": at}


def clean_run() -> dict[str, Any]:
    occurrences = [occ(t) for t in range(T0 - 4, END + 6, 2)]
    manual = {"id": "j@manual-1", "job_id": "j", "kind": "manual", "scheduled_for": iso(T0 + 10),
              "job_version": 1, "status": "succeeded", "reason": None,
              "idempotency_key": "k1", "attempts": 1, "epoch": 3, "created_at": iso(T0 + 10)}
    everything = occurrences + [manual]
    attempts = {o["id"]: [{"id": o["id"] + "~1", "number": 1, "status": "succeeded",
                           "leased_at": iso(ts_of(o) + 0.01), "fencing_token": 3_000_000_001 + i}]
                for i, o in enumerate(everything)}
    # n0 starts with n1 and n2 and is replaced by the fresh n3 at T0 + 18 (the run's one
    # membership change); n0 is checked on its read at the removal, up to its cut-off.
    history = [harness("node-start", T0 - 30, node=n) for n in ("n0", "n1", "n2")]
    history.append(harness("plan", T0 - 6, kinds=["kill-leader"]))
    history += hist_op(1, "create", "ok", T0 - 5, job="j", spec=JOB_SPEC,
                       response={"id": "j", "version": 1})
    history += hist_op(2, "trigger", "ok", T0 + 10, job="j", key="k1",
                       response={"id": "j@manual-1", "duplicate": False})
    history += [{"seed": 7, "process": "nemesis", "type": "start", "f": "kill-leader", "op": 3,
                 "cluster_wall": T0 + 12, "wall": T0 + 12, "mono": 0, "targets": ["n1"],
                 "leader": "n1", "epoch": 3, "term": 3},
                {"seed": 7, "process": "nemesis", "type": "stop", "f": "kill-leader", "op": 3,
                 "cluster_wall": T0 + 16, "wall": T0 + 16, "mono": 0}]
    history += [{"seed": 7, "process": "backup", "type": t, "f": "backup-restore", "op": 4,
                 "cluster_wall": T0 + 20, "wall": T0 + 20, "mono": 0, **fields}
                for t, fields in (("invoke", {}), ("ok", {"node": "n2", "index": 50,
                                                          "cluster_digest": "d50",
                                                          "restored_digest": "d50"}))]
    history += membership_change(T0 + 18, removed="n0", added="n3")
    history += [periodic_mark(T0 + 8, ("n0", "n1", "n2")),
                periodic_mark(T0 + 24, ("n1", "n2", "n3"))]
    node = {"cluster": {"term": 4}, "jobs": [{"id": "j", "version": 1,
                                             "schedule": {"cron": "*/2 * * * * *",
                                                          "timezone": "UTC", "dst_gap": "auto",
                                                          "dst_fold": "auto"}}],
            "occurrences": everything}
    sink = [offer(i + 1, o, o["id"] + "~1", 3_000_000_001 + i, ts_of(o) + 0.2)
            for i, o in enumerate(everything)]
    digest = {"last_applied_index": 99, "digest": "abc"}
    departed = {**copy.deepcopy(node), "checked_until": T0 + 18, "attempts": {},
                "occurrences": [o for o in everything if ts_of(o) <= T0 + 18]}
    nodes = {n: copy.deepcopy(node) for n in ("n1", "n2", "n3")}
    for nid, n in nodes.items():
        n["cluster"]["peers"] = [{"id": other} for other in sorted(nodes) if other != nid]
    return {
        "meta": {"seed": 7, "profile": "ci", "final_reads_cluster_wall": END},
        "history": history,
        "departed": {"n0": departed},
        "final": {"nodes": nodes,
                  "digests": {n: {"node_id": n, **digest} for n in ("n1", "n2", "n3")},
                  # every member's attempts read (one object: tests edit them once)
                  "attempts": {"n1": attempts, "n2": attempts, "n3": attempts}},
        "sink": sink, "proxy": [{"event": "start"}],
    }


def periodic_mark(at: float, members: tuple[str, ...], digest: str = "d60",
                  **digests: dict[str, Any]) -> dict[str, Any]:
    """The harness's digest mark made while the faults run (chaos/checks_marks.py): every
    member's digest at the mark's index, equal unless `digests` says otherwise."""
    return {"seed": 7, "process": "marks", "type": "note", "f": "digest-mark",
            "wall": at, "cluster_wall": at, "mono": at, "mark": f"digest-mark-{int(at)}",
            "index": 60, "digests": {n: digests.get(n, {"index": 60, "digest": digest})
                                     for n in members}}


def digest_mark(at: float, *, removed: str, digests: dict[str, Any] | None = None,
                op: int = 90) -> dict[str, Any]:
    """The harness's digest-mark line of a membership change: each node's digest at the
    mark (default: the removed node and the two members, all equal)."""
    if digests is None:
        digests = {n: {"index": 70, "digest": "d70"} for n in ("n0", "n1", "n2")}
    return {"seed": 7, "process": "membership", "type": "note", "f": "digest-mark", "op": op,
            "wall": at, "cluster_wall": at, "mono": at, "node": removed,
            "mark": "digest-mark-" + "7" * 32, "index": 70, "digests": digests}


def membership_change(at: float, *, removed: str, added: str,
                      outcome: str | None = "ok") -> list[dict[str, Any]]:
    """The history of one membership change: invoke, the departure read and the digest
    mark, the new node's start, and the outcome (`ok`, `fail`, or None: no outcome
    recorded)."""
    base = {"seed": 7, "process": "membership", "f": "replace-node", "op": 90, "wall": at,
            "cluster_wall": at, "mono": at}
    out = [{**base, "type": "invoke", "members": ["n0", "n1", "n2"]},
           harness("departure-read", at + 0.5, node=removed, cutoff=at),
           digest_mark(at + 0.6, removed=removed),
           harness("node-start", at + 1, node=added)]
    if outcome == "ok":
        out.append({**base, "type": "ok", "removed": removed, "added": added,
                    "members": ["n1", "n2", "n3"], "cutoff": at, "cluster_wall": at + 2})
    elif outcome == "fail":
        out.append({**base, "type": "fail", "error": "StepError: n3 did not catch up"})
    return out


def add_effects(run: dict[str, Any], occs: list[dict[str, Any]]) -> None:
    """Give new succeeded occurrences their attempt (on n1) and their sink offer (the
    only one of their attempt: an offer of an occurrence they replace goes)."""
    seq = max(s["seq"] for s in run["sink"])
    ids = {o["id"] for o in occs}
    run["sink"] = [s for s in run["sink"] if s.get("occurrence") not in ids]
    for i, o in enumerate(occs):
        token = 5_000_000_001 + i
        run["final"]["attempts"]["n1"][o["id"]] = [
            {"id": o["id"] + "~1", "number": 1, "status": "succeeded", "fencing_token": token,
             "leased_at": o["scheduled_for"]}]
        run["sink"].append(offer(seq + i + 1, o, o["id"] + "~1", token, ts_of(o) + 0.2))


def edit_final_job(run: dict[str, Any], version: int, cron: str) -> None:
    for node in run["final"]["nodes"].values():
        node["jobs"][0].update(version=version, schedule={**node["jobs"][0]["schedule"],
                                                          "cron": cron})


def check(run: dict[str, Any]) -> dict[str, Any]:
    return check_run(run, required_coverage=())


def ts_of(o: dict[str, Any]) -> float:
    return datetime.fromisoformat(o["scheduled_for"].replace("Z", "+00:00")).timestamp()


def nodes_occ(run: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [n["occurrences"] for n in run["final"]["nodes"].values()]


def test_clean_run_reports_nothing() -> None:
    summary = check(clean_run())
    assert summary["violations"] == {}
    assert summary["verdict"]["valid"]
    assert summary["stats"]["failover"][0]["new_epoch"] is None


def test_duplicate_scheduled_occurrence() -> None:
    run = clean_run()
    extra = occ(T0 + 10)
    extra["id"] = "j@other-id"
    run["final"]["nodes"]["n2"]["occurrences"].append(extra)
    assert "duplicate_scheduled" in check(run)["violations"]


def test_duplicate_effect_in_sink() -> None:
    run = clean_run()
    first = run["sink"][3]
    run["sink"].append({**first, "occurrence": "j@copy", "key": "j@copy",
                        "attempt": "j@copy~1", "token": 4_000_000_001})
    assert "duplicate_sink" in check(run)["violations"]


def test_duplicate_manual_and_trigger_not_idempotent() -> None:
    run = clean_run()
    for occs in nodes_occ(run):
        dup = dict(next(o for o in occs if o["kind"] == "manual"), id="j@manual-2")
        occs.append(dup)
    run["history"] += hist_op(9, "trigger", "ok", T0 + 11, job="j", key="k1",
                              response={"id": "j@manual-2", "duplicate": True})
    v = check(run)["violations"]
    assert "duplicate_manual" in v
    assert "trigger_not_idempotent" in v


def test_lost_instant() -> None:
    run = clean_run()
    gone = iso(T0 + 20)
    for occs in nodes_occ(run):
        occs[:] = [o for o in occs if o["scheduled_for"] != gone]
    lost = check(run)["violations"]["lost_instant"]
    assert {(x["node"], x["scheduled_for"]) for x in lost} == {
        (n, gone) for n in ("n1", "n2", "n3")}


def test_skipped_with_reason_is_not_lost_but_unknown_reason_is_flagged() -> None:
    run = clean_run()
    for occs in nodes_occ(run):
        for o in occs:
            if o["scheduled_for"] == iso(T0 + 20):
                o.update(status="skipped", reason="misfire", created_at=iso(T0 + 25))
            if o["scheduled_for"] == iso(T0 + 22):
                o.update(status="skipped", reason="because")
    v = check(run)["violations"]
    assert "lost_instant" not in v
    assert [x["reason"] for x in v["unexplained_skip"]] == ["because"] * 3


def test_misfire_policy_contradictions() -> None:
    run = clean_run()
    for occs in nodes_occ(run):
        for o in occs:
            if o["scheduled_for"] == iso(T0 + 20):
                o.update(status="skipped", reason="misfire", created_at=iso(T0 + 20.5))
            if o["scheduled_for"] == iso(T0 + 24):
                o.update(created_at=iso(T0 + 30))  # fired 6 s late under skip, grace 2
    problems = {x["problem"] for x in check(run)["violations"]["misfire_policy"]}
    assert len(problems) == 2


def test_edit_changes_expected_schedule() -> None:
    run = clean_run()
    edit_at = T0 + 20
    run["history"] += hist_op(5, "edit", "ok", edit_at, job="j", key="e1",
                              body={"schedule": {"cron": "*/3 * * * * *", "timezone": "UTC"}},
                              response={"id": "j", "version": 2})
    for occs in nodes_occ(run):
        occs[:] = [o for o in occs if o["kind"] != "scheduled" or ts_of(o) <= edit_at]
        occs += [occ(t, version=2) for t in range(edit_at + 1, END + 6) if t % 3 == 0]
    add_effects(run, [occ(t, version=2) for t in range(edit_at + 1, END + 6) if t % 3 == 0])
    for node in run["final"]["nodes"].values():
        node["jobs"][0].update(version=2, schedule={**node["jobs"][0]["schedule"],
                                                    "cron": "*/3 * * * * *"})
    assert check(run)["violations"] == {}
    for occs in nodes_occ(run):
        occs[:] = [o for o in occs if o["scheduled_for"] != iso(edit_at + 10)
                   and o["scheduled_for"] != iso(edit_at + 10 - (edit_at + 10) % 3)]
    assert "lost_instant" in check(run)["violations"]


def test_token_reused_by_two_attempts() -> None:
    run = clean_run()
    s = run["sink"][5]
    run["sink"].append({**s, "attempt": s["attempt"][:-1] + "2"})
    assert "token_reused" in check(run)["violations"]


def test_two_offers_of_one_attempt_are_a_double_execution() -> None:
    """The effect is one curl without retry: a second offer of the same attempt and token
    (which the fence calls a replay) means the job ran twice (issue 37, item 2)."""
    run = clean_run()
    s = run["sink"][5]
    run["sink"].append({**s, "seq": 10_000, "cluster_wall": s["cluster_wall"] + 3})
    summary = check(run)
    assert set(summary["violations"]) == {"double_execution"}
    [x] = summary["violations"]["double_execution"]
    assert (x["attempt"], x["tokens"]) == (s["attempt"], [s["token"], s["token"]])


def test_early_fire() -> None:
    run = clean_run()
    run["sink"][4]["cluster_wall"] -= 30
    assert "early_fire" in check(run)["violations"]


def test_rerun_after_success() -> None:
    run = clean_run()
    occ_id = next(iter(run["final"]["attempts"]["n1"]))
    run["final"]["attempts"]["n1"][occ_id].append(
        {"id": occ_id + "~2", "number": 2, "status": "running", "leased_at": None})
    assert "rerun_after_success" in check(run)["violations"]


@pytest.mark.parametrize("case", ["create", "edit", "trigger", "backfill"])
def test_acknowledged_write_missing(case: str) -> None:
    run = clean_run()
    if case == "create":
        run["final"]["nodes"]["n3"]["jobs"] = []
    elif case == "edit":
        run["history"] += hist_op(8, "edit", "ok", END - 1, job="j", key="e",
                                  body={"schedule": {"cron": "*/2 * * * * *"}},
                                  response={"id": "j", "version": 5})
    elif case == "trigger":
        run["history"] += hist_op(8, "trigger", "ok", T0 + 12, job="j", key="k9",
                                  response={"id": "j@manual-9"})
    else:
        run["history"] += hist_op(8, "backfill", "ok", T0 + 12, job="j", key="b1",
                                  response={"occurrence_ids": ["j@backfill-x"]})
    lost = check(run)["violations"]["lost_ack"]
    assert {x["op"] for x in lost} == {case}


def test_unknown_outcome_is_not_a_lost_ack() -> None:
    run = clean_run()
    run["history"] += hist_op(8, "trigger", "info", T0 + 12, job="j", key="k9")
    assert check(run)["violations"] == {}


def test_digest_divergence_only_at_equal_index() -> None:
    run = clean_run()
    run["final"]["digests"]["n2"]["digest"] = "other"
    assert "digest_divergence" in check(run)["violations"]
    run["final"]["digests"]["n2"]["last_applied_index"] = 98
    assert "digest_divergence" not in check(run)["violations"]


def test_dst_fold_once_second_pass_is_a_violation() -> None:
    run = clean_run()
    spec = {"id": "dst-once", "schedule": {"cron": "*/5 * 1 * * *",
                                           "timezone": "America/New_York", "dst_fold": "once"}}
    run["history"] += hist_op(20, "create", "ok", T0 - 5, job="dst-once", spec=spec,
                              response={"id": "dst-once", "version": 1})
    fold = 1_793_512_800  # 2026-11-01T06:00:00Z
    first = [occ(t, job="dst-once") for t in range(T0, fold, 5) if t > T0 - 5 + 4]
    for occs in nodes_occ(run):
        occs += copy.deepcopy(first)
    run["meta"]["final_reads_cluster_wall"] = fold + 30
    for occs in nodes_occ(run):
        occs += [occ(t) for t in range(END + 6, fold + 40, 2)]
    assert "dst" not in check(run)["violations"]
    for occs in nodes_occ(run):
        occs.append(occ(fold + 5, job="dst-once"))
    dst = check(run)["violations"]["dst"]
    assert dst[0]["problem"].startswith("fired in the second pass")


# --- the run directory: every file, and the checker fails closed without one ----------------

def write_dir(d: Path, run: dict[str, Any]) -> None:
    (d / "meta.json").write_text(json.dumps(run["meta"]))
    (d / "final.json").write_text(json.dumps(run["final"]))
    (d / "departed.json").write_text(json.dumps(run["departed"]))
    for name in ("history", "sink", "proxy"):
        (d / f"{name}.jsonl").write_text("\n".join(json.dumps(x) for x in run[name]) + "\n")


def test_check_dir_writes_summary_and_a_report_listing_every_check(tmp_path: Path) -> None:
    write_dir(tmp_path, clean_run())
    summary = check_dir(tmp_path)
    # The synthetic run shows no fault evidence: by default that alone makes it INVALID.
    assert not summary["verdict"]["valid"]
    assert set(summary["verdict"]["violations"]) == {"coverage_missing"}
    assert (tmp_path / "summary.json").exists()
    report = (tmp_path / "report.md").read_text()
    assert "**INVALID**" in report
    for name in CHECKS:
        assert f"| {name} | {summary['verdict']['checks'][name]} |" in report
    assert "| lost_instant | 0 |" in report


def test_empty_directory_is_invalid(tmp_path: Path) -> None:
    v = check_dir(tmp_path)["verdict"]
    assert not v["valid"]
    for name in ("meta_missing", "history_missing", "final_missing", "sink_missing",
                 "proxy_missing", "fault_plan_missing", "digest_not_compared",
                 "coverage_missing"):
        assert v["checks"][name] > 0, name


@pytest.mark.parametrize("name", ["meta", "history", "final", "sink", "proxy"])
def test_a_missing_file_is_invalid(tmp_path: Path, name: str) -> None:
    write_dir(tmp_path, clean_run())
    (tmp_path / (f"{name}.json" if name in ("meta", "final") else f"{name}.jsonl")).unlink()
    summary = check_dir(tmp_path)
    assert not summary["verdict"]["valid"]
    assert summary["verdict"]["checks"][f"{name}_missing"] == 1


@pytest.mark.parametrize("name", ["history", "sink", "proxy"])
def test_an_empty_log_is_invalid(tmp_path: Path, name: str) -> None:
    run = clean_run()
    run[name] = []
    assert f"{name}_missing" in check(run)["violations"]


def test_a_corrupt_line_is_counted_not_dropped(tmp_path: Path) -> None:
    write_dir(tmp_path, clean_run())
    with open(tmp_path / "sink.jsonl", "a") as f:
        f.write('{"event": "offer", "tok\n')
    v = check_dir(tmp_path)["violations"]
    assert v["corrupt_line"] == [{"file": "sink", "lines": 1}]


def test_final_reads_missing_or_incomplete() -> None:
    run = clean_run()
    del run["final"]["nodes"]["n3"]
    run["final"]["nodes"]["n2"]["occurrences_incomplete"] = True
    v = check(run)["violations"]
    assert [x["node"] for x in v["final_read_missing"]] == ["n3"]
    assert [x["node"] for x in v["final_read_incomplete"]] == ["n2"]


def test_meta_without_final_reads_is_invalid() -> None:
    run = clean_run()
    del run["meta"]["final_reads_cluster_wall"]
    assert "meta_missing" in check(run)["violations"]


# --- faults ----------------------------------------------------------------------------------

def nemesis(type_: str, f: str, op: int, at: float, **fields: Any) -> dict[str, Any]:
    return {"seed": 7, "process": "nemesis", "type": type_, "f": f, "op": op,
            "cluster_wall": at, "wall": at, "mono": 0, **fields}


def test_fault_that_failed_to_start() -> None:
    run = clean_run()
    run["history"][3]["kinds"].append("partition-leader")
    run["history"].append(nemesis("invoke", "partition-leader", 40, T0 + 20))
    run["history"].append(nemesis("fail", "partition-leader", 40, T0 + 20,
                                  error="CalledProcessError('nft')"))
    v = check(run)["violations"]
    assert v["fault_not_started"][0]["kind"] == "partition-leader"
    assert v["fault_not_run"][0]["kind"] == "partition-leader"


def test_fault_skipped_at_the_deadline_and_a_planned_fault_never_seen() -> None:
    run = clean_run()
    run["history"][3]["kinds"] += ["ack-loss", "kill-two"]
    run["history"].append(nemesis("skipped", "ack-loss", 0, T0 + 30, reason="ci-deadline"))
    v = check(run)["violations"]
    assert sorted(x["kind"] for x in v["fault_not_run"]) == ["ack-loss", "ack-loss",
                                                                "kill-two"]


def test_fault_that_never_stopped_or_stopped_with_an_error() -> None:
    run = clean_run()
    run["history"][3]["kinds"] += ["pause-two", "clock-bump"]
    run["history"] += [nemesis("start", "pause-two", 41, T0 + 20),
                       nemesis("start", "clock-bump", 42, T0 + 22),
                       nemesis("stop", "clock-bump", 42, T0 + 25, error="OSError()")]
    v = check(run)["violations"]
    assert sorted(x["kind"] for x in v["fault_not_healed"]) == ["clock-bump", "pause-two"]


def test_no_plan_is_invalid() -> None:
    run = clean_run()
    del run["history"][3]
    assert "fault_plan_missing" in check(run)["violations"]


# --- coverage --------------------------------------------------------------------------------

def test_coverage_is_required_by_default() -> None:
    run = clean_run()
    summary = check_run(run)
    assert not summary["verdict"]["valid"]
    missing = {x["kind"] for x in summary["violations"]["coverage_missing"]}
    assert "leader_kills" not in missing  # the run has one kill-leader window
    assert {"partitions", "ack_loss", "clock_skew"} <= missing
    assert summary["verdict"]["coverage_missing"] == sorted(
        missing, key=summary["verdict"]["coverage_missing"].index)


# --- digests ---------------------------------------------------------------------------------

def test_digest_from_a_node_missing_or_at_another_index_is_not_compared() -> None:
    run = clean_run()
    run["final"]["digests"]["n3"] = None
    assert check(run)["violations"]["digest_not_compared"][0]["missing"] == ["n3"]
    run = clean_run()
    run["final"]["digests"]["n2"]["last_applied_index"] = 98
    assert "digest_not_compared" in check(run)["violations"]


def test_digest_samples_diverging_at_a_shared_index() -> None:
    run = clean_run()
    run["final"]["digest_samples"] = {
        "n1": [{"last_applied_index": 97, "digest": "x"}, {"last_applied_index": 99,
                                                           "digest": "abc"}],
        "n2": [{"last_applied_index": 97, "digest": "y"}, {"last_applied_index": 99,
                                                           "digest": "abc"}],
        "n3": [{"last_applied_index": 99, "digest": "abc"}]}
    div = check(run)["violations"]["digest_divergence"]
    assert [d["index"] for d in div] == [97]


# --- effects ---------------------------------------------------------------------------------

def second_attempt(run: dict[str, Any], index: int, *, first_status: str, token_delta: int,
                   second_status: str = "succeeded") -> tuple[str, dict[str, Any]]:
    o = [x for x in run["final"]["nodes"]["n1"]["occurrences"] if x["kind"] == "scheduled"][index]
    lst = run["final"]["attempts"]["n1"][o["id"]]
    lst[0]["status"] = first_status
    token = lst[0]["fencing_token"] + token_delta
    lst.append({"id": o["id"] + "~2", "number": 2, "status": second_status,
                "fencing_token": token, "leased_at": iso(ts_of(o) + 7)})
    seq = max(s["seq"] for s in run["sink"]) + 1
    run["sink"].append(offer(seq, o, o["id"] + "~2", token, ts_of(o) + 8))
    return o["id"], lst[1]


def test_re_execution_after_a_lost_lease_is_not_a_double_effect() -> None:
    run = clean_run()
    second_attempt(run, 5, first_status="lost", token_delta=100)
    summary = check(run)
    assert summary["violations"] == {}
    assert summary["stats"]["sink"]["re_executions_accepted"] == 1


def test_double_effect_after_an_acknowledged_success() -> None:
    run = clean_run()
    occ_id, _ = second_attempt(run, 5, first_status="succeeded", token_delta=100,
                               second_status="running")
    v = check(run)["violations"]
    assert [x["occurrence"] for x in v["double_effect"]] == [occ_id]


def test_stale_write_credited_as_success() -> None:
    """Attempt 1 was superseded (attempt 2 wrote with a higher token); its late write
    arrives after, and the cluster recorded attempt 1 as succeeded: a stale completion
    was accepted."""
    run = clean_run()
    o = run["final"]["nodes"]["n1"]["occurrences"][5]
    first = run["sink"][5]
    run["sink"].remove(first)
    second_attempt(run, 5, first_status="succeeded", token_delta=100,
                   second_status="lost")
    run["sink"].append({**first, "seq": 10_000, "cluster_wall": ts_of(o) + 9})
    v = check(run)["violations"]
    assert [x["attempt"] for x in v["stale_write"]] == [o["id"] + "~1"]


def test_stale_offer_of_a_lost_lease_is_only_counted() -> None:
    run = clean_run()
    o = run["final"]["nodes"]["n1"]["occurrences"][5]
    first = run["sink"][5]
    run["sink"].remove(first)
    second_attempt(run, 5, first_status="lost", token_delta=100)
    run["sink"].append({**first, "seq": 10_000, "cluster_wall": ts_of(o) + 9})
    summary = check(run)
    assert summary["violations"] == {}
    assert summary["stats"]["sink"]["stale_fenced"] == 1


def test_token_order_newer_attempt_with_a_lower_token() -> None:
    run = clean_run()
    occ_id, _ = second_attempt(run, 5, first_status="lost", token_delta=-1)
    v = check(run)["violations"]
    problems = {x["problem"] for x in v["token_order"]}
    assert problems == {"a newer attempt's write ranks below an older attempt's",
                        "the cluster's attempt tokens do not increase"}


def test_token_reused_by_two_attempts_of_one_key() -> None:
    run = clean_run()
    s = run["sink"][5]
    run["sink"].append({**s, "seq": 10_000, "attempt": s["attempt"][:-1] + "2"})
    assert "token_reused" in check(run)["violations"]


@pytest.mark.parametrize(("early", "flagged"), [(0.5, False), (0.56, True), (1.2, True)])
def test_early_fire_beyond_the_guard_bound(early: float, flagged: bool) -> None:
    run = clean_run()
    s = run["sink"][4]
    s["cluster_wall"] = ts_of({"scheduled_for": s["scheduled_for"]}) - early
    assert ("early_fire" in check(run)["violations"]) is flagged


def test_success_without_effect() -> None:
    run = clean_run()
    gone = run["sink"].pop(6)
    v = check(run)["violations"]["success_without_effect"]
    assert {x["occurrence"] for x in v} == {gone["occurrence"]}


def test_a_job_that_does_not_write_to_the_sink_needs_no_effect() -> None:
    run = clean_run()
    run["history"] = [h for h in run["history"] if h.get("f") != "create"]
    run["history"] += hist_op(1, "create", "ok", T0 - 5, job="j",
                              spec={**JOB_SPEC, "target": {"shell": "true"}},
                              response={"id": "j", "version": 1})
    run["sink"].pop(6)
    assert "success_without_effect" not in check(run)["violations"]


# --- schedules -------------------------------------------------------------------------------

def test_lost_instant_on_one_follower_only() -> None:
    run = clean_run()
    gone = iso(T0 + 20)
    occs = run["final"]["nodes"]["n3"]["occurrences"]
    occs[:] = [o for o in occs if o["scheduled_for"] != gone]
    lost = check(run)["violations"]["lost_instant"]
    assert [(x["node"], x["scheduled_for"]) for x in lost] == [("n3", gone)]


def test_unscheduled_instant() -> None:
    run = clean_run()
    for occs in nodes_occ(run):
        occs.append(occ(T0 + 21))  # */2 has no odd second
    add_effects(run, [occ(T0 + 21)])
    v = check(run)["violations"]["unscheduled_instant"]
    assert {x["occurrence"] for x in v} == {f"j@{iso(T0 + 21)}"}


def test_instant_of_the_new_schedule_claimed_under_the_old_version() -> None:
    run = clean_run()
    run["history"] += hist_op(5, "edit", "ok", T0 + 20, job="j", key="e1",
                              body={"schedule": {"cron": "*/3 * * * * *"}},
                              response={"id": "j", "version": 2})
    for occs in nodes_occ(run):
        occs[:] = [o for o in occs if o["kind"] != "scheduled" or ts_of(o) <= T0 + 20]
        new = [occ(t, version=2) for t in range(T0 + 21, END + 6) if t % 3 == 0]
        new[1]["job_version"] = 1  # T0 + 25 is */3 but not */2
        occs += new
    add_effects(run, [occ(t, version=2) for t in range(T0 + 21, END + 6) if t % 3 == 0])
    edit_final_job(run, 2, "*/3 * * * * *")
    v = check(run)["violations"]
    assert "unscheduled_instant" in v
    assert v["unscheduled_instant"][0]["version"] == 1


def test_version_unknown() -> None:
    run = clean_run()
    for occs in nodes_occ(run):
        occs[-2]["job_version"] = 7
    assert "version_unknown" in check(run)["violations"]


def test_version_going_back() -> None:
    run = clean_run()
    run["history"] += hist_op(5, "edit", "ok", T0 + 10, job="j", key="e1",
                              body={"schedule": {"cron": "*/2 * * * * *"}},
                              response={"id": "j", "version": 2})
    edit_final_job(run, 2, "*/2 * * * * *")
    for occs in nodes_occ(run):
        for o in occs:
            if o["kind"] == "scheduled" and ts_of(o) > T0 + 12:
                o["job_version"] = 2
            if o["scheduled_for"] == iso(T0 + 30):
                o["job_version"] = 1
    v = check(run)["violations"]
    assert [x["occurrence"] for x in v["version_order"]] == [f"j@{iso(T0 + 30)}"] * 3


def test_edit_window_checked_on_both_sides() -> None:
    """The instant right after an acknowledged edit (plus the claim slack) must be there
    under the new version, and the last instants before it under the old one: no blind
    window around the edit."""
    def edited() -> dict[str, Any]:
        run = clean_run()
        run["history"] += hist_op(5, "edit", "ok", T0 + 20, job="j", key="e1",
                                  body={"schedule": {"cron": "*/3 * * * * *"}},
                                  response={"id": "j", "version": 2})  # acked at T0 + 20.1
        for occs in nodes_occ(run):
            occs[:] = [o for o in occs if o["kind"] != "scheduled" or ts_of(o) <= T0 + 20]
            occs += [occ(t, version=2) for t in range(T0 + 21, END + 6) if t % 3 == 0]
        add_effects(run, [occ(t, version=2) for t in range(T0 + 21, END + 6) if t % 3 == 0])
        edit_final_job(run, 2, "*/3 * * * * *")
        return run

    assert check(edited())["violations"] == {}
    run = edited()  # the first new-version instant after the edit, T0 + 22, is gone
    for occs in nodes_occ(run):
        occs[:] = [o for o in occs if o["scheduled_for"] != iso(T0 + 22)]
    lost = check(run)["violations"]["lost_instant"]
    assert {(x["scheduled_for"], x["version"]) for x in lost} == {(iso(T0 + 22), 2)}
    run = edited()  # the last old-version instant before the edit, T0 + 20, is gone
    for occs in nodes_occ(run):
        occs[:] = [o for o in occs if o["scheduled_for"] != iso(T0 + 20)]
    lost = check(run)["violations"]
    assert "lost_instant" not in lost  # no claim shows the ticker live then: an outage
    for occs in nodes_occ(run):  # another job's claim at T0 + 19.6: the ticker was live
        occs.append(occ(T0 + 20, job="other", created=T0 + 19.6))
    lost = check(run)["violations"]["lost_instant"]
    assert {x["scheduled_for"] for x in lost} == {iso(T0 + 20)}


def test_an_edit_is_in_flight_from_the_first_send_of_any_try() -> None:
    """An edit to */3 (If-Match 1) timed out at its first try, sent at T0 + 15, and its
    retry with the same key was acknowledged at T0 + 19.8. The first try committed
    before T0 + 18, so that old instant was rightly never claimed, although the ticker
    was live until the retry was sent (seed 101 in CI: the checker called it lost)."""
    def retried(first_try_cron: str) -> dict[str, Any]:
        run = clean_run()
        run["history"] += hist_op(5, "edit", "info", T0 + 15, job="j", key="e1",
                                  expected_version=1, error="ReadTimeout",
                                  body={"schedule": {"cron": first_try_cron}})
        run["history"] += hist_op(6, "edit", "ok", T0 + 19.7, job="j", key="e1",
                                  expected_version=1,
                                  body={"schedule": {"cron": "*/3 * * * * *"}},
                                  response={"id": "j", "version": 2})
        new = [occ(t, version=2) for t in range(T0 + 19, END + 6) if t % 3 == 0]
        for occs in nodes_occ(run):
            occs[:] = [o for o in occs if o["kind"] != "scheduled" or ts_of(o) <= T0 + 16]
            occs += new
            occs.append(occ(T0 + 18, job="other", created=T0 + 17.2))  # the ticker was live
        add_effects(run, new)
        edit_final_job(run, 2, "*/3 * * * * *")
        return run

    assert check(retried("*/3 * * * * *"))["violations"] == {}
    # A timed-out try with another schedule did not make version 2: it proves nothing,
    # and the old instant T0 + 18 is owed (the ticker was live before the retry's send).
    lost = check(retried("*/5 * * * * *"))["violations"]["lost_instant"]
    assert {(x["scheduled_for"], x["version"]) for x in lost} == {(iso(T0 + 18), 1)}
    run = retried("*/3 * * * * *")  # an old instant before the first send is still owed
    for occs in nodes_occ(run):
        occs[:] = [o for o in occs if o["scheduled_for"] != iso(T0 + 14)]
        occs.append(occ(T0 + 14, job="other", created=T0 + 13.4))
    lost = check(run)["violations"]["lost_instant"]
    assert {(x["scheduled_for"], x["version"]) for x in lost} == {(iso(T0 + 14), 1)}


def test_stuck_occurrences() -> None:
    run = clean_run()
    for occs in nodes_occ(run):
        for o in occs:
            if o["scheduled_for"] == iso(T0 + 2):
                o["status"] = "running"  # 38 s idle > 6 + 1 + 10
            if o["scheduled_for"] == iso(END - 4):
                o["status"] = "pending"  # 4 s: may still run
    stuck = check(run)["violations"]["stuck_occurrence"]
    assert {(x["occurrence"], x["status"]) for x in stuck} == {(f"j@{iso(T0 + 2)}", "running")}


def test_stuck_at_a_removed_nodes_cut_off_is_judged_by_the_end() -> None:
    """n0 was removed at T0 + 18 with j@T0+0 pending (18.5 s idle > 6 + 1 + 10): a run in
    progress then, not stuck, when the members at the end show it finished; stuck when
    they still show it pending, or do not have it at all."""
    def removed_with_pending(at_end: str | None) -> dict[str, Any]:
        run = clean_run()
        for o in run["departed"]["n0"]["occurrences"]:
            if o["scheduled_for"] == iso(T0):
                o["status"] = "pending"
        for occs in nodes_occ(run):
            for o in list(occs):
                if o["scheduled_for"] == iso(T0) and at_end is None:
                    occs.remove(o)
                elif o["scheduled_for"] == iso(T0):
                    o["status"] = at_end
        return run

    assert "stuck_occurrence" not in check(removed_with_pending("succeeded"))["violations"]
    stuck = check(removed_with_pending("pending"))["violations"]["stuck_occurrence"]
    assert {x["node"] for x in stuck} == {"n0", "n1", "n2", "n3"}
    stuck = check(removed_with_pending(None))["violations"]["stuck_occurrence"]
    assert {x["node"] for x in stuck} == {"n0"}


def outage(policy: str, fired: set[int], catch_up_max: int = 3) -> dict[str, Any]:
    """Instants T0+14 .. T0+26 were missed (claimed at T0+29, grace 2); `fired` fire,
    the others are skipped as misfires; T0+28 is on time."""
    run = clean_run()
    spec = {**JOB_SPEC, "misfire_policy": policy, "catch_up_max": catch_up_max}
    for h in run["history"]:
        if h.get("f") == "create":
            h["spec"] = spec
    for occs in nodes_occ(run):
        for o in occs:
            t = ts_of(o) if o["kind"] == "scheduled" else None
            if t is not None and T0 + 14 <= t <= T0 + 28:
                o["created_at"] = iso(T0 + 29)
                if t <= T0 + 26 and t not in fired:
                    o.update(status="skipped", reason="misfire")
    return run


@pytest.mark.parametrize(("policy", "fired", "ok"), [
    ("run_once", {T0 + 26}, True),
    ("run_once", {T0 + 24, T0 + 26}, False),
    ("run_once", set(), False),
    ("catch_up", {T0 + 22, T0 + 24, T0 + 26}, True),
    ("catch_up", {T0 + 24, T0 + 26}, False),
    ("catch_up", {T0 + 20, T0 + 22, T0 + 24, T0 + 26}, False),
    ("skip", set(), True),
    ("skip", {T0 + 26}, False),
])
def test_misfire_policies_after_an_outage(policy: str, fired: set[int], ok: bool) -> None:
    run = outage(policy, fired)
    v = check(run)["violations"]
    assert ("misfire_policy" not in v) is ok, v.get("misfire_policy")


def test_http_target_offers_are_matched_by_their_token() -> None:
    """An HTTP target names only its idempotency key and token: the checker finds the
    attempt from the token and the instant from the occurrence, so its checks still fire."""
    run = clean_run()
    for s in run["sink"]:
        s.pop("attempt")
        s.pop("scheduled_for")
    assert check(run)["violations"] == {}
    s = run["sink"][4]
    o_at = ts_of({"scheduled_for": run["final"]["nodes"]["n1"]["occurrences"][4][
        "scheduled_for"]})
    s["cluster_wall"] = o_at - 0.8
    assert "early_fire" in check(run)["violations"]
    run = clean_run()
    gone = run["sink"].pop(6)
    for s in run["sink"]:
        s.pop("attempt")
    assert {x["occurrence"] for x in check(run)["violations"]["success_without_effect"]} == {
        gone["occurrence"]}


def test_catch_up_with_fewer_missed_instants_than_its_max_fires_them_all() -> None:
    """Two missed instants under catch_up_max=3 both fire (a real run showed this shape)."""
    def short_outage(fired: set[int]) -> dict[str, Any]:
        run = outage("catch_up", set())
        for occs in nodes_occ(run):
            for o in occs:
                t = ts_of(o) if o["kind"] == "scheduled" else None
                if t is not None and T0 + 14 <= t <= T0 + 28:
                    o.update(status="succeeded", reason=None,
                             created_at=iso(t + 3.5 if t in (T0 + 24, T0 + 26) else t - 0.5))
                    if t in (T0 + 24, T0 + 26) and t not in fired:
                        o.update(status="skipped", reason="misfire")
        return run

    assert "misfire_policy" not in check(short_outage({T0 + 24, T0 + 26}))["violations"]
    assert "misfire_policy" in check(short_outage({T0 + 26}))["violations"]


def unknown_edit_run(*bodies: str) -> dict[str, Any]:
    """An edit to */3 whose answer was lost (type info, If-Match version 1), committed as
    version 2: found in a real ci run (seed 801648)."""
    run = clean_run()
    for i, cron in enumerate(bodies):
        run["history"] += hist_op(30 + i, "edit", "info", T0 + 20, job="j", key=f"e{i}",
                                  expected_version=1, body={"schedule": {"cron": cron}})
    for occs in nodes_occ(run):
        occs[:] = [o for o in occs if o["kind"] != "scheduled" or ts_of(o) <= T0 + 20]
        occs += [occ(t, version=2) for t in range(T0 + 21, END + 6) if t % 3 == 0]
    add_effects(run, [occ(t, version=2) for t in range(T0 + 21, END + 6) if t % 3 == 0])
    for node in run["final"]["nodes"].values():  # the final read shows a later version
        node["jobs"][0].update(version=3)
    return run


def test_edit_with_a_lost_answer_is_known_from_its_body() -> None:
    run = unknown_edit_run("*/3 * * * * *")
    assert check(run)["violations"] == {}
    for occs in nodes_occ(run):
        occs[:] = [o for o in occs if o["scheduled_for"] != iso(T0 + 31)]
    lost = check(run)["violations"]["lost_instant"]
    assert {x["scheduled_for"] for x in lost} == {iso(T0 + 31)}


def test_two_lost_edits_that_disagree_leave_the_version_unknown() -> None:
    run = unknown_edit_run("*/3 * * * * *", "*/2 * * * * *")
    assert "version_unknown" in check(run)["violations"]


@pytest.mark.parametrize(("fired", "ok"), [({T0 + 26}, True), (set(), False)])
def test_a_job_created_without_a_misfire_policy_is_checked_against_the_products_default(
        fired: set[int], ok: bool) -> None:
    """Jobs default to run_once: the latest missed instant fires. The checker once took
    `skip` as the default and called 576 correct late runs of a chaos run violations."""
    run = outage("run_once", fired)
    for h in run["history"]:
        if h.get("f") == "create":
            h["spec"] = {k: v for k, v in h["spec"].items() if k != "misfire_policy"}
    for node in run["final"]["nodes"].values():
        for job in node.get("jobs", []):
            job.pop("misfire_policy", None)
    v = check(run)["violations"]
    assert ("misfire_policy" not in v) is ok, v.get("misfire_policy")


def _worker_clock_bump(run: dict[str, Any], at: float, offset_ms: int) -> None:
    run["history"] += [
        {"seed": 7, "process": "nemesis", "type": "start", "f": "clock-bump-worker", "op": 90,
         "cluster_wall": at, "wall": at, "mono": 0, "targets": ["w1"], "offset_ms": offset_ms},
        {"seed": 7, "process": "nemesis", "type": "stop", "f": "clock-bump-worker", "op": 90,
         "cluster_wall": at + 8, "wall": at + 8, "mono": 0, "targets": ["w1"]}]


def test_a_run_leased_ahead_and_started_early_under_a_worker_clock_bump_is_flagged() -> None:
    """A worker 4 s ahead that trusted its own clock for a run leased ahead: the effect
    reached the sink 4 s before the instant, which the early-fire check must flag."""
    run = clean_run()
    _worker_clock_bump(run, T0 + 20, 4_096)
    s = run["sink"][13]
    instant = ts_of({"scheduled_for": s["scheduled_for"]})
    assert T0 + 20 < instant < T0 + 28
    run["final"]["attempts"]["n1"][s["occurrence"]][0]["leased_at"] = iso(instant - 1.5)
    s["cluster_wall"] = instant - 4.096 + 0.01
    result = check_run(run, required_coverage=("worker_clock_skew",))
    [v] = result["violations"]["early_fire"]
    assert v["occurrence"] == s["occurrence"] and v["early_s"] == pytest.approx(4.086, abs=1e-3)
    assert result["stats"]["coverage"]["worker_clock_skew"] == 1
    assert "coverage_missing" not in result["violations"]


def test_runs_leased_ahead_that_start_at_their_instant_under_a_worker_clock_bump_pass() -> None:
    run = clean_run()
    _worker_clock_bump(run, T0 + 20, -4_096)
    for attempts in run["final"]["attempts"]["n1"].values():
        attempts[0]["leased_at"] = iso(datetime.fromisoformat(
            attempts[0]["leased_at"].replace("Z", "+00:00")).timestamp() - 1.0)
    assert check_run(run, required_coverage=("worker_clock_skew",))["violations"] == {}


@pytest.mark.parametrize("seed", [101, 1801, 8675309])
def test_the_ci_plan_bumps_a_workers_clock_on_top_of_a_node_fault(seed: int) -> None:
    from chaos.nemesis import PAIR_FIRST_KINDS, plan

    schedule = plan(seed, "ci", 300)
    [host] = [p for p in schedule if p.partner is not None]
    assert host.partner.kind == "clock-bump-worker" and host.kind in PAIR_FIRST_KINDS
    assert 0 <= host.partner_after_s <= host.duration_s * 0.3
    assert host.partner_after_s + host.partner.duration_s == pytest.approx(host.duration_s)
    assert "clock-bump-worker" not in [p.kind for p in schedule]


def test_an_early_start_before_a_slow_jobs_sleep_is_caught() -> None:
    """A slow job posts a start record before its sleep (issue 37, item 5): a run started
    2 s early whose effect, after a 3 s sleep, reached the sink after its instant is an
    early start, as is a group job whose hold began early. Judged on the effect alone,
    both were valid."""
    for start in ({"event": "start"}, {"event": "hold", "phase": "start", "group": "g"}):
        run = clean_run()
        s = run["sink"][4]
        instant = ts_of({"scheduled_for": s["scheduled_for"]})
        s["cluster_wall"] = instant + 1.0
        assert check(run)["violations"] == {}
        run["sink"].append({**{k: s[k] for k in ("occurrence", "job", "attempt",
                                                 "scheduled_for", "token")},
                            **start, "seq": s["seq"] - 1, "cluster_wall": instant - 2.0})
        [flagged] = check(run)["violations"]["early_fire"]
        assert flagged["measured_at"] == start["event"] and flagged["early_s"] == 2.0


def test_digests_disagreeing_at_a_mark_during_the_run_are_caught() -> None:
    """Issue 37, item 7: members compared at marks while the faults run, not only at the
    end; a member that answered another digest at one index diverged, even if retention
    pruned what differed before the final barrier."""
    run = clean_run()
    run["history"].append(periodic_mark(T0 + 30, ("n1", "n2", "n3"),
                                        n2={"index": 60, "digest": "other"}))
    [x] = check(run)["violations"]["mark_digest_divergence"]
    assert x["digests"] == {"n1": "d60", "n2": "other", "n3": "d60"}


def test_a_run_that_compared_too_few_marks_is_no_evidence() -> None:
    """A mark that only one member answered (the others cut off) compares nothing."""
    run = clean_run()
    run["history"] = [h for h in run["history"] if h.get("process") != "marks"]
    run["history"].append(periodic_mark(T0 + 8, ("n1",)))
    run["history"].append(periodic_mark(T0 + 9, ("n1", "n2"), n2={"error": "timeout"}))
    assert check(run)["violations"]["marks_not_compared"][0]["compared"] == 0


def test_members_that_observed_one_finished_occurrence_differently_are_caught() -> None:
    """Issue 37, item 7: each member's pruned history is judged on its own observation;
    two members that saw one finished occurrence end differently diverged."""
    run = clean_run()
    o = run["final"]["nodes"]["n1"]["occurrences"][2]
    run["observed"] = [
        {"node": n, "cluster_wall": T0 + 20, "occurrences": [{**o, "status": status}]}
        for n, status in (("n1", "succeeded"), ("n2", "failed"))]
    [x] = check(run)["violations"]["observed_divergence"]
    assert x["occurrence"] == o["id"] and x["states"] == {"n1": "succeeded", "n2": "failed"}


def test_runs_leased_ahead_and_by_the_herd_path_are_required_coverage() -> None:
    """Issue 37, item 9: a run leased before its instant, and a herd run leased further
    ahead than ordinary dispatch goes, are coverage kinds: a run without them did not
    exercise those paths under faults."""
    run = clean_run()
    kinds = ("leased_ahead", "herd_leased_ahead")
    missing = {x["kind"] for x in check_run(run, required_coverage=kinds)["violations"][
        "coverage_missing"]}
    assert missing == set(kinds)
    occs = run["final"]["nodes"]["n1"]["occurrences"]
    attempts = run["final"]["attempts"]["n1"]
    early = occs[3]
    attempts[early["id"]][0]["leased_at"] = iso(ts_of(early) - 1.0)
    coverage = check_run(run, required_coverage=kinds)["stats"]["coverage"]
    assert (coverage["leased_ahead"], coverage["herd_leased_ahead"]) == (1, 0)
    for nid in run["final"]["nodes"]:
        for o in run["final"]["nodes"][nid]["occurrences"]:
            if o["id"] == early["id"]:
                o["job_id"] = "herd-007"
    attempts[early["id"]][0]["leased_at"] = iso(ts_of(early) - 6.0)
    coverage = check_run(run, required_coverage=kinds)["stats"]["coverage"]
    assert (coverage["leased_ahead"], coverage["herd_leased_ahead"]) == (1, 1)


LIFECYCLE_KINDS = ("pause_in_fault", "cancel_in_fault", "delete_in_fault",
                   "membership_in_fault", "before_start_skips")


def test_operations_inside_fault_windows_are_required_coverage() -> None:
    """Issue 37, item 9: pause, cancel, delete and a membership change inside a fault
    window, and a run skipped by the check before its start, are coverage kinds. The clean
    run's kill-leader window is T0+12..T0+16; its membership change starts at T0+18."""
    run = clean_run()
    coverage = check_run(run, required_coverage=LIFECYCLE_KINDS)["stats"]["coverage"]
    assert [coverage[k] for k in LIFECYCLE_KINDS] == [0, 0, 0, 0, 0]
    run["history"] += hist_op(901, "pause", "ok", T0 + 13, job="j")
    run["history"] += hist_op(902, "cancel", "ok", T0 + 14, job="j", occurrence="x@y")
    run["history"] += hist_op(903, "delete", "fail", T0 + 14, job="j")  # refused: not counted
    run["history"] += hist_op(904, "delete", "ok", T0 + 20, job="j")  # outside: not counted
    for h in run["history"]:
        if h.get("process") == "membership" and h.get("type") == "invoke":
            h["cluster_wall"] = T0 + 15
    skipped = run["final"]["nodes"]["n1"]["occurrences"][4]
    skipped.update(status="skipped", reason="paused")
    coverage = check_run(run, required_coverage=LIFECYCLE_KINDS)["stats"]["coverage"]
    assert [coverage[k] for k in LIFECYCLE_KINDS] == [1, 1, 0, 1, 1]


def test_a_deleted_job_owes_no_instant_after_its_deletion() -> None:
    """A job deleted mid-run (chaos/workload.py deletes one inside a fault window) has no
    instants after the delete: not lost. Before it, every instant is still required."""
    run = clean_run()
    for node in run["final"]["nodes"].values():
        node["occurrences"] = [o for o in node["occurrences"]
                               if o["kind"] != "scheduled" or ts_of(o) < T0 + 20]
    run["sink"] = [s for s in run["sink"] if ts_of({"scheduled_for": s["scheduled_for"]})
                   < T0 + 20 or "manual" in s["occurrence"]]
    assert "lost_instant" in check(run)["violations"]
    run["history"] += hist_op(905, "delete", "ok", T0 + 19.5, job="j")
    assert "lost_instant" not in check(run)["violations"]
    for node in run["final"]["nodes"].values():  # one instant before the delete lost
        node["occurrences"] = [o for o in node["occurrences"]
                               if o["kind"] != "scheduled" or ts_of(o) != T0 + 10]
    assert "lost_instant" in check(run)["violations"]


def test_a_job_the_run_deleted_is_no_lost_acknowledgement() -> None:
    run = clean_run()
    for node in run["final"]["nodes"].values():
        node["jobs"] = []
    assert "lost_ack" in check(run)["violations"]
    run["history"] += hist_op(906, "delete", "info", END - 1, job="j")  # answer lost
    assert "lost_ack" not in check(run)["violations"]


def _record_start(run: dict[str, Any], index: int, late_s: float) -> dict[str, Any]:
    """Give the index-th occurrence's attempt a recorded start `late_s` after its effect
    reached the sink (the clean run's offers arrive 0.2 s after each instant)."""
    o = nodes_occ(run)[0][index]
    attempt = run["final"]["attempts"]["n1"][o["id"]][0]
    attempt["started_at"] = iso(ts_of(o) + 0.2 + late_s)
    return attempt


def test_a_start_recorded_after_the_runs_effect_is_flagged() -> None:
    run = clean_run()
    late = _record_start(run, 3, late_s=2.0)
    _record_start(run, 4, late_s=0.9)  # within the slack: the instant's raise, the stamp
    _record_start(run, 5, late_s=-3.0)  # early: raised to the instant by the record
    result = check(run)
    [v] = result["violations"]["start_recorded_late"]
    assert v["attempt"] == late["id"] and v["late_s"] == 2.0
    assert result["stats"]["starts_judged"] == 3


@pytest.mark.parametrize("kind, judged", [("clock-bump", False), ("clock-bump-leader", False),
                                          ("clock-strobe", False), ("clock-bump-worker", True)])
def test_a_fault_moving_a_nodes_clock_excuses_a_late_start_and_the_workers_does_not(
        kind: str, judged: bool) -> None:
    """A worker reads the cluster's clock on a node: a skewed node moves its reports until
    its next probe. Its own wall clock stepping moves nothing it reports."""
    run = clean_run()
    o = nodes_occ(run)[0][3]
    _record_start(run, 3, late_s=16.0)
    run["history"] += [nemesis("start", kind, 50, ts_of(o) - 1, targets=["n1"]),
                       nemesis("stop", kind, 50, ts_of(o) + 3)]
    run["history"][3]["kinds"] += [kind]
    found = check(run)["violations"].get("start_recorded_late", [])
    assert len(found) == (1 if judged else 0)
