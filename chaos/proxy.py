"""Ack-loss proxy between one worker and the API: forwards each request, and with some
probability drops the response after the upstream answered (the command is committed,
the worker never learns it: "timeout after commit"). A dropped lease answer leaves a
lease nobody acknowledges: it is released after the job's ack_timeout_s and leased again
(a worker leasing without acknowledgements waits out its heartbeat deadline instead); a
dropped completion answer makes the worker resend the identical completion.

One listening port per node (`--map LISTEN_PORT=UPSTREAM_URL`). The drop probability is
read from `--control` (a file holding a float) on every request, so the harness can raise
it during an `ack-loss` nemesis window.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from typing import Any

import httpx

DROPPABLE = ("/v1/leases", "/v1/completions", "/v1/heartbeats", "/v1/releases")


class Proxy:
    def __init__(self, host: str, mapping: dict[int, str], control: str, log_path: str,
                 seed: int) -> None:
        self.host = host
        self.mapping = mapping
        self.control = control
        self.log = open(log_path, "a", buffering=1)
        self.rng = random.Random(seed)
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=3.0))

    def drop_probability(self) -> float:
        try:
            with open(self.control) as f:
                return float(f.read().strip() or 0)
        except (OSError, ValueError):
            return 0.0

    def write(self, **rec: Any) -> None:
        rec.update(wall=round(time.time(), 6), mono=round(time.monotonic(), 6))
        self.log.write(json.dumps(rec, sort_keys=True) + "\n")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     upstream: str) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = b""
                if int(headers.get("content-length", "0") or 0):
                    body = await reader.readexactly(int(headers["content-length"]))
                fwd = {k: v for k, v in headers.items()
                       if k in ("content-type", "authorization", "idempotency-key")}
                try:
                    resp = await self.client.request(method, upstream + path, content=body,
                                                     headers=fwd)
                    status, content = resp.status_code, resp.content
                except httpx.HTTPError as e:
                    status, content = 502, json.dumps(
                        {"error": {"code": "bad_gateway", "message": type(e).__name__}}).encode()
                p = self.drop_probability()
                if (path.split("?")[0].startswith(DROPPABLE) and 200 <= status < 300
                        and self.rng.random() < p):
                    self.write(event="drop", path=path, upstream=upstream, status=status,
                               request=_summary(body), response=_summary(content))
                    writer.transport.abort()
                    return
                writer.write(
                    f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(content)}\r\n\r\n".encode() + content)
                await writer.drain()
        except (ConnectionError, ValueError):
            return
        finally:
            writer.close()

    async def serve(self) -> None:
        # The first line proves the proxy ran: the checker treats an empty log as missing.
        self.write(event="start", ports=sorted(self.mapping))
        servers = []
        for port, upstream in self.mapping.items():
            async def cb(r: asyncio.StreamReader, w: asyncio.StreamWriter,
                         up: str = upstream) -> None:
                await self.handle(r, w, up)

            servers.append(await asyncio.start_server(cb, self.host, port))
        await asyncio.gather(*(s.serve_forever() for s in servers))


def _summary(raw: bytes) -> Any:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if isinstance(data, dict):
        for key in ("leases", "completions", "attempts", "results"):
            if key in data and isinstance(data[key], list):
                return {key: [
                    {k: item.get(k) for k in ("attempt_id", "fencing_token", "outcome", "ok",
                                              "status", "duplicate", "code")
                     if isinstance(item, dict) and k in item}
                    for item in data[key]]}
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", required=True)
    ap.add_argument("--map", action="append", required=True, help="PORT=UPSTREAM_URL")
    ap.add_argument("--control", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    mapping = {int(m.split("=", 1)[0]): m.split("=", 1)[1] for m in args.map}
    asyncio.run(Proxy(args.host, mapping, args.control, args.log, args.seed).serve())


if __name__ == "__main__":
    main()
