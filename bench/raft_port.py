"""CPU the Raft thread spends per MiB a stranger streams at it, before and after the guard.

    python bench/raft_port.py [--sizes 2 4 8 16]

One connection over a socketpair, read by pysyncobj's own poller in this thread, while a
second thread streams `size` MiB after a 1 GiB length prefix (a message that never
completes). Measured with `time.thread_time` of the reading thread:

- pysyncobj 0.3.17 TcpConnection: `bytes +=` copies the whole buffer at every read;
- GuardedConnection, authenticated (a peer that knows the password, cap lifted for the
  measurement): the bytearray buffer, linear;
- GuardedConnection, unauthenticated (a stranger): closed on the length prefix.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pysyncobj.poller import createPoller  # noqa: E402
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection  # noqa: E402

from raftcron.cluster.transport import GuardedConnection, PortLimits, PortStats  # noqa: E402

CHUNK = 1 << 16


def stream(sock: socket.socket, total: int) -> None:
    sock.sendall(struct.pack("i", 1 << 30))
    junk = b"\xa5" * CHUNK
    sent = 0
    try:
        while sent < total:
            sock.sendall(junk)
            sent += CHUNK
    except OSError:
        pass  # closed by the reader
    finally:
        sock.close()


def read_cpu(kind: str, mib: int) -> tuple[float, int]:
    """(reader thread CPU seconds, bytes the reader saw before the stream ended)."""
    poller = createPoller("auto")
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    kwargs: dict[str, Any] = {"poller": poller, "socket": ours, "timeout": 3600.0}
    if kind == "pysyncobj":
        conn: TcpConnection = TcpConnection(**kwargs)
    else:
        limits = PortLimits(message_max_bytes=(1 << 31) - 1)
        conn = GuardedConnection(**kwargs, limits=limits, stats=PortStats())
        conn.authenticated = kind == "guarded, authenticated"
    sender = threading.Thread(target=stream, args=(theirs, mib << 20))
    started = time.thread_time()
    sender.start()
    while conn.state != CONNECTION_STATE.DISCONNECTED:
        poller.poll(0.05)  # the stream's end (EOF) disconnects
    took = time.thread_time() - started
    sender.join()
    return took, mib << 20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8, 16])
    args = parser.parse_args()
    print(f"{'reader':28} {'MiB':>5} {'CPU s':>8} {'CPU ms/MiB':>11}")
    for kind in ("pysyncobj", "guarded, authenticated", "guarded, unauthenticated"):
        for mib in args.sizes:
            took, _ = read_cpu(kind, mib)
            print(f"{kind:28} {mib:5d} {took:8.3f} {took * 1000 / mib:11.2f}", flush=True)


if __name__ == "__main__":
    main()
