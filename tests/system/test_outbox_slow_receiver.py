"""One tenant's slow webhook receiver silences no one else (issue 40 §2).

Tenant `drip`'s receiver accepts every delivery and then sends its answer one byte every
2 s, for as long as the sender keeps listening. Tenant `prompt`'s receiver answers at once.
Both tenants have a job failing every second, so each has an `occurrence.failed` notice
due every second. Before, a delivery round waited for all its deliveries (and a read
timeout is not a request timeout), so the dripping receiver held every tenant's webhooks
for as long as it liked. Now each delivery runs on its own, with a deadline for the
whole request: all through a 60 s drip, each of `prompt`'s notices arrives within 2 s of
its row being committed.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftcron.testing import LocalCluster, wait_until
from tests.system.helpers import add_job
from tests.system.test_operability import Receiver

pytestmark = pytest.mark.system

DRIP_S = 60.0
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nContent-Type: text/plain\r\n\r\n"


class DrippingReceiver:
    """Accepts connections, reads each request's head, then answers one byte every 2 s."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        self.connections = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(65536)
                for i in range(len(ANSWER) + 100_000):
                    if self.stop.wait(2.0):
                        return
                    conn.sendall((ANSWER + b"x" * 100_000)[i:i + 1])
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def receivers() -> Iterator[tuple[DrippingReceiver, Receiver]]:
    drip, prompt = DrippingReceiver(), Receiver()
    try:
        yield drip, prompt
    finally:
        drip.close()
        prompt.close()


def test_a_dripping_receiver_does_not_delay_another_tenants_notices(
        tmp_path: Path, receivers: tuple[DrippingReceiver, Receiver]) -> None:
    drip, prompt = receivers
    c = LocalCluster(tmp_path)
    c.start()
    try:
        c.wait_leader(timeout=30)
        c.wait_serving()
        c.start_worker("w1")
        leader = c.wait_leader()
        # Every-second failures in both tenants: a notice due every second for each.
        add_job(c, leader, "drip-fails", tenant="drip", target={"shell": "false"},
                max_attempts=1, notify=[f"{drip.url}/hook/drip"])
        add_job(c, leader, "prompt-fails", tenant="prompt", target={"shell": "false"},
                max_attempts=1, notify=[f"{prompt.url}/hook/prompt"])
        wait_until(lambda: drip.connections >= 1, 30, message="the dripping receiver in use")
        started = time.time()
        time.sleep(DRIP_S)
        ended = time.time()
        # The drip is still going: the sender holds (or keeps opening) connections to it.
        assert drip.connections >= 1

        notices = [r for r in prompt.hooks()
                   if json.loads(r["body"])["event"] == "occurrence.failed"]
        during = [r for r in notices if started + 2 <= r["at"] <= ended]
        assert len(during) >= DRIP_S * 0.8, f"only {len(during)} notices in {DRIP_S:.0f} s"
        lateness = sorted(
            r["at"] - _iso_s(json.loads(r["body"])["created_at"]) for r in during)
        assert lateness[-1] <= 2.0, f"slowest notice {lateness[-1]:.2f} s after its row; " \
                                    f"median {lateness[len(lateness) // 2]:.2f} s"
        # Every notice committed in the window reached the prompt receiver.
        committed = {json.loads(r["body"])["id"] for r in notices}
        assert len(committed) == len(notices), "each notice once"
    finally:
        c.close()


def _iso_s(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
