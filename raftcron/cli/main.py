"""The `raftcron` command line: argument parsing only; work lives in the modules."""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any

from raftcron.cli.common import DEFAULT_SERVER, print_output

TOKEN_HELP = "bearer token (default: $RAFTCRON_TOKEN)"
# `job add` / `job edit` options for the run bounds (job fields of the same names).
RUN_BOUND_OPTIONS = {
    "start_deadline_s": "alert not_started when no attempt started this long after the instant",
    "min_duration_s": "alert too_fast for a success quicker than this",
    "max_duration_s": "alert too_slow for a run still going after this (it is not killed)",
    "alert_after_failures": "one alert after this many consecutive failures",
}


@dataclass(frozen=True)
class _BoundValue:
    """A run bound given on the command line (`value` None: 0 was given, turning it off)."""

    value: int | None

    @staticmethod
    def parse(text: str) -> _BoundValue:
        if not (text.isascii() and text.isdigit()):
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (0 turns it off)")
        return _BoundValue(int(text) or None)


class UsageError(Exception):
    pass


def _fail(message: str) -> int:
    print(f"raftcron: {message}", file=sys.stderr)
    return 2


# --- schedule preview ----------------------------------------------------------------------

def cmd_schedule_preview(args: argparse.Namespace) -> int:
    from raftcron.core.errors import ValidationError
    from raftcron.core.model import compile_member, parse_schedule
    from raftcron.core.schedule import ScheduleError
    from raftcron.core.timefmt import ms_to_iso, ms_to_local_iso, parse_iso_ms

    try:
        entry = _schedule_entries(args)[0]
        spec = parse_schedule({**entry, "timezone": args.tz, "dst_gap": args.dst_gap,
                               "dst_fold": args.dst_fold}, args.job_id)
        sched = compile_member(spec, args.job_id)
        start = parse_iso_ms(args.start, "--start") // 1000 if args.start else int(time.time())
    except (ScheduleError, ValidationError) as e:
        return _fail(f"{e.field}: {e.message}")
    if not 1 <= args.count <= 10_000:
        return _fail("--count must be between 1 and 10000")
    rows = []
    t = start
    for _ in range(args.count):
        nxt = sched.next_after(t)
        if nxt is None:
            break
        rows.append({"scheduled_for": ms_to_iso(nxt * 1000),
                     "local": ms_to_local_iso(nxt * 1000, args.tz)})
        t = nxt
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'local':<28} utc")
        for r in rows:
            print(f"{r['local']:<28} {r['scheduled_for']}")
    return 0


# --- node, up, worker ------------------------------------------------------------------------

def _setup_logging(level: str, json_logs: bool = False) -> None:
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), format=fmt,
                        stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def cmd_node(args: argparse.Namespace) -> int:
    from raftcron.auth import AuthError, TokenStore
    from raftcron.cluster.levels import spoken_level
    from raftcron.config import ConfigError, load_config
    from raftcron.node import run_node
    from raftcron.state.db import sqlite_too_old

    _setup_logging(args.log_level)

    def path(value: str | None) -> str | None:  # flags are relative to the working directory
        return os.path.abspath(value) if value else None

    overrides = {"node_id": args.id, "http_port": args.http_port, "raft_addr": args.raft_addr,
                 "data_dir": args.data_dir, "secret_file": args.secret_file,
                 "webhooks": args.webhook, "webhook_secret_file": args.webhook_secret_file,
                 "watchdog_url": args.watchdog_url, "tokens_file": path(args.tokens_file),
                 "tls_cert": path(args.tls_cert), "tls_key": path(args.tls_key),
                 "retention": args.retention}
    try:
        config = load_config(args.config, overrides)
        config.read_secret()
        config.read_webhook_secret()
        config.check_tls_files()
        config.check_ports_free()
        if (too_old := sqlite_too_old()) is not None:
            raise ConfigError(too_old)
        try:
            spoken_level()  # a test-only level override, checked before anything starts
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if config.tokens_file is not None:
            if not os.path.isfile(config.tokens_file):
                raise ConfigError(f"tokens file {config.tokens_file!r} does not exist: create "
                                  f"one with `raftcron token create --scope admin "
                                  f"--config {args.config}`")
            TokenStore(config.tokens_file)
    except (ConfigError, AuthError) as e:
        return _fail(str(e))
    run_node(config)
    return 0


def _tokens_path(args: argparse.Namespace) -> tuple[str, Any]:
    """The tokens file named by --tokens-file or by --config's `tokens_file` (and that
    config, or None)."""
    from raftcron.config import ConfigError, load_config

    if args.tokens_file:
        return args.tokens_file, None
    config = load_config(args.config)
    if config.tokens_file is None:
        raise ConfigError(f"config {args.config!r} has auth = \"off\": it uses no "
                          "tokens file")
    return config.tokens_file, config


