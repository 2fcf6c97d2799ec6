"""The chaos harness's member bookkeeping: a spare slot joins with a config naming the
current members, and only current members are served to workers and the proxy."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from chaos.history import History
from chaos.netns import Netns
from chaos.procs import Processes
from raftcron.config import load_config
from raftcron.core.ahead import DEFAULT_LEASE_AHEAD_S


def procs(tmp_path: Path) -> Processes:
    history = History(tmp_path / "history.jsonl", 1, 0.0)
    return Processes(tmp_path, Netns(prefix="rctest"), history, 0.0, spares=1)


def peers_of(path: Path) -> list[tuple[str, str, str]]:
    cfg = tomllib.loads(path.read_text())
    return [(p["id"], p["raft_addr"], p["http_url"]) for p in cfg["peers"]]


def test_the_spare_slot_is_not_a_member_until_it_joins(tmp_path: Path) -> None:
    p = procs(tmp_path)
    assert p.ids == ["n1", "n2", "n3"] and p.spares == ["n4"]
    assert "n4" not in p.configs
    assert len(p.proxy_urls()) == 3
    assert [n for n, *_ in peers_of(p.configs["n1"])] == ["n2", "n3"]


def test_a_joining_node_lists_the_current_members_as_its_peers(tmp_path: Path) -> None:
    p = procs(tmp_path)
    p.set_members(["n1", "n3"])
    cfg = p.write_joiner_config("n4")
    assert peers_of(cfg) == [("n1", "10.77.0.11:7000", "http://10.77.0.11:8700"),
                             ("n3", "10.77.0.13:7000", "http://10.77.0.13:8700")]
    own = tomllib.loads(cfg.read_text())
    assert (own["node_id"], own["raft_addr"], own["data_dir"]) == ("n4", "10.77.0.14:7000",
                                                                    "n4")
    p.set_members(["n1", "n3", "n4"])
    assert p.ids == ["n1", "n3", "n4"] and p.spares == []
    assert p.proxy_urls() == ["http://10.77.0.20:9201", "http://10.77.0.20:9203",
                              "http://10.77.0.20:9204"]


def test_the_nodes_lease_ahead_at_the_products_default_unless_the_run_says_otherwise(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without CHAOS_LEASE_AHEAD_S a chaos run tests what users run: dispatch ahead on, at
    the product's default. The variable still sets it in every node, joiners too."""
    monkeypatch.delenv("CHAOS_LEASE_AHEAD_S", raising=False)
    p = procs(tmp_path)
    assert load_config(str(p.configs["n1"])).lease_ahead_s == DEFAULT_LEASE_AHEAD_S > 0
    for value, want in (("0", 0.0), ("2.5", 2.5)):
        monkeypatch.setenv("CHAOS_LEASE_AHEAD_S", value)
        (tmp_path / value).mkdir()
        p = procs(tmp_path / value)
        got = [load_config(str(p.configs["n2"])).lease_ahead_s,
               load_config(str(p.write_joiner_config("n4"))).lease_ahead_s]
        assert got == [want, want], value
