"""`raftcron up`, the quick start's command: a local cluster that outlives a node's death
(the node is started again and catches up) and stops whole on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

from raftcron.ops.local import wait_for_leader, write_cluster_configs
from raftcron.testing import free_port_base, wait_until
from tests.system.helpers import as_from_a_terminal


def pids_of(needle: str) -> list[int]:
    """Processes whose command line holds `needle`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if needle.encode() in cmdline:
            out.append(int(entry))
    return out


def listen_addresses(port: int) -> set[str]:
    """The IPv4 addresses listening on `port` (from /proc/net/tcp, hex as the kernel has
    them: 0100007F is 127.0.0.1, 00000000 every interface)."""
    out = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        address, hex_port = fields[1].split(":")
        if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            out.add(address)
    return out


def test_up_restarts_a_killed_node_and_stops_whole_on_ctrl_c(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    base = free_port_base(3)
    out = tmp_path / "up.out"
    with open(out, "wb") as sink:
        up = subprocess.Popen(
            [sys.executable, "-m", "raftcron", "up", "--data-dir", str(data), "--port-base",
             str(base)], stdout=sink, stderr=subprocess.STDOUT,
            preexec_fn=as_from_a_terminal)
    try:
        wait_until(lambda: b"Ctrl-C stops" in out.read_bytes(), 60,
                   message="the cluster to start")
        token = (data / "admin.token").read_text().strip()
        n2_url = f"http://127.0.0.1:{base + 1}"
        assert wait_for_leader([n2_url], token, lambda: False, 45), "a leader"
        # A local cluster is reachable from this machine only, Raft ports included.
        for port in [base + i for i in range(3)] + [base + 100 + i for i in range(3)]:
            listening = wait_until(lambda p=port: listen_addresses(p), 45,
                                   message=f"port {port} to listen")
            assert listening == {"0100007F"}, port
        wait_until(lambda: pids_of("local-w1"), 45, message="the worker")
        n2_config = str(data / "n2.toml")
        [old] = pids_of(n2_config)
        os.kill(old, signal.SIGKILL)
        # The others go on (a leader is seen from n1) and n2 comes back as a new process.
        n1_url = f"http://127.0.0.1:{base}"
        assert wait_for_leader([n1_url], token, lambda: False, 45), "a leader seen by n1"
        wait_until(lambda: b"node n2 started again" in out.read_bytes(), 45,
                   message="n2 to start again")
        [new] = wait_until(lambda: pids_of(n2_config), 45, message="n2's new process")
        assert new != old
        assert wait_for_leader([n2_url], token, lambda: False, 45), "n2 to serve again"
        assert up.poll() is None
        up.send_signal(signal.SIGINT)
        assert up.wait(30) == 0
        assert b"raftcron: stopped" in out.read_bytes()
        assert pids_of(str(data)) == []  # no node or worker left behind
    finally:
        if up.poll() is None:
            up.kill()
        for pid in pids_of(str(data)):
            os.kill(pid, signal.SIGKILL)


def test_up_binds_an_older_configs_raft_port_where_that_config_says(tmp_path: Path) -> None:
    """A config written before the loopback binding gains one for its own raft_addr, even
    when `up` now runs with another --port-base."""
    configs = write_cluster_configs(tmp_path, 3, 9000)
    text = configs[1].read_text()
    configs[1].write_text(text[:text.index("[raft]")])  # as an older version wrote it
    write_cluster_configs(tmp_path, 3, 8700)
    config = tomllib.loads(configs[1].read_text())
    assert config["raft"]["bindAddress"] == config["raft_addr"] == "127.0.0.1:9101"