def cmd_token_create(args: argparse.Namespace) -> int:
    from raftcron.auth import AuthError, create_token, parse_expires_in, validate_scopes
    from raftcron.config import ConfigError

    try:
        validate_scopes(args.scope or [])
        expires_in = parse_expires_in(args.expires_in) if args.expires_in else None
        path, _ = _tokens_path(args)
        if args.name is not None and not (1 <= len(args.name) <= 64
                                          and args.name.isprintable()):
            raise AuthError("--name must be 1-64 printable characters")
        token = create_token(path, args.scope, args.name or "", expires_in)
    except (AuthError, ConfigError, OSError) as e:
        return _fail(str(e))
    print(token)
    print(f"raftcron: token with scopes {' '.join(args.scope)} added to {path}; it is shown "
          "only now (nodes pick it up without a restart)", file=sys.stderr)
    return 0


def _when(unix_s: Any) -> str:
    return "-" if not isinstance(unix_s, int | float) else time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_s))


def cmd_token_list(args: argparse.Namespace) -> int:
    """Names, scopes, created, last used (as the --config node saw it) and expiry."""
    from raftcron.auth import TOKEN_USAGE_FILE, AuthError, list_tokens, read_usage
    from raftcron.config import ConfigError

    try:
        path, config = _tokens_path(args)
        usage = read_usage(os.path.join(config.data_dir, TOKEN_USAGE_FILE)) if config else {}
        rows = list_tokens(path, usage)
    except (AuthError, ConfigError, OSError) as e:
        return _fail(str(e))
    now = time.time()
    for row in rows:
        row["expired"] = row["expires_at"] is not None and now >= row["expires_at"]
    if args.json:
        print(json.dumps({"tokens": rows}, indent=2))
        return 0
    print(f"{'NAME':<24} {'SCOPES':<28} {'CREATED':<21} {'LAST USED':<21} EXPIRES")
    for r in rows:
        expires = _when(r["expires_at"]) + (" (expired)" if r["expired"] else "")
        print(f"{r['name']:<24} {','.join(r['scopes']):<28} {_when(r['created_at']):<21} "
              f"{_when(r['last_used_at']):<21} {expires}")
    if config is None:
        print("raftcron: last-used times are kept per node: pass --config <node.toml> to "
              "see that node's", file=sys.stderr)
    return 0


def cmd_token_revoke(args: argparse.Namespace) -> int:
    from raftcron.auth import AuthError, revoke_token
    from raftcron.config import ConfigError

    try:
        path, _ = _tokens_path(args)
        removed = revoke_token(path, args.name)
    except (AuthError, ConfigError, OSError) as e:
        return _fail(str(e))
    print(f"raftcron: revoked {removed} token(s) named {args.name!r} in {path} (nodes refuse "
          "it as soon as they see the file change; copy the file to every node)",
          file=sys.stderr)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from raftcron.ops.local import run_up

    if not 1 <= args.nodes <= 7:
        return _fail("--nodes must be between 1 and 7")
    if args.workers < 0:
        return _fail("--workers must be 0 or more")
    # HTTP ports from --port-base, Raft ports from --port-base + 100.
    highest = 65535 - 100 - args.nodes + 1
    if not 1024 <= args.port_base <= highest:
        return _fail(f"--port-base must be between 1024 and {highest} "
                     "(nodes use it and the ports after it, and 100 above for Raft)")
    return run_up(args.data_dir, args.nodes, args.port_base, workers=args.workers)


def cmd_worker(args: argparse.Namespace) -> int:
    from raftcron.worker.isolation import IsolationError
    from raftcron.worker.runner import WorkerOptions
    from raftcron.worker.runner import main as worker_main

    _setup_logging(args.log_level)
    servers = [s for s in args.server.split(",") if s]
    queues = [q for q in args.queues.split(",") if q]
    if args.concurrency < 1:
        return _fail("--concurrency must be at least 1")
    if args.prefetch is not None and not 0 <= args.prefetch <= 1000:
        return _fail("--prefetch must be between 0 and 1000")
    if not 0 <= args.refused_grace_s <= 86_400:
        return _fail("--refused-grace-s must be between 0 and 86400")
    worker_id = args.id or f"{os.uname().nodename}-{os.getpid()}"
    if not re.fullmatch(r"[ -~]{1,128}", worker_id):  # as the API checks it (WORKER_ID_RE)
        return _fail("--id must be 1-128 printable ASCII characters")
    try:
        token, run_as = worker_credentials(args)
    except IsolationError as e:
        return _fail(str(e))
    return worker_main(servers, queues, args.concurrency, worker_id, token=token,
                       options=WorkerOptions(refused_grace_s=args.refused_grace_s,
                                             secrets_file=args.secrets_file,
                                             prefetch=args.prefetch),
                       run_as=run_as)


