"""The worker protocol: leases (leader only; followers forward), heartbeats, completions."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from raftcron.api.auth import principal_of
from raftcron.api.before_start import check_before_start
from raftcron.api.context import ApiContext, now_ms
from raftcron.api.errors import HTTPError, json_body, rejection_error
from raftcron.api.jobs import ctx_of
from raftcron.cluster.proposer import ProposalError
from raftcron.core import commands as c
from raftcron.core.ahead import REFUSAL_REASONS
from raftcron.core.errors import ValidationError
from raftcron.core.model import NAME_RE, json_int
from raftcron.core.protocol import COMPLETION_TIMES
from raftcron.core.timefmt import ACCEPTED_MAX_MS
from raftcron.leader.ticker import LostEpoch

log = logging.getLogger(__name__)

MAX_OUTPUT = 64 * 1024
MAX_BATCH = 1000
MAX_WAIT_S = 30.0


# Printable ASCII: what a schema pattern can state exactly (`str.isprintable` depends on
# the Unicode tables of the Python that runs the node). Default ids are host-pid.
WORKER_ID_RE = re.compile(r"^[ -~]{1,128}$")
MAX_ATTEMPT_ID_LEN = 512
MAX_TOKEN = 2**63 - 1  # SQLite's INTEGER
# A reported run: its start on the cluster's clock, and how long it ran (at most a year).
MAX_STARTED_MS = ACCEPTED_MAX_MS
MAX_DURATION_MS = 366 * 86_400_000


def _worker_id(body: dict[str, Any]) -> str:
    wid = body.get("worker_id")
    if not isinstance(wid, str) or not WORKER_ID_RE.fullmatch(wid):
        raise ValidationError("worker_id", "must be 1-128 printable ASCII characters")
    return wid


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValidationError("body", "must be a JSON object")
    return body


def _token(value: Any, field: str) -> int:
    token = json_int(value)
    if token is None or not 0 <= token <= MAX_TOKEN:
        raise ValidationError(field, f"must be an integer from 0 to {MAX_TOKEN}")
    return token


def _attempt_id(value: Any, field: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_ATTEMPT_ID_LEN:
        raise ValidationError(field, "must be an attempt id")
    return value


# A lease long-poll forwarded by a follower waits at most this long at the leader: if the
# leader is paused or cut off, the worker hears back (503 or an empty batch) within
# seconds and polls again, reaching whichever node leads by then, instead of waiting out
# its whole long poll on a leader that no longer answers.
FORWARD_WAIT_CAP_S = 2.0
FORWARD_GRACE_S = 3.0


async def _forward_to_leader(request: Request, ctx: ApiContext, body: bytes,
                             timeout_s: float) -> Response:
    url = ctx.node.leader_http_url()
    if url is None or url == ctx.node.config.http_url:
        raise HTTPError(503, "no_leader", "the cluster has no leader",
                        headers={"Retry-After": "1"})
    headers = {"content-type": "application/json"}
    if "authorization" in request.headers:
        headers["authorization"] = request.headers["authorization"]
    client: httpx.AsyncClient = request.app.state.http
    try:
        resp = await client.post(f"{url}{request.url.path}", content=body, headers=headers,
                                 timeout=timeout_s)
    except httpx.HTTPError as e:
        raise HTTPError(503, "no_leader", f"the leader is unreachable: {e.__class__.__name__}",
                        headers={"Retry-After": "1"}) from None
    return Response(resp.content, status_code=resp.status_code,
                    media_type="application/json", headers={
                        k: v for k, v in resp.headers.items() if k.lower() == "retry-after"})


def lease_params(body: Any) -> tuple[list[str], int, float, bool]:
    """(queues, max, wait_s, acknowledge) of a lease request, checked: ValidationError
    naming the field."""
    body = _object(body)
    _worker_id(body)
    queues = body.get("queues", ["default"])
    if (not isinstance(queues, list) or not 1 <= len(queues) <= 50
            or not all(isinstance(q, str) and NAME_RE.fullmatch(q) for q in queues)):
        raise ValidationError("queues", "must be a list of 1-50 queue names")
    max_n = json_int(body.get("max", 1))
    if max_n is None or not 1 <= max_n <= MAX_BATCH:
        raise ValidationError("max", f"must be an integer from 1 to {MAX_BATCH}")
    wait_s = body.get("wait_s", 0)
    if isinstance(wait_s, bool) or not isinstance(wait_s, int | float) or not (
        0 <= wait_s <= MAX_WAIT_S
    ):
        raise ValidationError("wait_s", f"must be a number from 0 to {MAX_WAIT_S}")
    acknowledge = body.get("acknowledge", False)
    if not isinstance(acknowledge, bool):
        raise ValidationError("acknowledge", "must be true or false")
    return queues, max_n, wait_s, acknowledge


async def leases(request: Request) -> Response:
    ctx = ctx_of(request)
    body = _object(await json_body(request))
    worker_id = _worker_id(body)
    queues, max_n, wait_s, acknowledge = lease_params(body)
    principal = principal_of(request)
    if not principal.allowed_queues(queues):
        allowed = ", ".join(sorted(principal.worker_queues or ()))
        raise HTTPError(403, "forbidden", f"token {principal.name!r} may only lease from "
                        f"queues {allowed}", "queues")
    ahead, ahead_refused = _ahead(body)
    duties = ctx.node.duties
    if duties is None or duties.stopped:
        if ctx.node.raft.is_leader():
            raise HTTPError(503, "no_leader", "leadership is starting; retry",
                            headers={"Retry-After": "1"})
        forwarded = {**body, "wait_s": min(float(wait_s), FORWARD_WAIT_CAP_S)}
        response = await _forward_to_leader(request, ctx, json.dumps(forwarded).encode(),
                                            forwarded["wait_s"] + FORWARD_GRACE_S)
        return await _hand_over(request, ctx, worker_id, response)
    try:
        # JSONResponse encodes its body when built: built at commit, before the instant.
        ctx.node.metrics.observe_poll(worker_id, ahead_refused)
        response = await duties.dispatcher.lease(
            worker_id, sorted(set(queues)), max_n, float(wait_s),
            prepare=AheadLeaseAnswer if ahead else _plain_lease_response,
            acknowledge=acknowledge, ahead=ahead)
    except (LostEpoch, ProposalError):
        raise HTTPError(503, "no_leader", "leadership changed; retry",
                        headers={"Retry-After": "1"}) from None
    return await _hand_over(request, ctx, worker_id, response)


def _ahead(body: dict[str, Any]) -> tuple[bool, str | None]:
    """`ahead`: the worker starts each run at its lease's `start_at_ms` (core.ahead);
    `ahead_refused`: why a worker that can does not (counted in /metrics)."""
    ahead = body.get("ahead", False)
    if not isinstance(ahead, bool):
        raise ValidationError("ahead", "must be true or false")
    refused = body.get("ahead_refused")
    if refused is not None and refused not in REFUSAL_REASONS:
        raise ValidationError("ahead_refused", f"must be one of {', '.join(REFUSAL_REASONS)}"
                              " or null")
    return ahead, None if ahead else refused


def _plain_lease_response(leases: list[dict[str, Any]]) -> JSONResponse:
    return JSONResponse({"leases": leases})


class AheadLeaseAnswer(JSONResponse):
    """An answer to a poll for runs ahead: the leases, and the leader's clock from which
    the worker times each run's start (core.ahead.start_delay_s).

    The body is encoded when the Lease commits (a herd's batch of 1,000 leases is costly
    to encode at its instant), but the clock is read again as the answer is sent. A worker
    counts the server's time from the answer's receipt, so every moment between the
    reading and the sending makes each run of the batch start that much late (never
    early): a loaded leader at a 100,000 herd sent answers up to 1.8 s after encoding them
    (bench/herd.py, "a lease answer's delivery")."""

    KEY = b'"server_now_ms":'

    def __init__(self, leases: list[dict[str, Any]]) -> None:
        # The stamp is the last key, so the last occurrence of KEY is always its own.
        super().__init__({"leases": leases, "server_now_ms": now_ms()})

    def restamp(self) -> None:
        """The same answer with the clock read now. A body not ending in the stamp is
        sent as built: its runs start late, never early."""
        at = self.body.rfind(self.KEY) + len(self.KEY)
        if at < len(self.KEY) or not self.body[at:-1].isdigit() or self.body[-1:] != b"}":
            return
        body = self.body[:at] + str(now_ms()).encode() + b"}"
        if len(body) != len(self.body):  # 13 digits from 2001 to 2286
            self.raw_headers[:] = [  # in place: `headers` reads this very list
                (k, str(len(body)).encode() if k == b"content-length" else v)
                for k, v in self.raw_headers]
        self.body = body

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.restamp()
        await super().__call__(scope, receive, send)


async def _hand_over(request: Request, ctx: ApiContext, worker_id: str,
                     response: Response) -> Response:
    """The lease response, unless the poller gave up before its leases committed (its own
    timeout, or that of the node that forwarded its poll): nobody would run them, so they
    are handed back now instead of staying running until their heartbeat timeout, which
    would also use up one of their attempts."""
    if response.status_code == 200 and await request.is_disconnected():
        leases = json.loads(response.body).get("leases") or []
        if leases:
            await _release(ctx, worker_id, leases)
    return response


async def _release(ctx: ApiContext, worker_id: str, leases: list[dict[str, Any]]) -> None:
    pairs = [[lease["attempt_id"], lease["fencing_token"]] for lease in leases]
    try:
        result = await ctx.propose_raw(c.Release(ctx.stamp_ms(), worker_id, pairs))
    except HTTPError:
        released = 0
    else:
        released = sum(1 for item in result.get("results", []) if item.get("ok"))
    log.info("released %d of %d leases that %s stopped waiting for (any others end at "
             "their heartbeat timeout)", released, len(pairs), worker_id)


def _pairs(items: Any, field: str) -> list[list[Any]]:
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
        raise ValidationError(field, f"must be a list of 1-{MAX_BATCH} entries")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValidationError(f"{field}.{i}", "must be an object")
        out.append([_attempt_id(item.get("attempt_id"), f"{field}.{i}.attempt_id"),
                    _token(item.get("fencing_token"), f"{field}.{i}.fencing_token")])
    return out


def _completion(item: Any, field: str) -> list[Any]:
    if not isinstance(item, dict):
        raise ValidationError(field, "must be an object")
    outcome = item.get("outcome")
    if outcome not in ("succeeded", "failed"):
        raise ValidationError(f"{field}.outcome", "must be succeeded or failed")
    exit_code = item.get("exit_code")
    if exit_code is not None:
        exit_code = json_int(exit_code)
        if exit_code is None or not -(2**31) <= exit_code < 2**31:
            raise ValidationError(f"{field}.exit_code", "must be a 32-bit integer or null")
    output = item.get("output", "")
    if output is None:
        output = ""
    if not isinstance(output, str):
        raise ValidationError(f"{field}.output", "must be a string")
    output = output[-MAX_OUTPUT:]
    parsed = [_attempt_id(item.get("attempt_id"), f"{field}.attempt_id"),
              _token(item.get("fencing_token"), f"{field}.fencing_token"),
              outcome, exit_code, output]
    # The run's start and duration (the schema holds their ranges and requires both).
    started, duration = json_int(item.get("started_ms")), json_int(item.get("duration_ms"))
    if started is not None and duration is not None:
        parsed += [started, duration]
    return parsed


def _writable(items: list[list[Any]], ctx: ApiContext, fields: int = 5) -> list[list[Any]]:
    """The items as this cluster can commit them: a cluster below protocol level 2 (a
    rolling upgrade) records an outcome or a heartbeat without the reported start (its
    first `fields` fields), rather than refuse it."""
    if ctx.writable_level() >= COMPLETION_TIMES.level:
        return items
    return [item[:fields] for item in items]


def _token_queues(request: Request) -> list[str] | None:
    """The queues this worker's token may lease, sorted (None: any queue)."""
    principal = principal_of(request)
    if principal.admin or principal.worker_queues is None:
        return None
    return sorted(principal.worker_queues)


