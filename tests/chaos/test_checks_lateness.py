"""Lateness is a violation outside fault windows (issue 37, item 6): a run claimed and
leased on time whose job started 8 s late is flagged; the same wait inside a fault
window, on a worker whose slots were all busy, or behind the lossy proxy is not."""

from __future__ import annotations

from typing import Any

from chaos.workload import effect_cmd
from tests.chaos.test_checker import JOB_SPEC, T0, check, clean_run, iso, offer, ts_of

# The instant whose run starts late: the synthetic run's faults, membership change and
# backup check excuse everything from T0 + 11 on.
LATE_AT = T0 + 2


def late_run(delay_s: float = 8.0, *, worker: str = "w1") -> dict[str, Any]:
    run = clean_run()
    s = next(s for s in run["sink"] if s["scheduled_for"] == iso(LATE_AT))
    s.update(cluster_wall=LATE_AT + delay_s, worker=worker)
    return run


def test_a_run_started_8_s_late_outside_any_fault_is_flagged() -> None:
    summary = check(late_run())
    v = summary["violations"]
    assert set(v) == {"late_start"}
    [x] = v["late_start"]
    assert x["occurrence"] == f"j@{iso(LATE_AT)}" and x["late_s"] == 8.0
    assert summary["stats"]["lateness"]["judged"] >= 5


def test_a_start_within_the_bound_is_not_late() -> None:
    assert check(late_run(1.5))["violations"] == {}


def test_lateness_inside_a_fault_window_is_excused() -> None:
    run = late_run()
    run["history"] += [{"seed": 7, "process": "nemesis", "type": t, "f": "pause-leader",
                        "op": 50, "cluster_wall": at, "wall": at, "mono": 0, "targets": ["n1"]}
                       for t, at in (("invoke", LATE_AT + 3), ("start", LATE_AT + 3),
                                     ("stop", LATE_AT + 5))]
    run["history"][3]["kinds"].append("pause-leader")
    summary = check(run)
    assert summary["violations"] == {}
    assert summary["stats"]["lateness"]["excused"]["fault_window"] >= 1


def test_a_run_that_waited_for_a_busy_workers_slot_is_excused() -> None:
    run = late_run(4.0)
    occs = [o for o in run["final"]["nodes"]["n1"]["occurrences"] if o["kind"] == "scheduled"]
    for i in range(6):  # six runs hold w1's slots until just before the late one starts
        o = {**occs[0], "id": f"busy-{i}@{iso(LATE_AT)}", "job_id": f"busy-{i}"}
        aid = o["id"] + "~1"
        run["final"]["attempts"]["n1"][o["id"]] = [
            {"id": aid, "number": 1, "status": "succeeded", "fencing_token": 7_000 + i,
             "leased_at": iso(LATE_AT), "finished_at": iso(LATE_AT + 3.9), "worker_id": "w1"}]
        run["sink"].append({**offer(20_000 + i, o, aid, 7_000 + i, LATE_AT + 0.5),
                            "worker": "w1", "scheduled_for": None})
    summary = check(run)
    assert "late_start" not in summary["violations"]
    assert summary["stats"]["lateness"]["excused"]["worker_saturated"] == 1


def test_a_worker_behind_the_lossy_proxy_is_excused() -> None:
    assert check(late_run(worker="w3-proxied"))["violations"] == {}


def test_the_commands_own_sleep_is_not_lateness() -> None:
    run = clean_run()
    for h in run["history"]:
        if h.get("f") == "create":
            h["spec"] = {**JOB_SPEC, "target": {"shell": effect_cmd(5)}}
    for s in run["sink"]:
        if s.get("scheduled_for"):
            s["cluster_wall"] = ts_of(s) + 5.4
    assert check(run)["violations"] == {}
