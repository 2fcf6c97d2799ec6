"""Network namespaces for a chaos run, and nftables partitions inside them.

Layout (per run, names carry a short per-run prefix so parallel runs do not collide):
a switch namespace `<p>sw` holding bridge br0; node namespaces `<p>n1..n4` at
10.77.0.11-14 (n4: the spare slot a membership change adds); a client namespace `<p>cl` at
10.77.0.20 where the harness, workers, sink and proxy run. Nothing is added to the root
namespace. A partition is a `table inet chaos` inside a node namespace (heal = delete the
table).
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass

SUBNET = "10.77.0"
CLIENT_IP = f"{SUBNET}.20"


def node_ip(index: int) -> str:
    return f"{SUBNET}.{10 + index}"


def sh(*args: str, check: bool = True, input_: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), check=check, capture_output=True, text=True,
                          input=input_)


@dataclass
class Netns:
    prefix: str
    nodes: int = 4  # three voters and one spare slot

    @property
    def switch(self) -> str:
        return f"{self.prefix}sw"

    @property
    def client(self) -> str:
        return f"{self.prefix}cl"

    def node(self, index: int) -> str:
        return f"{self.prefix}n{index}"

    def all_names(self) -> list[str]:
        return [self.switch, self.client] + [self.node(i) for i in range(1, self.nodes + 1)]

    def setup(self) -> None:
        self.teardown()
        sh("ip", "netns", "add", self.switch)
        sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        members = [(self.node(i), node_ip(i), f"v{i}") for i in range(1, self.nodes + 1)]
        members.append((self.client, CLIENT_IP, "vc"))
        for ns, ip, veth in members:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", veth,
               "netns", self.switch)
            sh("ip", "-n", self.switch, "link", "set", veth, "master", "br0")
            sh("ip", "-n", self.switch, "link", "set", veth, "up")
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")

    def teardown(self) -> None:
        """Kill whatever still runs inside our namespaces, then delete them."""
        existing = set(sh("ip", "netns", "list", check=False).stdout.split())
        for ns in self.all_names():
            if ns not in existing:
                continue
            pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGCONT)
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", ns, check=False)

    # --- partitions ------------------------------------------------------------------

    def _nft(self, index: int, ruleset: str) -> None:
        self.heal_node(index)
        sh("ip", "netns", "exec", self.node(index), "nft", "-f", "-", input_=ruleset)

    def isolate(self, index: int) -> None:
        """Drop every packet of node `index` except loopback (peers and clients alike)."""
        self._nft(index, "\n".join([
            "table inet chaos {",
            "  chain input {",
            "    type filter hook input priority 0; policy drop;",
            '    iif "lo" accept',
            "  }",
            "  chain output {",
            "    type filter hook output priority 0; policy drop;",
            '    oif "lo" accept',
            "  }",
            "}",
        ]) + "\n")

    def cut(self, index: int, others: list[int]) -> None:
        """Drop traffic between node `index` and the nodes `others` (rules on `index`)."""
        addrs = ", ".join(node_ip(o) for o in others)
        self._nft(index, "\n".join([
            "table inet chaos {",
            "  chain input {",
            "    type filter hook input priority 0; policy accept;",
            f"    ip saddr {{ {addrs} }} drop",
            "  }",
            "  chain output {",
            "    type filter hook output priority 0; policy accept;",
            f"    ip daddr {{ {addrs} }} drop",
            "  }",
            "}",
        ]) + "\n")

    def heal_node(self, index: int) -> None:
        sh("ip", "netns", "exec", self.node(index), "nft", "delete", "table", "inet", "chaos",
           check=False)

    def heal_all(self) -> None:
        for i in range(1, self.nodes + 1):
            self.heal_node(i)