def worker_credentials(args: argparse.Namespace) -> tuple[str | None, Any]:
    """The worker's token (`--token-file`, else `--token` / $RAFTCRON_TOKEN) and the
    account its shell jobs run as (`--run-as`)."""
    from raftcron.worker.isolation import IsolationError, read_token_file, resolve_run_as

    run_as = resolve_run_as(args.run_as) if args.run_as else None
    from_env = os.environ.pop("RAFTCRON_TOKEN", None)  # jobs inherit os.environ
    if args.token_file:
        if args.token and args.token != from_env:
            raise IsolationError("give the token with --token or --token-file, not both")
        return read_token_file(args.token_file), run_as
    if args.token and args.token == from_env:
        logging.getLogger("raftcron.worker").warning(
            "the worker token came from $RAFTCRON_TOKEN: a job can read it in "
            "/proc/<worker pid>/environ; start the worker with --token-file instead")
    return args.token or None, run_as


# --- API clients -------------------------------------------------------------------------------

def client_for(args: argparse.Namespace) -> Any:
    from raftcron.cli.client import Client

    return Client([s for s in args.server.split(",") if s], token=args.token or None)


def _read_json(path: str) -> Any:
    """A JSON file named on the command line; a one-line UsageError naming it if it is
    not one."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise UsageError(f"{path} is not valid JSON: {e}") from None


def _schedule_text(schedule: dict[str, Any]) -> str:
    """A listed schedule in one cell: its cron, `at <times>` or `every <interval>`."""
    if "at" in schedule:
        at = schedule["at"]
        return "at " + (", ".join(at) if isinstance(at, list) else at)
    if "every" in schedule:
        return f"every {schedule['every']}"
    return schedule["cron"]


def _schedule_entries(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The schedules the options name: one per --cron, one for all --at times, one for
    --every (with --anchor)."""
    entries: list[dict[str, Any]] = [{"cron": c} for c in args.cron or []]
    ats = getattr(args, "at", None) or []
    if ats:
        entries.append({"at": ats if len(ats) > 1 else ats[0]})
    every = getattr(args, "every", None)
    anchor = getattr(args, "anchor", None)
    if anchor and not every:
        raise UsageError("--anchor goes with --every")
    if every:
        entries.append({"every": every, **({"anchor": anchor} if anchor else {})})
    return entries


def _job_body(args: argparse.Namespace) -> dict[str, Any]:
    if args.file:
        body = _read_json(args.file)
        if not isinstance(body, dict):
            raise UsageError("--file must hold a JSON object")
    else:
        body = {}
    if getattr(args, "job_id", None):
        body["id"] = args.job_id
    entries = _schedule_entries(args)
    zone = {"timezone": args.tz} if args.tz else {}
    if len(entries) > 1:  # several --cron, or --at/--every beside one: each in --tz
        body.pop("schedule", None)
        body["schedules"] = [{**e, **zone} for e in entries]
    elif entries or args.tz:
        if "schedules" in body:
            raise UsageError("this job has several schedules: give them all with --cron, "
                             "--at or --every, or edit them with --file")
        sched = body.setdefault("schedule", {})
        if entries:  # another kind replaces the old one; its other settings stay
            for kind in ("cron", "at", "every", "anchor"):
                sched.pop(kind, None)
            sched.update(entries[0])
        sched.update(zone)
    if args.calendar:
        body["calendars"] = args.calendar
    if args.label:
        labels: dict[str, str] = {}
        for item in args.label:
            name, sep, value = item.partition("=")
            if not sep:
                raise UsageError(f"--label {item!r} must be NAME=VALUE")
            labels[name] = value
        body["labels"] = labels
    if args.shell and args.url:
        raise UsageError("--shell and --url are two kinds of target: give one")
    if args.shell:
        body["target"] = {"shell": args.shell}
    if args.url:
        body["target"] = {"http": {"url": args.url, "method": args.method}}
    for key in ("misfire_policy", "overlap_policy", "max_attempts", "max_runtime_s", "queue",
                "tenant", "deadline_s", "concurrency_group"):
        value = getattr(args, key, None)
        if value is not None:
            body[key] = value
    for key in RUN_BOUND_OPTIONS:
        given = getattr(args, key, None)
        if given is not None:
            body[key] = given.value
    return body


