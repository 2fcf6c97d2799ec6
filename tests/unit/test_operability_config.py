"""Operability configuration keys/flags and the herd computation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raftcron.api.status import compute_herd
from raftcron.cli.main import build_parser
from raftcron.config import ConfigError, load_config
from raftcron.core.model import parse_job

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def write(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "s").write_text("x" * 32)
    path = tmp_path / "n.toml"
    path.write_text(f'{extra}\nnode_id = "n1"\ndata_dir = "d"\nraft_addr = "127.0.0.1:1"\n'
                    'http_port = 2\nsecret_file = "s"\ntokens_file = "t.json"\n')
    return path


def test_webhooks_merge_config_and_flags_and_secret_never_defaults_to_cluster(
        tmp_path: Path) -> None:
    cfg = load_config(str(write(tmp_path, 'webhooks = ["http://a/h"]')),
                      {"webhooks": ["http://b/h", "http://a/h"]})
    assert cfg.webhooks == ("http://a/h", "http://b/h")
    assert cfg.read_secret() == "x" * 32
    # Without a file, the generated cluster webhook key signs (leader.webhook_keys).
    assert cfg.read_webhook_secret() is None
    (tmp_path / "w").write_text("hook\n")
    cfg = load_config(str(write(tmp_path, 'webhook_secret_file = "w"\n'
                                          'watchdog_url = "http://dog/ping"')))
    assert cfg.read_webhook_secret() == b"hook" and cfg.watchdog_url == "http://dog/ping"


@pytest.mark.parametrize("extra", ['webhooks = ["ftp://x"]', 'webhooks = "http://x"',
                                   'watchdog_url = "nope"', "tick_stale_s = -1",
                                   'watchdog_method = "PUT"'])
def test_bad_operability_config_is_a_config_error(tmp_path: Path, extra: str) -> None:
    with pytest.raises(ConfigError):
        load_config(str(write(tmp_path, extra)))


@pytest.mark.parametrize("port", [0, 70000, -5])
def test_an_http_port_out_of_range_is_a_config_error(tmp_path: Path, port: int) -> None:
    with pytest.raises(ConfigError, match="port number"):
        load_config(str(write(tmp_path)), {"http_port": port})


@pytest.mark.parametrize("raft_addr, says", [("127.0.0.1", "host:port"),
                                              ("127.0.0.1:99999", "port must be")])
def test_a_raft_address_that_cannot_be_bound_is_a_config_error(
        tmp_path: Path, raft_addr: str, says: str) -> None:
    config = load_config(str(write(tmp_path)), {"raft_addr": raft_addr})
    with pytest.raises(ConfigError, match=says):
        config.check_ports_free()


def test_node_flags() -> None:
    args = build_parser().parse_args(
        ["node", "--config", "c", "--webhook", "http://a", "--webhook", "http://b",
         "--watchdog-url", "http://w", "--webhook-secret-file", "f"])
    assert args.webhook == ["http://a", "http://b"] and args.watchdog_url == "http://w"


def spec(job_id: str, cron: str, **kw: object) -> str:
    return json.dumps(parse_job({"id": job_id, "schedule": {"cron": cron},
                                 "target": {"shell": "true"}, **kw}).to_spec())


def test_herd_counts_per_minute_and_caps_work() -> None:
    herd = compute_herd([spec("a", "*/15 * * * *"), spec("b", "0 * * * *")], T0, 24, 60)
    assert len(herd["counts"]) == 1440 and herd["total"] == 96 + 24
    assert herd["counts"][0] == 2 and herd["counts"][15] == 1 and herd["counts"][1] == 0
    assert herd["peak"] == {"at": "2026-01-01T00:00:00Z", "count": 2}
    # A per-second job costs one step per minute (its 60 instants are counted at once):
    # a cap of 1,000 steps stops it after 1,000 of the day's 1,440 minutes.
    capped = compute_herd([spec("s", "* * * * * *")], T0, 24, 60, cap=1000)
    assert capped["truncated"] and capped["total"] == 1000 * 60


def test_outbox_give_up_defaults_to_a_day_and_takes_a_duration(tmp_path: Path) -> None:
    cfg = load_config(str(write(tmp_path)))
    assert (cfg.outbox_give_up_s, cfg.outbox_give_up_attempts) == (86400.0, None)
    cfg = load_config(str(write(tmp_path, 'outbox_give_up = "2h"\noutbox_give_up_attempts = 5')))
    assert (cfg.outbox_give_up_s, cfg.outbox_give_up_attempts) == (7200.0, 5)


@pytest.mark.parametrize("extra", ['outbox_give_up = "soon"', 'outbox_give_up = "off"',
                                   "outbox_give_up = 0", "outbox_give_up_attempts = 0",
                                   'outbox_give_up_attempts = "3"',
                                   "outbox_give_up_attempts = true"])
def test_bad_outbox_give_up_is_a_config_error(tmp_path: Path, extra: str) -> None:
    with pytest.raises(ConfigError, match="outbox_give_up"):
        load_config(str(write(tmp_path, extra)))


def test_lease_ahead_horizons_default_and_bounds(tmp_path: Path) -> None:
    cfg = load_config(str(write(tmp_path)))
    assert (cfg.lease_ahead_s, cfg.lease_ahead_herd_s) == (2.0, 10.0)  # ahead: on
    cfg = load_config(str(write(tmp_path, "lease_ahead_s = 0\nlease_ahead_herd_s = 4")))
    assert (cfg.lease_ahead_s, cfg.lease_ahead_herd_s) == (0.0, 4.0)
    for bad in ("lease_ahead_s = -1", "lease_ahead_s = 11", 'lease_ahead_s = "2s"',
                "lease_ahead_s = true", "lease_ahead_herd_s = 60"):
        with pytest.raises(ConfigError, match="lease_ahead"):
            load_config(str(write(tmp_path, bad)))


def test_lease_ahead_herd_max_defaults_to_the_herd_lead_and_is_bounded(tmp_path: Path) -> None:
    """By default a large herd goes no further than lease_ahead_herd_s; the cap is at
    least that and at most 60 s."""
    assert load_config(str(write(tmp_path))).lease_ahead_herd_max_s == 10.0
    cfg = load_config(str(write(tmp_path, "lease_ahead_herd_s = 4")))
    assert cfg.lease_ahead_herd_max_s == 4.0
    cfg = load_config(str(write(tmp_path, "lease_ahead_herd_max_s = 60")))
    assert (cfg.lease_ahead_herd_s, cfg.lease_ahead_herd_max_s) == (10.0, 60.0)
    for bad in ("lease_ahead_herd_max_s = 9", "lease_ahead_herd_max_s = 60.5",
                "lease_ahead_herd_max_s = -1", 'lease_ahead_herd_max_s = "60"',
                "lease_ahead_herd_max_s = true",
                "lease_ahead_herd_s = 8\nlease_ahead_herd_max_s = 7"):
        with pytest.raises(ConfigError, match="lease_ahead_herd_max_s"):
            load_config(str(write(tmp_path, bad)))


def test_herd_size_default_and_bounds(tmp_path: Path) -> None:
    assert load_config(str(write(tmp_path))).herd_size == 1000
    assert load_config(str(write(tmp_path, "herd_size = 100"))).herd_size == 100
    for bad in ("herd_size = 1", "herd_size = 0", 'herd_size = "100"', "herd_size = 1.5",
                "herd_size = true", "herd_size = 100000000"):
        with pytest.raises(ConfigError, match="herd_size"):
            load_config(str(write(tmp_path, bad)))
