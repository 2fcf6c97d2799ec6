"""Pruned history is judged too (issue 37, item 1): the observer records every attempt of
every occurrence in its band on every member, from the member's own state file, and the
fencing, duplicate, rerun and group checks read that record. Each bug below is planted on
an occurrence that retention pruned before the final reads, so only the observations show
it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from chaos.observe_db import db_path
from chaos.observer import BAND_OLD_S, Observer
from chaos.report_model import ts
from raftcron.state.db import open_writer
from tests.chaos.test_checker import T0, check, iso, offer, ts_of
from tests.chaos.test_checks_groups import GROUP, hold
from tests.chaos.test_checks_load import retention_run


def _ms(t: float) -> int:
    return int(round(t * 1000))


def write_state(path: Path, occs: list[dict[str, Any]],
                attempts: dict[str, list[dict[str, Any]]]) -> None:
    """A node's state file holding the given occurrences and attempts (product schema)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = open_writer(str(path))
    for o in occs:
        conn.execute(
            "INSERT INTO occurrences (id, job_id, tenant, queue, kind, scheduled_for_ms, "
            "dispatch_at_ms, job_version, status, reason, attempts, epoch, created_ms, "
            "finished_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (o["id"], o["job_id"], o.get("tenant", "default"), "default", o["kind"],
             _ms(o["t"]), _ms(o["t"]), 1, o["status"], o.get("reason"),
             len(attempts.get(o["id"], [])), 3, _ms(o["t"] - 0.5),
             _ms(o["finished"]) if o.get("finished") else None))
    for occ_id, lst in attempts.items():
        for a in lst:
            conn.execute(
                "INSERT INTO attempts (id, occurrence_id, job_id, tenant, queue, number, "
                "status, not_before_ms, worker_id, fencing_token, leased_ms, created_ms, "
                "finished_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (a["id"], occ_id, occ_id.split("@")[0], "default", "default", a["number"],
                 a["status"], _ms(a["leased"]), a.get("worker", "w1"), a["token"],
                 _ms(a["leased"]), _ms(a["leased"]), _ms(a["finished"])))
    conn.close()


def observer(tmp_path: Path, members: list[str]) -> Observer:
    return Observer(SimpleNamespace(ids=members), tmp_path, 0.0)  # type: ignore[arg-type]


def test_the_observer_records_every_attempt_of_every_member(tmp_path: Path) -> None:
    """Default-tenant occurrences too (the observer once kept only the quota tenant's
    attempts), with status, token, worker and times; one line per member; a member whose
    file cannot be read is a failed line, not a silent gap."""
    occ_id = f"j@{iso(T0)}"
    occs = [{"id": occ_id, "job_id": "j", "kind": "scheduled", "t": T0,
             "status": "succeeded", "finished": T0 + 1}]
    atts = {occ_id: [{"id": occ_id + "~1", "number": 1, "status": "succeeded",
                      "token": 77, "worker": "w2", "leased": T0 - 0.2, "finished": T0 + 1}]}
    for nid in ("n1", "n2"):
        write_state(db_path(tmp_path / "nodes", nid), occs, atts)
    lines = observer(tmp_path, ["n1", "n2", "n3"]).observe_once(at=T0 + BAND_OLD_S - 5)
    assert [line["node"] for line in lines] == ["n1", "n2", None]
    assert lines[2]["member"] == "n3" and "error" in lines[2]
    for line in lines[:2]:
        assert [o["id"] for o in line["occurrences"]] == [occ_id]
        [a] = line["attempts"][occ_id]
        assert (a["status"], a["fencing_token"], a["worker_id"]) == ("succeeded", 77, "w2")
        assert ts(a["leased_at"]) == T0 - 0.2 and ts(a["finished_at"]) == T0 + 1


def pruned(run: dict[str, Any], index: int = 3) -> dict[str, Any]:
    """The index-th occurrence that retention pruned (it is in the observation only)."""
    return run["observed"][0]["occurrences"][index]


def observe_attempts(run: dict[str, Any], occ_id: str, attempts: list[dict[str, Any]],
                     node: str = "n2") -> None:
    run["observed"][0]["node"] = node
    run["observed"][0]["attempts"][occ_id] = attempts


def att(occ_id: str, number: int, status: str, token: int, at: float) -> dict[str, Any]:
    return {"id": f"{occ_id}~{number}", "number": number, "status": status,
            "fencing_token": token, "leased_at": iso(at), "finished_at": iso(at + 1),
            "worker_id": "w1"}


def sink_offer_of(run: dict[str, Any], occ_id: str) -> dict[str, Any]:
    return next(s for s in run["sink"] if s.get("occurrence") == occ_id)