def _checked_bounds(body: dict[str, Any]) -> dict[str, Any]:
    """The run bounds the API would refuse, refused first (exit 2 naming the flag)."""
    from raftcron.core.errors import ValidationError
    from raftcron.core.model import JOB_INT_FIELDS, check_run_bounds, json_int

    def flag(field: str) -> str:
        return f"--{field.replace('_', '-')}"

    ints: dict[str, int | None] = {}
    for key in ("min_duration_s", "max_duration_s", "max_runtime_s", *RUN_BOUND_OPTIONS):
        value = json_int(body.get(key))
        _, lo, hi = JOB_INT_FIELDS[key]
        if key in RUN_BOUND_OPTIONS and value is not None and not lo <= value <= hi:
            raise UsageError(f"{flag(key)} must be between {lo} and {hi} (0: off)")
        ints[key] = value
    try:
        check_run_bounds(ints)
    except ValidationError as e:
        raise UsageError(f"{flag(e.field)} {e.message}") from None
    return body


def cmd_job(args: argparse.Namespace) -> int:
    from raftcron.cli.client import ApiError

    client = client_for(args)
    try:
        return _job_action(args, client)
    except ApiError as e:
        return _fail(str(e))
    except (UsageError, OSError, ValueError) as e:
        return _fail(str(e))


def _job_action(args: argparse.Namespace, client: Any) -> int:
    action = args.action
    if action == "add":
        job = client.request("POST", "/v1/jobs", json=_checked_bounds(_job_body(args)),
                             retries=3)
        print_output(args, job, [(job["id"], str(job["version"]),
                            (job["next_fire_times"] or [{"utc": "-"}])[0]["utc"])],
               ("id", "version", "next fire (UTC)"))
    elif action == "list":
        data = client.request("GET", "/v1/jobs", params={"limit": 500})
        print_output(args, data, [(j["id"], j["tenant"], " | ".join(
                                 _schedule_text(s)
                                 for s in j.get("schedules") or [j["schedule"]]),
                             (j.get("schedule") or j["schedules"][0])["timezone"],
                             "paused" if j["paused"] else "active",
                             str(j["version"])) for j in data["jobs"]],
               ("id", "tenant", "cron", "timezone", "state", "version"))
    elif action == "show":
        print_output(args, client.request("GET", f"/v1/jobs/{args.job_id}"))
    elif action == "edit":
        current = client.request("GET", f"/v1/jobs/{args.job_id}")
        body = {k: v for k, v in current.items() if k not in (
            "version", "watermark", "created_at", "updated_at", "next_fire_times",
            "latest_occurrence", "pause_note", "done")}
        body.update(_job_body(args))
        _checked_bounds(body)
        job = client.request("PUT", f"/v1/jobs/{args.job_id}", json=body,
                             headers={"If-Match": str(current["version"])}, retries=3)
        print_output(args, job, [(job["id"], str(job["version"]))], ("id", "version"))
    elif action in ("pause", "resume"):
        job = client.request("POST", f"/v1/jobs/{args.job_id}/{action}")
        print_output(args, job, [(job["id"], "paused" if job["paused"] else "active")],
               ("id", "state"))
    elif action == "trigger":
        headers = {"Idempotency-Key": args.key} if args.key else None
        occ = client.request("POST", f"/v1/jobs/{args.job_id}/trigger", headers=headers,
                             json={"override_overlap": args.override_overlap})
        print_output(args, occ, [(occ["id"], occ["status"])], ("occurrence", "status"))
    elif action == "rm":
        print_output(args, client.request("DELETE", f"/v1/jobs/{args.job_id}"),
               [(args.job_id, "deleted")], ("id", "state"))
    elif action == "backfill":
        _backfill(args, client)
    elif action == "import":
        return _import(args, client)
    return 0


IMPORT_MAX_JOBS = 1000
IMPORT_MAX_BYTES = 900_000  # under the API's 1 MiB request body limit


def _import_chunks(jobs: list[Any]) -> list[tuple[int, list[Any]]]:
    """(offset, jobs) slices of at most IMPORT_MAX_JOBS jobs and IMPORT_MAX_BYTES of JSON."""
    chunks: list[tuple[int, list[Any]]] = []
    start, size = 0, 0
    for i, job in enumerate(jobs):
        n = len(json.dumps(job)) + 2
        if i > start and (i - start >= IMPORT_MAX_JOBS or size + n > IMPORT_MAX_BYTES):
            chunks.append((start, jobs[start:i]))
            start, size = i, 0
        size += n
    chunks.append((start, jobs[start:]))
    return chunks


