"""`raftcron job add|list|show|edit|pause|resume|trigger|rm|backfill|import`: jobs through
the API.

Exit codes: 0 done; 2 bad arguments, or the API refused or no node answered (one line on
stderr); `job import` exits 1 when a job was refused, or differs and was not updated.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from raftcron.cli.common import (
    DEFAULT_SERVER,
    TOKEN_HELP,
    UsageError,
    client_for,
    fail,
    job_zone,
    print_output,
    schedule_entries,
)
from raftcron.core.chains import CHAIN_ON

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


def schedule_cell(job: dict[str, Any]) -> str:
    """A job's schedules in one cell; a chained job's upstream."""
    if job.get("after"):
        return f"after {job['after']['job']} ({job['after']['on']})"
    return " | ".join(_schedule_text(s) for s in job.get("schedules") or [job["schedule"]])


def _job_body(args: argparse.Namespace) -> dict[str, Any]:
    if args.file:
        body = _read_json(args.file)
        if not isinstance(body, dict):
            raise UsageError("--file must hold a JSON object")
    else:
        body = {}
    if getattr(args, "job_id", None):
        body["id"] = args.job_id
    entries = schedule_entries(args)
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
    if args.after:
        if entries:
            raise UsageError("--after makes a chained job, which has no schedule: give "
                             "--after or --cron/--at/--every, not both")
        body.pop("schedule", None)
        body.pop("schedules", None)
        body["after"] = {"job": args.after, "on": args.on}
    elif args.on != "success":
        raise UsageError("--on goes with --after")
    elif entries:
        body.pop("after", None)  # a schedule given to a chained job ends its chain
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
        return fail(str(e))
    except (UsageError, OSError, ValueError) as e:
        return fail(str(e))


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
        print_output(args, data, [(j["id"], j["tenant"], schedule_cell(j), job_zone(j),
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
    sched = parse_job({k: job[k] for k in ("id", "schedule", "schedules", "target", "after")
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


def register(sub: Any, parser_class: type[argparse.ArgumentParser]) -> Any:
    """`raftcron job ...`; returns the `job` subcommands, to which the other command
    modules add theirs (`job runs`, `job history`, `job pause-all`, ...)."""
    jp = sub.add_parser("job", help="manage jobs through the API")
    jsub = jp.add_subparsers(dest="action", required=True, parser_class=parser_class)
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
            a.add_argument("--after", metavar="JOB",
                           help="a chained job: one run for each run of JOB that ends as "
                                "--on says (instead of a schedule)")
            a.add_argument("--on", choices=CHAIN_ON, default="success",
                           help="with --after: which ends of JOB's runs start this job "
                                "(default success)")
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
    return jsub