def test_a_double_effect_on_a_pruned_occurrence_is_caught() -> None:
    run = retention_run()
    o = pruned(run)
    first = sink_offer_of(run, o["id"])
    observe_attempts(run, o["id"], [att(o["id"], 1, "succeeded", first["token"], ts_of(o)),
                                    att(o["id"], 2, "succeeded", first["token"] + 50,
                                        ts_of(o) + 3)])
    run["sink"].append(offer(20_000, o, o["id"] + "~2", first["token"] + 50, ts_of(o) + 3))
    v = check(run)["violations"]
    assert [x["occurrence"] for x in v["double_effect"]] == [o["id"]]


def test_a_stale_write_credited_as_success_on_a_pruned_occurrence_is_caught() -> None:
    run = retention_run()
    o = pruned(run)
    first = sink_offer_of(run, o["id"])
    run["sink"].remove(first)
    observe_attempts(run, o["id"], [att(o["id"], 1, "succeeded", first["token"], ts_of(o)),
                                    att(o["id"], 2, "lost", first["token"] + 50,
                                        ts_of(o) + 3)])
    run["sink"] += [offer(20_000, o, o["id"] + "~2", first["token"] + 50, ts_of(o) + 3),
                    {**first, "seq": 20_001, "cluster_wall": ts_of(o) + 4}]
    v = check(run)["violations"]
    assert [x["attempt"] for x in v["stale_write"]] == [o["id"] + "~1"]


def test_a_rerun_after_success_on_a_pruned_occurrence_is_caught_on_its_node() -> None:
    run = retention_run()
    o = pruned(run)
    token = sink_offer_of(run, o["id"])["token"]
    observe_attempts(run, o["id"], [att(o["id"], 1, "succeeded", token, ts_of(o)),
                                    att(o["id"], 2, "failed", token + 50, ts_of(o) + 3)],
                     node="n3")
    v = check(run)["violations"]
    assert [(x["node"], x["occurrence"]) for x in v["rerun_after_success"]] == [
        ("n3", o["id"])]


def test_cluster_tokens_that_do_not_increase_on_a_pruned_occurrence_are_caught() -> None:
    run = retention_run()
    o = pruned(run)
    token = sink_offer_of(run, o["id"])["token"]
    observe_attempts(run, o["id"], [att(o["id"], 1, "lost", token, ts_of(o)),
                                    att(o["id"], 2, "lost", token - 5, ts_of(o) + 3)])
    v = check(run)["violations"]
    assert [x["occurrence"] for x in v["token_order"]] == [o["id"]]


def test_three_holders_of_a_group_of_two_on_pruned_occurrences_are_caught(
        tmp_path: Path) -> None:
    """End to end: the holders' attempts are only in the members' state files while the
    band is observed; the observer's lines are what the checker judges."""
    run = retention_run()
    run["history"].append({"seed": 7, "process": "client", "type": "invoke", "f": "group",
                           "op": 70, "group": GROUP, "body": {"limit": 2},
                           "cluster_wall": T0 - 7, "wall": T0 - 7, "mono": 0})
    run["history"].append({"seed": 7, "process": "client", "type": "ok", "f": "group",
                           "op": 70, "group": GROUP, "cluster_wall": T0 - 6.9,
                           "wall": T0 - 6.9, "mono": 0})
    occs, atts = [], {}
    for i in range(3):
        occ_id = f"group-{i}@{iso(T0 - 4)}"
        occs.append({"id": occ_id, "job_id": f"group-{i}", "kind": "scheduled", "t": T0 - 4,
                     "status": "succeeded", "finished": T0 - 3})
        atts[occ_id] = [{"id": occ_id + "~1", "number": 1, "status": "succeeded",
                         "token": 900 + i, "leased": T0 - 4.2, "finished": T0 - 3}]
        run["sink"] += [hold(30_000 + i, occ_id + "~1", 900 + i, "start"),
                        hold(30_010 + i, occ_id + "~1", 900 + i, "end")]
    for nid in ("n1", "n2", "n3"):
        write_state(db_path(tmp_path / "nodes", nid), occs, atts)
    lines = observer(tmp_path, ["n1", "n2", "n3"]).observe_once(at=T0 - 4 + BAND_OLD_S - 1)
    for line in lines:
        line.update(since=T0 - 20, until=T0 + 22)  # the band of the run's own observation
    run["observed"] += lines
    v = check(run)["violations"]
    assert set(v) == {"group_limit_exceeded"}
    assert v["group_limit_exceeded"][0]["holders"] == sorted(a + "~1" for a in atts)