def _refuse_repeated_ids(path: str, jobs: list[Any]) -> None:
    """A file naming one job id twice says two things of one job: which one it means is
    the user's call, not the import's (the server keeps the first, and every later import
    would find the second differing)."""
    first: dict[str, int] = {}
    for i, job in enumerate(jobs):
        job_id = job.get("id") if isinstance(job, dict) else None
        if not isinstance(job_id, str):
            continue  # the server names what is wrong with it
        if job_id in first:
            raise UsageError(f"{path}: jobs[{first[job_id]}] and jobs[{i}] are both "
                             f"job {job_id!r}")
        first[job_id] = i


def _import(args: argparse.Namespace, client: Any) -> int:
    """Create every job of a JSON file (a list of job objects, or {"jobs": [...]}) through
    POST /v1/jobs:batchCreate, 1,000 per request (a retry after a 503 carries the same
    Idempotency-Key). A job that already exists with the file's definition is counted as
    unchanged, so an interrupted import is simply run again. One that exists with another
    definition is named with the fields that differ and left as it is; with `--update` it
    is edited to the file's definition (PUT with If-Match: the version the server reported,
    so an edit made meanwhile is refused, not overwritten). Exit 1 if any job was refused,
    or differs and was not updated."""
    import uuid

    from raftcron.cli.client import ApiError
    from raftcron.core.errors import ALREADY_EXISTS

    data = _read_json(args.file)
    jobs = data.get("jobs") if isinstance(data, dict) else data
    if not isinstance(jobs, list) or not jobs:
        raise UsageError(f"{args.file} must hold a non-empty JSON list of jobs "
                         '(or {"jobs": [...]})')
    _refuse_repeated_ids(args.file, jobs)
    created, unchanged, refused = 0, 0, []
    differing: list[tuple[Any, dict[str, Any]]] = []  # (file item, batchCreate result)
    for k, chunk in _import_chunks(jobs):
        try:
            out = client.request("POST", "/v1/jobs:batchCreate", json={"jobs": chunk},
                                 headers={"Idempotency-Key": f"import-{uuid.uuid4().hex}"},
                                 retries=5)
        except ApiError as e:
            if e.field and e.field.startswith("jobs["):  # name the job in the whole file
                index, _, rest = e.field[5:].partition("]")
                e.field = f"jobs[{k + int(index)}]{rest}"
            raise
        for item, r in zip(chunk, out["results"], strict=True):
            if r["created"]:
                created += 1
            elif r["error"]["code"] == ALREADY_EXISTS and r.get("differs") == []:
                unchanged += 1
            elif r["error"]["code"] == ALREADY_EXISTS and r.get("differs"):
                differing.append((item, r))
            else:
                refused.append(f"{r['id']}: {r['error']['message']}")
        print(f"{k + len(chunk)}/{len(jobs)} jobs sent", file=sys.stderr)
    updated: list[str] = []
    if args.update:
        for item, r in differing:
            try:
                client.request("PUT", f"/v1/jobs/{r['id']}", json=item, retries=5, headers={
                    "If-Match": f'"{r["current_version"]}"',
                    "Idempotency-Key": f"import-{uuid.uuid4().hex}"})
                updated.append(r["id"])
            except ApiError as e:
                if e.status == 412:
                    refused.append(f"{r['id']}: edited on the server during the import "
                                   "(run the import again)")
                else:
                    refused.append(f"{r['id']}: {e}")
        differing = []
    left = [{"id": r["id"], "fields": r["differs"]} for _, r in differing]
    print_output(args, {"created": created, "unchanged": unchanged, "updated": updated,
                  "differing": left, "refused": refused},
           [(str(created), str(unchanged), str(len(updated)), str(len(left)),
             str(len(refused)))],
           ("created", "unchanged", "updated", "differing", "refused"))
    for job in left:
        print(f"differs {job['id']}: {', '.join(job['fields'])} (left as it is; --update "
              "applies the file)", file=sys.stderr)
    for line in refused:
        print(f"refused {line}", file=sys.stderr)
    return 1 if refused or left else 0


BACKFILL_MAX_INSTANTS = 10_000