async def _guard_attempts(request: Request, ctx: ApiContext, ids: list[str],
                          fields: list[str]) -> list[str] | None:
    """403 unless every named attempt is on a queue the token may lease, judged on the
    attempt as stored (its queue never changes); returns the token's queues, which the
    command carries so that apply checks them again on the committed state.

    An attempt this node has not seen yet (it lags the leader) is looked up again after a
    barrier; one that does not exist even then is left to apply, which finds no attempt."""
    queues = _token_queues(request)
    if queues is None:
        return None
    unique = sorted(set(ids))
    found = await _attempt_queues(ctx, unique)
    if len(found) < len(unique):
        await ctx.barrier()
        found = await _attempt_queues(ctx, unique)
    principal = principal_of(request)
    for attempt_id, field in zip(ids, fields, strict=True):
        queue = found.get(attempt_id)
        if queue is not None and queue not in queues:
            raise HTTPError(403, "forbidden", f"token {principal.name!r} may not act on "
                            f"attempts of queue {queue!r} (it may lease {', '.join(queues)})",
                            field)
    return queues


async def _attempt_queues(ctx: ApiContext, ids: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        found.update(await ctx.select_all(
            f"SELECT id, queue FROM attempts WHERE id IN ({','.join('?' * len(chunk))})",
            chunk, 2))
    return found


async def heartbeats(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    body = _object(await json_body(request))
    worker_id = _worker_id(body)
    pairs = _pairs(body.get("attempts"), "attempts")
    # A running run's start (its range is the schema's), recorded from the first beat on.
    starts = [json_int(item.get("started_ms")) for item in body["attempts"]]
    before_start = body.get("before_start", False)
    if not isinstance(before_start, bool):
        raise ValidationError("before_start", "must be true or false")
    queues = await _guard_attempts(request, ctx, [p[0] for p in pairs],
                                   [f"attempts.{i}.attempt_id" for i in range(len(pairs))])
    if before_start:
        return JSONResponse({"results": await check_before_start(ctx, worker_id, pairs,
                                                                 queues)})
    items = [[*pair, start] if start is not None else pair
             for pair, start in zip(pairs, starts, strict=True)]
    result = await ctx.propose_raw(c.Heartbeat(ctx.stamp_ms(), worker_id,
                                               _writable(items, ctx, 2), queues))
    return JSONResponse({"results": result["results"]})


async def completions(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    body = _object(await json_body(request))
    items = body.get("completions")
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_BATCH:
        raise ValidationError("completions", f"must be a list of 1-{MAX_BATCH} entries")
    worker_id = _worker_id(body)
    parsed = [_completion(it, f"completions.{i}") for i, it in enumerate(items)]
    queues = await _guard_attempts(request, ctx, [p[0] for p in parsed],
                                   [f"completions.{i}.attempt_id" for i in range(len(parsed))])
    result = await ctx.propose_raw(c.Complete(ctx.stamp_ms(), worker_id,
                                              _writable(parsed, ctx), queues))
    return JSONResponse({"results": result["results"]})


async def releases(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    body = _object(await json_body(request))
    worker_id = _worker_id(body)
    pairs = _pairs(body.get("attempts"), "attempts")
    queues = await _guard_attempts(request, ctx, [p[0] for p in pairs],
                                   [f"attempts.{i}.attempt_id" for i in range(len(pairs))])
    result = await ctx.propose_raw(c.Release(ctx.stamp_ms(), worker_id, pairs, queues))
    return JSONResponse({"results": result["results"]})


def _single(result: dict[str, Any]) -> dict[str, Any]:
    item = result["results"][0]
    if not item.get("ok"):
        raise rejection_error(item)
    return item


async def heartbeat_one(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    body = _object(await json_body(request))
    attempt_id = _attempt_id(request.path_params["attempt_id"], "attempt_id")
    worker_id = _worker_id(body)
    pair = [attempt_id, _token(body.get("fencing_token"), "fencing_token")]
    queues = await _guard_attempts(request, ctx, [attempt_id], ["attempt_id"])
    result = await ctx.propose_raw(c.Heartbeat(ctx.stamp_ms(), worker_id, [pair], queues))
    return JSONResponse({"cancel": bool(_single(result).get("cancel"))})


async def complete_one(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    body = _object(await json_body(request))
    body["attempt_id"] = request.path_params["attempt_id"]
    worker_id = _worker_id(body)
    completion = _completion(body, "body")
    queues = await _guard_attempts(request, ctx, [completion[0]], ["attempt_id"])
    result = await ctx.propose_raw(c.Complete(ctx.stamp_ms(), worker_id,
                                              _writable([completion], ctx), queues))
    item = _single(result)
    return JSONResponse({"status": item["status"], "duplicate": item["duplicate"]})
