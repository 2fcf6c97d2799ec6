"""Run a leased attempt's target: a shell command or an HTTP request.

Exit codes of shell runs follow asyncio's convention for the `/bin/sh` process itself: a
normal exit reports its status (0-255); if the shell was killed by signal N the code is
-N. When the shell survives and reports the death of a command it waited for, the code is
whatever the shell reports, conventionally 128+N.

Each shell run gets its own session and process group, and the whole group is killed
(SIGTERM, then SIGKILL after a grace period) on timeout or cancellation. Processes the
command leaves behind in its group after the shell exits are killed too, once their
output has been given a moment to drain; a cron run does not leak background children.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import httpx

from raftcron.core.chains import upstream_env, upstream_headers
from raftcron.worker.client import Lease
from raftcron.worker.egress import EgressRefused, pin
from raftcron.worker.isolation import RunAs
from raftcron.worker.secrets import SecretsError, SecretsFile, resolve_target, scrub

log = logging.getLogger("raftcron.worker")

OUTPUT_LIMIT = 64 * 1024
DEFAULT_KILL_GRACE_S = 5.0
ORPHAN_GRACE_S = 1.0
DEFAULT_HTTP_TIMEOUT_S = 300.0

Outcome = Literal["succeeded", "failed"]


class Cancel:
    """A one-shot cancellation signal with the reason it was raised (first reason wins)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason: str | None = None

    def set(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()


@dataclass(frozen=True, slots=True)
class RunResult:
    outcome: Outcome
    exit_code: int | None
    output: str
    killed: str | None = None
    """Why the run was stopped early (timeout or cancellation), or None."""


def tail_text(data: bytes | bytearray, limit: int = OUTPUT_LIMIT) -> str:
    """The last `limit` bytes decoded as UTF-8 (errors replaced), at most `limit` bytes long."""
    text = bytes(data[-limit:]).decode("utf-8", errors="replace")
    encoded = text.encode("utf-8")
    if len(encoded) > limit:
        text = encoded[-limit:].decode("utf-8", errors="ignore")
    return text


def _append_note(output: str, note: str, limit: int = OUTPUT_LIMIT) -> str:
    suffix = f"\n[raftcron] {note}\n"
    room = limit - len(suffix.encode("utf-8"))
    return tail_text(output.encode("utf-8"), max(room, 0)) + suffix


class _TailBuffer:
    """Keeps the last `limit` bytes of a stream, trimming in amortized chunks."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.total = 0

    def write(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data += chunk
        if len(self.data) > 2 * self.limit:
            del self.data[: len(self.data) - self.limit]

    def text(self) -> str:
        return tail_text(self.data, self.limit)


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def _pump(stream: asyncio.StreamReader, buf: _TailBuffer) -> None:
    while chunk := await stream.read(65536):
        buf.write(chunk)


EXIT_POLL_FIRST_S = 0.001


async def _exited(proc: asyncio.subprocess.Process, poll_s: float = 0.05) -> int:
    """The shell's exit status, as soon as it has exited.

    `Process.wait()` is not used: on Python 3.11 it also waits for the output pipe to
    close, which never happens while a background child of the command still holds it.
    The poll starts at EXIT_POLL_FIRST_S and doubles up to `poll_s`: a trivial command
    exits within milliseconds, and a fixed 50 ms poll held each slot 50 ms per run (a
    worker of concurrency 4 could not pass 80 runs/s); a long one costs a few extra
    wake-ups only.
    """
    delay = EXIT_POLL_FIRST_S
    while proc.returncode is None:
        await asyncio.sleep(delay)
        delay = min(delay * 2, poll_s)
    return proc.returncode


async def _terminate_group(pgid: int, waiter: asyncio.Future[Any], grace_s: float) -> None:
    """SIGTERM the group, wait up to `grace_s` for the shell to exit, then SIGKILL it."""
    _killpg(pgid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(waiter), grace_s)
    _killpg(pgid, signal.SIGKILL)
    await waiter


async def run_shell(
    command: str,
    *,
    env: Mapping[str, str] | None = None,
    max_runtime_s: float | None = None,
    cancel: Cancel | None = None,
    kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    output_limit: int = OUTPUT_LIMIT,
    run_as: RunAs | None = None,
) -> RunResult:
    """Run `command` under `/bin/sh -c` in a new process group and capture its output tail
    (as `run_as`'s uid, gid and groups when given)."""
    env = dict(os.environ if env is None else env)
    account: dict[str, Any] = {}
    if run_as is not None:
        env.update(run_as.env())
        account = {"user": run_as.uid, "group": run_as.gid,
                   "extra_groups": list(run_as.groups)}
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        start_new_session=True,
        **account,
    )
    if max_runtime_s is not None and max_runtime_s <= 0:
        max_runtime_s = None
    pgid = proc.pid
    buf = _TailBuffer(output_limit)
    assert proc.stdout is not None
    reader = asyncio.create_task(_pump(proc.stdout, buf))
    waiter = asyncio.create_task(_exited(proc))
    cancel_task = asyncio.create_task(cancel.wait()) if cancel is not None else None
    killed: str | None = None
    try:
        watched: set[asyncio.Future[Any]] = {waiter}
        if cancel_task is not None:
            watched.add(cancel_task)
        done, _ = await asyncio.wait(
            watched, timeout=max_runtime_s, return_when=asyncio.FIRST_COMPLETED
        )
        if waiter not in done:
            if cancel_task is not None and cancel_task in done:
                killed = (cancel.reason if cancel else None) or "cancelled"
            else:
                killed = f"max_runtime_s={max_runtime_s:g} exceeded"
            log.info("killing process group %d: %s", pgid, killed)
            await _terminate_group(pgid, waiter, kill_grace_s)
        try:
            await asyncio.wait_for(asyncio.shield(reader), ORPHAN_GRACE_S)
        except TimeoutError:
            log.info("process group %d still holds the output open after the shell "
                     "exited; killing it", pgid)
            _killpg(pgid, signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(reader), kill_grace_s)
            except TimeoutError:
                _killpg(pgid, signal.SIGKILL)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(reader), ORPHAN_GRACE_S)
    finally:
        if proc.returncode is None:
            _killpg(pgid, signal.SIGKILL)
        if cancel_task is not None:
            cancel_task.cancel()
        if not reader.done():
            reader.cancel()
        if not waiter.done():
            waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.gather(reader, waiter, return_exceptions=True)
    code = proc.returncode
    output = buf.text()
    if killed:
        output = _append_note(output, f"run killed: {killed}", output_limit)
    outcome: Outcome = "succeeded" if code == 0 and killed is None else "failed"
    return RunResult(outcome=outcome, exit_code=code, output=output, killed=killed)