def _backfill(args: argparse.Namespace, client: Any) -> None:
    """Backfill in slices of at most 1,000 instants, printing progress on stderr.

    Every slice carries the same Idempotency-Key (derived from the whole request), so
    re-running an interrupted backfill creates nothing twice."""
    import hashlib

    from raftcron.core.backfill import check_backfill_span
    from raftcron.core.errors import ValidationError
    from raftcron.core.model import parse_job
    from raftcron.core.timefmt import ms_to_iso, parse_iso_ms

    try:
        start = parse_iso_ms(args.start, "--start")
        end = parse_iso_ms(args.end, "--end")
    except ValidationError as e:
        raise UsageError(f"{e.field}: {e.message}") from None
    if end < start:
        raise UsageError("--end must not be before --start")
    try:
        check_backfill_span(start, end, "--end")  # the API's bound, said before any request
    except ValidationError as e:
        raise UsageError(f"{e.field}: {e.message}") from None
    if args.max_instants < 1:
        raise UsageError("--max-instants must be at least 1")
    job = client.request("GET", f"/v1/jobs/{args.job_id}")
    sched = parse_job({k: job[k] for k in ("id", "schedule", "schedules", "target")
                       if k in job}).fire_times()  # every schedule of the job
    # Counted as they come: a range of years of a job firing every second would otherwise
    # be listed whole in memory (and backfilled whole) before anything is checked.
    in_range = (t * 1000 for t in sched.iter_between((start - 1) // 1000, end // 1000)
                if t * 1000 >= start)
    instants = list(itertools.islice(in_range, args.max_instants + 1))
    if len(instants) > args.max_instants:
        raise UsageError(f"the range holds more than {args.max_instants:,} instants of "
                         f"{args.job_id}; narrow --start/--end or raise --max-instants")
    key = args.key or hashlib.sha256(f"{args.job_id} {start} {end}".encode()).hexdigest()[:16]
    ids: list[str] = []
    created = 0
    for i in range(0, max(len(instants), 1), 1000):
        part = instants[i : i + 1000]
        if not part:
            break
        result = client.request(
            "POST", f"/v1/jobs/{args.job_id}/backfill",
            json={"start": ms_to_iso(part[0]), "end": ms_to_iso(part[-1])},
            headers={"Idempotency-Key": key}, retries=5)
        ids += result["occurrence_ids"]
        created += result["created"]
        if not args.json:
            print(f"backfill {args.job_id}: {len(ids)}/{len(instants)} instants",
                  file=sys.stderr)
    summary = {"job_id": args.job_id, "request_key": key, "occurrence_ids": ids,
               "count": len(ids), "created": created}
    if not args.json:
        print(f"backfill {key}: {len(ids)} occurrences ({created} new)", file=sys.stderr)
    print_output(args, summary, [(o,) for o in ids] or [("(no instants in range)",)],
           ("occurrence",))


def cmd_status(args: argparse.Namespace) -> int:
    if args.watch:
        from raftcron.cli.runs import watch

        return watch(lambda: _status_once(args), args.interval)
    return _status_once(args)


def _status_once(args: argparse.Namespace) -> int:
    from raftcron.cli.client import ApiError

    try:
        st = client_for(args).request("GET", "/v1/cluster/nodes", retries=2)
    except ApiError as e:
        return _fail(str(e))

    def cell(node: dict[str, Any], key: str) -> str:
        value = node.get(key)
        return "" if value is None else str(value)

    rows = [(n["node_id"], n.get("role", "") if n.get("reachable") else "unreachable",
             *(cell(n, k) for k in ("term", "epoch", "leader_id", "commit_index",
                                    "last_applied_index", "replication_lag")))
            for n in st["nodes"]]
    try:
        queues = client_for(args).request("GET", "/v1/status/queues", retries=2)["queues"]
    except ApiError as e:  # a node too old to say, or a token that may not read it
        queues, note = None, f"queues: not available ({e})"
    if args.json:
        print_output(args, {**st, "queues": queues})
        return 0
    print_output(args, st, rows,
           ("node", "role", "term", "epoch", "leader", "commit", "applied", "lag"))
    print()
    if queues is None:
        print(note)
    elif not queues:
        print("queues: none")
    else:
        # A pool that falls behind shows here first: runs due, and the longest wait.
        print_output(args, queues, [(q["queue"], str(q["depth"]),
                                     f'{q["oldest_due_age_s"]:.1f}') for q in queues],
                     ("queue", "due", "oldest_wait_s"))
    return 0


# --- parser ------------------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        print(f"raftcron: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="raftcron", description="A distributed cron on three Raft nodes.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    from raftcron.cli.ops import register as register_ops

    register_ops(sub)
    from raftcron.cli.deploy_init import register as register_deploy

    register_deploy(sub)
    from raftcron.cli.jobs_as_code import register as register_jobs_as_code

    register_jobs_as_code(sub)

    sp = sub.add_parser("schedule", help="schedule tools")
    ssub = sp.add_subparsers(dest="schedule_command", required=True, parser_class=_Parser)
    pv = ssub.add_parser("preview", help="print the next fire instants of a schedule")
    kind = pv.add_mutually_exclusive_group(required=True)
    kind.add_argument("--cron", action="append", help="a cron expression")
    kind.add_argument("--at", action="append",
                      help="a one-time local date-time, e.g. 2026-12-24T09:00 (repeatable)")
    kind.add_argument("--every", help="an interval, e.g. 90m or 1h30m")
    pv.add_argument("--anchor", help="with --every: one instant of the series (its phase)")
    pv.add_argument("--tz", default="UTC")
    pv.add_argument("--dst-gap", default="auto")
    pv.add_argument("--dst-fold", default="auto")
    pv.add_argument("--start", help="ISO 8601 instant (default: now)")
    pv.add_argument("--count", type=int, default=10)
    pv.add_argument("--job-id", default="preview", help="job id used for H values")
    pv.add_argument("--json", action="store_true")
    pv.set_defaults(func=cmd_schedule_preview)

    np_ = sub.add_parser("node", help="run one cluster node")
    np_.add_argument("--config", required=True)
    np_.add_argument("--id")
    np_.add_argument("--http-port", type=int)
    np_.add_argument("--raft-addr")
    np_.add_argument("--data-dir")
    np_.add_argument("--secret-file")
    np_.add_argument("--webhook", action="append", metavar="URL",
                     help="cluster-wide webhook receiver (repeatable; adds to config webhooks)")
    np_.add_argument("--webhook-secret-file",
                     help="HMAC key for X-Raftcron-Signature to the cluster-wide receivers "
                          "(default: the cluster webhook key generated on first start)")
    np_.add_argument("--watchdog-url", metavar="URL",
                     help="the leader pings this URL after ticks (at most every 5 s)")
    np_.add_argument("--tokens-file", help="bearer tokens (overrides config tokens_file)")
    np_.add_argument("--tls-cert", help="serve the API over HTTPS with this certificate (PEM)")
    np_.add_argument("--tls-key", help="the private key of --tls-cert (PEM)")
    np_.add_argument("--retention", help="prune finished history older than this "
                     "(e.g. 7d, 12h, 30m; 'off' keeps it forever; default 7d)")
    np_.add_argument("--log-level", default="INFO")
    np_.set_defaults(func=cmd_node)

    up = sub.add_parser("up", help="run a local cluster with a worker in the foreground")
    up.add_argument("--nodes", type=int, default=3)
    up.add_argument("--data-dir", default=".raftcron")
    up.add_argument("--port-base", type=int, default=8700)
    up.add_argument("--workers", type=int, default=1)
    up.set_defaults(func=cmd_up)

    wp = sub.add_parser("worker", help="run a worker that pulls runs over HTTP")
    wp.add_argument("--server", default=DEFAULT_SERVER, help="URL[,URL...]")
    wp.add_argument("--queues", default="default")
    wp.add_argument("--concurrency", type=int, default=4)
    wp.add_argument("--prefetch", type=int, default=None,
                    help="at most this many leases held beyond the concurrency, acknowledged "
                         "and waiting for a slot; fewer while runs are slow (default: 16 x "
                         "the concurrency; 0: lease only for free slots)")
    wp.add_argument("--id")
    wp.add_argument("--token", default=os.environ.get("RAFTCRON_TOKEN"), help=TOKEN_HELP)
    wp.add_argument("--token-file",
                    help="read the token from this file (mode 0600); keeps it out of the "
                         "worker's environment, where jobs could read it")
    wp.add_argument("--run-as", metavar="USER",
                    help="run shell jobs as this user and its groups (the worker must run "
                         "as root)")
    wp.add_argument("--refused-grace-s", type=float, default=60.0,
                    help="how long to keep asking while the token or queues are refused "
                         "(401/403) before the first lease, e.g. while a tokens file reaches "
                         "the nodes; then exit 2 (default 60)")
    wp.add_argument("--secrets-file",
                    help='JSON {"<tenant>/<name>": "value"} of the secrets job targets may '
                         'name as {"secret": "<name>"}; mode 0600')
    wp.add_argument("--log-level", default="INFO")
    wp.set_defaults(func=cmd_worker)

    jp = sub.add_parser("job", help="manage jobs through the API")
    jsub = jp.add_subparsers(dest="action", required=True, parser_class=_Parser)
    for name in ("add", "list", "show", "edit", "pause", "resume", "trigger", "rm", "backfill",
                 "import"):
        a = jsub.add_parser(name)
        a.add_argument("--server", default=DEFAULT_SERVER)
        a.add_argument("--token", default=os.environ.get("RAFTCRON_TOKEN"), help=TOKEN_HELP)
        a.add_argument("--json", action="store_true")
        if name == "import":
            a.add_argument("file", help="JSON list of job objects (POST /v1/jobs bodies)")
            a.add_argument("--update", action="store_true",
                           help="edit existing jobs whose definition differs from the file")
        elif name != "list":
            a.add_argument("job_id")
        if name in ("add", "edit"):
            a.add_argument("--file", help="job JSON")
            a.add_argument("--cron", action="append",
                           help="cron expression; repeat for several schedules")
            a.add_argument("--at", action="append",
                           help="run once at this local date-time, e.g. 2026-12-24T09:00 in "
                                "--tz (repeatable: once at each)")
            a.add_argument("--every", help="run at an interval, e.g. 90m or 1h30m")
            a.add_argument("--anchor",
                           help="with --every: one instant of the series (default 1970-01-01"
                                "T00:00:00Z), e.g. 2026-01-01T00:15:00Z")
            a.add_argument("--calendar", action="append",
                           help="a calendar whose exclusions the job skips (repeatable)")
            a.add_argument("--label", action="append", help="NAME=VALUE (repeatable)")
            a.add_argument("--tz")
            a.add_argument("--shell")
            a.add_argument("--url")
            a.add_argument("--method", default="POST",
                           help="HTTP method of a --url target (default POST)")
            a.add_argument("--misfire-policy", dest="misfire_policy")
            a.add_argument("--overlap-policy", dest="overlap_policy")
            a.add_argument("--max-attempts", dest="max_attempts", type=int)
            a.add_argument("--max-runtime-s", dest="max_runtime_s", type=int)
            a.add_argument("--deadline-s", dest="deadline_s", type=int)
            for key, help_text in RUN_BOUND_OPTIONS.items():
                a.add_argument(f"--{key.replace('_', '-')}", dest=key, type=_BoundValue.parse,
                               help=f"{help_text} (0: off)")
            a.add_argument("--queue")
            a.add_argument("--tenant")
            a.add_argument("--concurrency-group", dest="concurrency_group",
                           help="a concurrency group of the job's tenant (raftcron group)")
        if name == "trigger":
            a.add_argument("--key", help="Idempotency-Key")
            a.add_argument("--override-overlap", action="store_true")
        if name == "backfill":
            a.add_argument("--start", required=True)
            a.add_argument("--end", required=True)
            a.add_argument("--key", help="Idempotency-Key (default: derived from the range)")
            a.add_argument("--max-instants", dest="max_instants", type=int,
                           default=BACKFILL_MAX_INSTANTS,
                           help="refuse a range holding more instants than this "
                                f"(default {BACKFILL_MAX_INSTANTS:,})")
        a.set_defaults(func=cmd_job)
    from raftcron.cli.runs import positive_seconds, register_job_runs
    from raftcron.cli.runs import register as register_runs

    register_job_runs(jsub)
    from raftcron.cli.history import register_job_history

    register_job_history(jsub)
    register_runs(sub, _Parser)
    from raftcron.cli.calendars import register as register_calendars
    from raftcron.cli.calendars import register_bulk_pause

    register_bulk_pause(jsub)
    register_calendars(sub, _Parser)
    from raftcron.cli.groups import register as register_groups

    register_groups(sub, _Parser)

    st = sub.add_parser("status", help="cluster status")
    st.add_argument("--server", default=DEFAULT_SERVER)
    st.add_argument("--token", default=os.environ.get("RAFTCRON_TOKEN"), help=TOKEN_HELP)
    st.add_argument("--json", action="store_true")
    st.add_argument("--watch", action="store_true", help="redraw every --interval seconds")
    st.add_argument("--interval", type=positive_seconds, default=2.0,
                    help="seconds between redraws with --watch (default 2)")
    st.set_defaults(func=cmd_status)

    tp = sub.add_parser("token", help="manage API bearer tokens")
    tsub = tp.add_subparsers(dest="token_command", required=True, parser_class=_Parser)
    tc = tsub.add_parser("create", help="add a token to a tokens file and print it once")
    tc.add_argument("--scope", action="append", required=True,
                    help="admin, read, worker[:q1,q2] or tenant:<name> (repeatable)")
    tc.add_argument("--name", help="a label for the token (shown in 403 messages)")
    tc.add_argument("--expires-in", help="refuse the token after this long (90s, 12h, 30d, 2w)")
    tl = tsub.add_parser("list", help="names, scopes, created, last used, expiry (never the "
                                      "tokens)")
    tl.add_argument("--json", action="store_true")
    tr = tsub.add_parser("revoke", help="remove the tokens with this name")
    tr.add_argument("name")
    for parser, func in ((tc, cmd_token_create), (tl, cmd_token_list), (tr, cmd_token_revoke)):
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--tokens-file", help="the tokens file")
        where.add_argument("--config", help="a node config: its tokens_file (and data_dir, "
                                            "for last-used times)")
        parser.set_defaults(func=func)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)
