"""The chaos checker on small synthetic runs: each kind of violation is reported, and a
clean run reports none."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from chaos.checker import check_dir, check_run

T0 = 1_793_512_700  # 2026-11-01T05:58:20Z, an even second
END = T0 + 40
JOB_SPEC = {"id": "j", "schedule": {"cron": "*/2 * * * * *"}, "misfire_policy": "skip",
            "misfire_grace_s": 2, "overlap_policy": "allow", "target": {"shell": "true"}}


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


def clean_run() -> dict[str, Any]:
    occurrences = [occ(t) for t in range(T0 - 4, END + 6, 2)]
    attempts = {o["id"]: [{"id": o["id"] + "~1", "number": 1, "status": "succeeded",
                           "leased_at": iso(ts_of(o) + 0.01), "fencing_token": 3_000_000_001 + i}]
                for i, o in enumerate(occurrences)}
    history = hist_op(1, "create", "ok", T0 - 5, job="j", spec=JOB_SPEC,
                      response={"id": "j", "version": 1})
    history += hist_op(2, "trigger", "ok", T0 + 10, job="j", key="k1",
                       response={"id": "j@manual-1", "duplicate": False})
    history += [{"seed": 7, "process": "nemesis", "type": "start", "f": "kill-leader", "op": 3,
                 "cluster_wall": T0 + 12, "wall": T0 + 12, "mono": 0, "targets": ["n1"],
                 "leader": "n1", "epoch": 3, "term": 3},
                {"seed": 7, "process": "nemesis", "type": "stop", "f": "kill-leader", "op": 3,
                 "cluster_wall": T0 + 16, "wall": T0 + 16, "mono": 0}]
    manual = {"id": "j@manual-1", "job_id": "j", "kind": "manual", "scheduled_for": iso(T0 + 10),
              "job_version": 1, "status": "succeeded", "reason": None,
              "idempotency_key": "k1", "attempts": 1, "epoch": 3, "created_at": iso(T0 + 10)}
    node = {"cluster": {"term": 4}, "jobs": [{"id": "j", "version": 1,
                                             "schedule": {"cron": "*/2 * * * * *",
                                                          "timezone": "UTC", "dst_gap": "auto",
                                                          "dst_fold": "auto"}}],
            "occurrences": occurrences + [manual]}
    sink = [{"key": o["id"], "occurrence": o["id"], "job": "j", "attempt": o["id"] + "~1",
             "scheduled_for": o["scheduled_for"], "token": 3_000_000_001 + i,
             "verdict": "accept", "cluster_wall": ts_of(o) + 0.2}
            for i, o in enumerate(occurrences)]
    digest = {"last_applied_index": 99, "digest": "abc"}
    return {
        "meta": {"seed": 7, "profile": "ci", "final_reads_cluster_wall": END},
        "history": history,
        "final": {"nodes": {n: copy.deepcopy(node) for n in ("n1", "n2", "n3")},
                  "digests": {n: {"node_id": n, **digest} for n in ("n1", "n2", "n3")},
                  "attempts": {"n1": attempts}},
        "sink": sink, "proxy": [],
    }


def ts_of(o: dict[str, Any]) -> float:
    return datetime.fromisoformat(o["scheduled_for"].replace("Z", "+00:00")).timestamp()


def nodes_occ(run: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [n["occurrences"] for n in run["final"]["nodes"].values()]


def test_clean_run_reports_nothing() -> None:
    summary = check_run(clean_run())
    assert summary["violations"] == {}
    assert summary["verdict"]["valid"]
    assert summary["stats"]["failover"][0]["new_epoch"] is None


def test_duplicate_scheduled_occurrence() -> None:
    run = clean_run()
    extra = occ(T0 + 10)
    extra["id"] = "j@other-id"
    run["final"]["nodes"]["n2"]["occurrences"].append(extra)
    assert "duplicate_scheduled" in check_run(run)["violations"]


def test_duplicate_effect_in_sink() -> None:
    run = clean_run()
    first = run["sink"][3]
    run["sink"].append({**first, "occurrence": "j@copy", "key": "j@copy",
                        "attempt": "j@copy~1", "token": 4_000_000_001})
    assert "duplicate_sink" in check_run(run)["violations"]


def test_duplicate_manual_and_trigger_not_idempotent() -> None:
    run = clean_run()
    for occs in nodes_occ(run):
        dup = dict(next(o for o in occs if o["kind"] == "manual"), id="j@manual-2")
        occs.append(dup)
    run["history"] += hist_op(9, "trigger", "ok", T0 + 11, job="j", key="k1",
                              response={"id": "j@manual-2", "duplicate": True})
    v = check_run(run)["violations"]
    assert "duplicate_manual" in v
    assert "trigger_not_idempotent" in v


def test_lost_instant() -> None:
    run = clean_run()
    gone = iso(T0 + 20)
    for occs in nodes_occ(run):
        occs[:] = [o for o in occs if o["scheduled_for"] != gone]
    lost = check_run(run)["violations"]["lost_instant"]
    assert [x["scheduled_for"] for x in lost] == [gone]


def test_skipped_with_reason_is_not_lost_but_unknown_reason_is_flagged() -> None:
    run = clean_run()
    for occs in nodes_occ(run):
        for o in occs:
            if o["scheduled_for"] == iso(T0 + 20):
                o.update(status="skipped", reason="misfire", created_at=iso(T0 + 25))
            if o["scheduled_for"] == iso(T0 + 22):
                o.update(status="skipped", reason="because")
    v = check_run(run)["violations"]
    assert "lost_instant" not in v
    assert [x["reason"] for x in v["unexplained_skip"]] == ["because"]


def test_misfire_policy_contradictions() -> None:
    run = clean_run()
    for occs in nodes_occ(run):
        for o in occs:
            if o["scheduled_for"] == iso(T0 + 20):
                o.update(status="skipped", reason="misfire", created_at=iso(T0 + 20.5))
            if o["scheduled_for"] == iso(T0 + 24):
                o.update(created_at=iso(T0 + 30))  # fired 6 s late under skip, grace 2
    problems = {x["problem"] for x in check_run(run)["violations"]["misfire_policy"]}
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
    for node in run["final"]["nodes"].values():
        node["jobs"][0].update(version=2, schedule={**node["jobs"][0]["schedule"],
                                                    "cron": "*/3 * * * * *"})
    assert check_run(run)["violations"] == {}
    for occs in nodes_occ(run):
        occs[:] = [o for o in occs if o["scheduled_for"] != iso(edit_at + 10)
                   and o["scheduled_for"] != iso(edit_at + 10 - (edit_at + 10) % 3)]
    assert "lost_instant" in check_run(run)["violations"]


def test_sink_tokens_not_increasing_and_stale_writes_counted() -> None:
    run = clean_run()
    s = run["sink"][5]
    run["sink"].append({**s, "attempt": s["attempt"][:-1] + "2", "token": s["token"] + 10})
    run["sink"].append({**s, "attempt": s["attempt"][:-1] + "3", "token": s["token"] + 5})
    run["sink"].append({**s, "attempt": s["attempt"][:-1] + "4", "token": s["token"] + 1,
                        "verdict": "reject", "prev_max": s["token"] + 10})
    summary = check_run(run)
    assert "token_not_increasing" in summary["violations"]
    assert summary["stats"]["sink"]["stale_rejected"] == 1


def test_token_reused_by_two_attempts() -> None:
    run = clean_run()
    s = run["sink"][5]
    run["sink"].append({**s, "attempt": s["attempt"][:-1] + "2"})
    assert "token_reused" in check_run(run)["violations"]


def test_early_fire() -> None:
    run = clean_run()
    run["sink"][4]["cluster_wall"] -= 30
    assert "early_fire" in check_run(run)["violations"]


def test_rerun_after_success() -> None:
    run = clean_run()
    occ_id = next(iter(run["final"]["attempts"]["n1"]))
    run["final"]["attempts"]["n1"][occ_id].append(
        {"id": occ_id + "~2", "number": 2, "status": "running", "leased_at": None})
    assert "rerun_after_success" in check_run(run)["violations"]


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
    lost = check_run(run)["violations"]["lost_ack"]
    assert {x["op"] for x in lost} == {case}


def test_unknown_outcome_is_not_a_lost_ack() -> None:
    run = clean_run()
    run["history"] += hist_op(8, "trigger", "info", T0 + 12, job="j", key="k9")
    assert check_run(run)["violations"] == {}


def test_digest_divergence_only_at_equal_index() -> None:
    run = clean_run()
    run["final"]["digests"]["n2"]["digest"] = "other"
    assert "digest_divergence" in check_run(run)["violations"]
    run["final"]["digests"]["n2"]["last_applied_index"] = 98
    assert "digest_divergence" not in check_run(run)["violations"]


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
    assert "dst" not in check_run(run)["violations"]
    for occs in nodes_occ(run):
        occs.append(occ(fold + 5, job="dst-once"))
    dst = check_run(run)["violations"]["dst"]
    assert dst[0]["problem"].startswith("fired in the second pass")


def test_check_dir_writes_summary_and_report(tmp_path: Path) -> None:
    run = clean_run()
    (tmp_path / "meta.json").write_text(json.dumps(run["meta"]))
    (tmp_path / "final.json").write_text(json.dumps(run["final"]))
    (tmp_path / "history.jsonl").write_text("\n".join(json.dumps(h) for h in run["history"]))
    (tmp_path / "sink.jsonl").write_text("\n".join(json.dumps(s) for s in run["sink"]))
    summary = check_dir(tmp_path)
    assert summary["verdict"]["valid"]
    assert (tmp_path / "summary.json").exists()
    assert "VALID" in (tmp_path / "report.md").read_text()