class _HeadTail:
    """Keeps the first and last parts of a body so the result fits in `limit` bytes."""

    MARK = b"\n[raftcron] ... response body truncated ...\n"

    def __init__(self, limit: int) -> None:
        self.half = (limit - len(self.MARK)) // 2
        self.head = bytearray()
        self.tail = _TailBuffer(self.half)
        self.total = 0

    def write(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if len(self.head) < self.half:
            take = self.half - len(self.head)
            self.head += chunk[:take]
            chunk = chunk[take:]
        if chunk:
            self.tail.write(chunk)

    def text(self) -> str:
        if self.tail.total == 0:
            return bytes(self.head).decode("utf-8", errors="replace")
        if self.tail.total <= self.half:
            whole = bytes(self.head) + bytes(self.tail.data)
            return whole.decode("utf-8", errors="replace")
        head = bytes(self.head).decode("utf-8", errors="ignore")
        return head + self.MARK.decode() + tail_text(self.tail.data, self.half)


async def run_http(
    spec: Mapping[str, Any],
    *,
    extra_headers: Mapping[str, str] | None = None,
    max_runtime_s: float | None = None,
    cancel: Cancel | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    default_timeout_s: float = DEFAULT_HTTP_TIMEOUT_S,
    output_limit: int = OUTPUT_LIMIT,
    extensions: Mapping[str, Any] | None = None,
) -> RunResult:
    """Send the request described by `spec` ({url, method, headers, body}).

    2xx is success (exit_code None); any other status fails with the status as exit code
    (and the status line first in the output);
    a transport error, the runtime limit, or cancellation fails with exit_code None.
    `max_runtime_s` bounds the whole exchange; without it `default_timeout_s` does.
    """
    method = str(spec.get("method") or "GET").upper()
    url = str(spec["url"])
    headers = {str(k): str(v) for k, v in (spec.get("headers") or {}).items()}
    headers.update(extra_headers or {})
    body = spec.get("body")
    content: bytes | None
    if body is None:
        content = None
    elif isinstance(body, str):
        content = body.encode("utf-8")
    elif isinstance(body, bytes):
        content = body
    else:
        content = json.dumps(body).encode("utf-8")
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
    limit_s = float(max_runtime_s) if max_runtime_s else default_timeout_s

    async def exchange() -> RunResult:
        collected = _HeadTail(output_limit)
        async with (
            httpx.AsyncClient(transport=transport, timeout=limit_s) as client,
            client.stream(method, url, headers=headers, content=content,
                          extensions=dict(extensions or {})) as resp,
        ):
            async for chunk in resp.aiter_bytes():
                collected.write(chunk)
        if resp.is_success:
            return RunResult("succeeded", None, collected.text())
        # The attempt's exit code is the status; its output says so in words first.
        status = f"HTTP {resp.status_code} {resp.reason_phrase}".rstrip()
        return RunResult("failed", resp.status_code, f"{status}\n{collected.text()}")

    task = asyncio.create_task(exchange())
    watched: set[asyncio.Future[Any]] = {task}
    cancel_task = asyncio.create_task(cancel.wait()) if cancel is not None else None
    if cancel_task is not None:
        watched.add(cancel_task)
    try:
        done, _ = await asyncio.wait(
            watched, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        if cancel_task is not None:
            cancel_task.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    if task in done:
        try:
            return task.result()
        except httpx.HTTPError as e:
            return RunResult("failed", None, f"{type(e).__name__}: {e}"[:output_limit])
        except (ValueError, TypeError) as e:
            return RunResult("failed", None, f"invalid request: {e}"[:output_limit])
    if cancel_task is not None and cancel_task in done:
        killed = (cancel.reason if cancel else None) or "cancelled"
    else:
        killed = f"timed out after {limit_s:g}s"
    return RunResult("failed", None, f"[raftcron] request aborted: {killed}\n", killed=killed)


# The worker's own credentials: a job gets none of them (a job holding the worker token
# could lease and complete other jobs' runs).
WORKER_SECRETS = ("RAFTCRON_TOKEN",)


def job_env(lease: Lease, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a shell run: the worker's environment, without its token, plus
    the RAFTCRON_* ids."""
    env = dict(os.environ if base is None else base)
    for name in WORKER_SECRETS:
        env.pop(name, None)
    env.update({
        "RAFTCRON_JOB_ID": lease.job_id,
        "RAFTCRON_OCCURRENCE_ID": lease.occurrence_id,
        "RAFTCRON_ATTEMPT_ID": lease.attempt_id,
        "RAFTCRON_SCHEDULED_FOR": lease.scheduled_for,
        "RAFTCRON_FENCING_TOKEN": str(lease.fencing_token),
        "RAFTCRON_IDEMPOTENCY_KEY": lease.idempotency_key,
        **upstream_env(lease.upstream),
    })
    return env


async def execute(
    lease: Lease,
    *,
    cancel: Cancel | None = None,
    kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    http_transport: httpx.AsyncBaseTransport | None = None,
    secrets: SecretsFile | None = None,
    run_as: RunAs | None = None,
) -> RunResult:
    """Run a lease's target. An unknown or malformed target fails without running, and so
    does one naming a secret this worker does not hold (see raftcron.worker.secrets)."""
    target = lease.target
    if "shell" in target and isinstance(target["shell"], str):
        return await run_shell(
            target["shell"],
            env=job_env(lease),
            max_runtime_s=lease.max_runtime_s,
            cancel=cancel,
            kill_grace_s=kill_grace_s,
            run_as=run_as,
        )
    if "http" in target and isinstance(target["http"], Mapping) and target["http"].get("url"):
        try:
            resolved, hidden = resolve_target(target, lease.tenant, secrets)
        except SecretsError as e:
            return RunResult("failed", None, f"[raftcron] not sent: {e}\n")
        spec: Mapping[str, Any] = resolved["http"]
        extensions: dict[str, Any] = {}
        if lease.http_rule is not None:
            try:
                pinned = await pin(str(spec["url"]), lease.http_rule)
            except EgressRefused as e:
                return RunResult("failed", None, f"[raftcron] not sent: {e}\n")
            spec = {**spec, "url": pinned.url, "headers": {
                **{k: v for k, v in (spec.get("headers") or {}).items()
                   if str(k).lower() != "host"}, "Host": pinned.host_header}}
            if pinned.sni_hostname:
                extensions["sni_hostname"] = pinned.sni_hostname
        result = await run_http(
            spec,
            extensions=extensions,
            extra_headers={
                "Idempotency-Key": lease.idempotency_key,
                "X-Raftcron-Fencing-Token": str(lease.fencing_token),
                **upstream_headers(lease.upstream),
            },
            max_runtime_s=lease.max_runtime_s,
            cancel=cancel,
            transport=http_transport,
        )
        # The output is readable by non-admins: an echoed or quoted secret is not shown.
        return replace(result, output=scrub(result.output, hidden))
    kinds = ", ".join(sorted(str(k) for k in target)) or "none"
    return RunResult("failed", None, f"[raftcron] unsupported or malformed target ({kinds})\n")
