""""Did it run, what did it print?": `raftcron job runs`, `run show`, `run logs --follow`,
`alerts` (list, ack, resolve) and `status --watch`.

Exit codes: 0 done; 1 the API refused (unknown job, occurrence or alert; not allowed; a
resolved alert) or no node answered, with one line on stderr; 2 bad arguments.
`run logs --follow` ends with 0 when the occurrence succeeded and 1 when it ended
otherwise (failed, skipped, cancelled), so a script can wait on it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from raftcron.cli.client import Client
from raftcron.cli.common import (
    EXIT_USAGE,
    api_call,
    client_for,
    connection_args,
    exits_1_when_refused,
    job_zone,
    table,
    url_path,
)
from raftcron.core.timefmt import ms_to_local_iso, parse_iso_ms

OCC_STATUSES = ("pending", "running", "succeeded", "failed", "skipped", "cancelled")
OCC_KINDS = ("scheduled", "manual", "backfill")
TERMINAL = frozenset({"succeeded", "failed", "skipped", "cancelled"})
ALERT_STATUSES = ("open", "resolved", "all")
MAX_RUNS = 500


# --- arguments -----------------------------------------------------------------------------

def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError("must be between 0.1 and 3600 seconds")
    return value


def run_limit(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_RUNS:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to {MAX_RUNS}")
    return int(text)


def register_job_runs(jsub: Any) -> None:
    """`raftcron job runs JOB` (added to the `job` subcommands)."""
    p = jsub.add_parser("runs", help="a job's recent occurrences: when, outcome, worker")
    p.add_argument("job_id")
    p.add_argument("--status", choices=OCC_STATUSES)
    p.add_argument("--kind", choices=OCC_KINDS)
    p.add_argument("--limit", type=run_limit, default=20, help=f"1-{MAX_RUNS} (default 20)")
    connection_args(p)
    p.set_defaults(func=cmd_job_runs)


def register(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """The `run` and `alerts` command groups."""
    rp = sub.add_parser("run", help="one occurrence: its attempts and their output")
    rsub = rp.add_subparsers(dest="run_command", required=True, parser_class=parser_class)
    show = rsub.add_parser("show", help="an occurrence's attempts and their output")
    show.add_argument("occurrence_id")
    connection_args(show)
    show.set_defaults(func=cmd_run_show)
    logs = rsub.add_parser("logs", help="an occurrence's output (--follow: until it ends)")
    logs.add_argument("occurrence_id")
    logs.add_argument("--follow", "-f", action="store_true",
                      help="keep printing new output until the occurrence has ended")
    logs.add_argument("--interval", type=positive_seconds, default=1.0,
                      help="seconds between polls with --follow (default 1)")
    connection_args(logs)
    logs.set_defaults(func=cmd_run_logs)
    cancel = rsub.add_parser("cancel", help="cancel a queued or running occurrence")
    cancel.add_argument("occurrence_id")
    cancel.add_argument("--note", required=True, help="why (kept with the occurrence)")
    cancel.add_argument("--key", help="Idempotency-Key: a retry with it acts once "
                        "(default: a fresh one, kept across this command's own retries)")
    connection_args(cancel)
    cancel.set_defaults(func=cmd_run_cancel)

    ap = sub.add_parser("alerts", help="alerts (open by default); ack or resolve one")
    ap.add_argument("--status", choices=ALERT_STATUSES, default="open")
    ap.add_argument("--job", dest="job_id", help="only this job's alerts")
    connection_args(ap)
    ap.set_defaults(func=cmd_alerts)
    asub = ap.add_subparsers(dest="alerts_action", parser_class=parser_class)
    for action, help_text in (("ack", "acknowledge an alert: someone is on it"),
                              ("resolve", "resolve an alert by hand")):
        a = asub.add_parser(action, help=help_text)
        a.add_argument("alert_id")
        a.add_argument("--note", required=True, help="why (kept in the alert's history)")
        a.add_argument("--key", help="Idempotency-Key: a retry with it acts once "
                       "(default: a fresh one, kept across this command's own retries)")
        connection_args(a, nested=True)
        a.set_defaults(func=cmd_alert_action, action=action)


# --- helpers ---------------------------------------------------------------------------------

def _ms(iso: str | None) -> int | None:
    return None if iso is None else parse_iso_ms(iso, "instant")


def run_duration(att: dict[str, Any]) -> str:
    """An attempt's duration: finish - start as its worker reported them ("" for an
    attempt with no reported start: its lease time is not when it ran)."""
    took = att.get("duration_s")
    return "" if took is None else seconds_text(took)


def seconds_text(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.3f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def outcome(occ: dict[str, Any]) -> str:
    """The status, with the reason when there is one: `skipped (misfire)`."""
    return f"{occ['status']} ({occ['reason']})" if occ.get("reason") else occ["status"]


# --- job runs ------------------------------------------------------------------------------------

@exits_1_when_refused
def cmd_job_runs(args: argparse.Namespace) -> int:
    client = client_for(args)
    try:
        job = client.request("GET", f"/v1/jobs/{url_path(args.job_id)}", retries=3)
        params: dict[str, Any] = {"job_id": args.job_id, "limit": args.limit}
        for key in ("status", "kind"):
            if getattr(args, key):
                params[key] = getattr(args, key)
        page = client.request("GET", "/v1/occurrences", params=params, retries=3)
        occurrences = page["occurrences"]
        for occ in occurrences:  # the attempts say which worker ran it and for how long
            occ["attempt_list"] = [] if not occ["attempts"] else client.request(
                "GET", f"/v1/occurrences/{url_path(occ['id'])}", retries=3)["attempt_list"]
    finally:
        client.close()
    zone = job_zone(job)  # several schedules: the first's
    if args.json:
        print(json.dumps({"job_id": args.job_id, "timezone": zone,
                          "occurrences": occurrences}, indent=2))
        return 0
    # The instant in UTC, and in the job's own zone when that is another one.
    local = zone not in ("UTC", "Etc/UTC")
    rows = []
    for occ in occurrences:
        last = occ["attempt_list"][-1] if occ["attempt_list"] else {}
        instant_ms = _ms(occ["scheduled_for"]) or 0
        rows.append((
            occ["scheduled_for"], *([ms_to_local_iso(instant_ms, zone)] if local else []),
            occ["kind"], outcome(occ), str(occ["attempts"]), last.get("started_at") or "",
            run_duration(last), last.get("worker_id") or "", occ["id"]))
    if not rows:
        print(f"no occurrences of {args.job_id} match", file=sys.stderr)
        return 0
    table(("instant (UTC)", *([f"instant ({zone})"] if local else []), "kind", "status",
           "attempts", "started (UTC)", "duration", "worker", "occurrence"), rows)
    return 0


# --- run show / logs -----------------------------------------------------------------------------

def _occurrence(client: Client, occ_id: str) -> dict[str, Any]:
    return client.request("GET", f"/v1/occurrences/{url_path(occ_id)}", retries=3)


@exits_1_when_refused
def cmd_run_show(args: argparse.Namespace) -> int:
    occ = api_call(args, "GET", f"/v1/occurrences/{url_path(args.occurrence_id)}", retries=3)
    if args.json:
        print(json.dumps(occ, indent=2))
        return 0
    print(f"occurrence  {occ['id']}\njob         {occ['job_id']} ({occ['kind']}, tenant "
          f"{occ['tenant']}, queue {occ['queue']})\nscheduled   {occ['scheduled_for']}\n"
          f"status      {outcome(occ)}\nattempts    {occ['attempts']}\nfinished    "
          f"{occ['finished_at'] or '-'}")
    for att in occ["attempt_list"]:
        print(f"\nattempt {att['number']}: {att['status']}"
              f"  worker {att['worker_id'] or '-'}  token {att['fencing_token'] or '-'}"
              f"  exit {'-' if att['exit_code'] is None else att['exit_code']}")
        print(f"  leased {att['leased_at'] or '-'}  started {att.get('started_at') or '-'}"
              f"  finished {att['finished_at'] or '-'}  duration {run_duration(att) or '-'}")
        if att.get("error"):
            print(f"  error: {att['error']}")
        if att.get("output"):
            print("  output:")
            for line in att["output"].splitlines():
                print(f"    {line}")
    return 0


class OutputFollower:
    """Prints what each attempt's output gained since the last look, and says (on stderr)
    when a new attempt starts or the occurrence ends. Workers report output when an
    attempt finishes, so it grows attempt by attempt."""

    def __init__(self) -> None:
        self.printed: dict[str, int] = {}
        self.seen_status: dict[str, str] = {}

    def show(self, occ: dict[str, Any]) -> None:
        for att in occ["attempt_list"]:
            if self.seen_status.get(att["id"]) != att["status"]:
                self.seen_status[att["id"]] = att["status"]
                print(f"-- attempt {att['number']} {att['status']}"
                      f"{' on ' + att['worker_id'] if att['worker_id'] else ''}",
                      file=sys.stderr, flush=True)
            output = att.get("output") or ""
            done = self.printed.get(att["id"], 0)
            if len(output) > done:
                sys.stdout.write(output[done:])
                if not output.endswith("\n"):
                    sys.stdout.write("\n")
                sys.stdout.flush()
                self.printed[att["id"]] = len(output)


@exits_1_when_refused
def cmd_run_logs(args: argparse.Namespace) -> int:
    client = client_for(args)
    follower = OutputFollower()
    try:
        while True:
            occ = _occurrence(client, args.occurrence_id)
            follower.show(occ)
            if not args.follow:
                return 0
            if occ["status"] in TERMINAL:
                print(f"-- occurrence {outcome(occ)}", file=sys.stderr)
                return 0 if occ["status"] == "succeeded" else 1
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0
    finally:
        client.close()


# --- alerts --------------------------------------------------------------------------------------

def alert_state(alert: dict[str, Any]) -> str:
    acked = alert.get("acknowledged")
    if alert["status"] == "open" and acked:
        return f"acked by {acked['by']}"
    return alert["status"]


@exits_1_when_refused
def cmd_alerts(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"status": args.status, "limit": 500}
    if args.job_id:
        params["job_id"] = args.job_id
    data = api_call(args, "GET", "/v1/alerts", params=params, retries=3)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    if not data["alerts"]:
        print(f"no {args.status if args.status != 'all' else ''} alerts".replace("  ", " "),
              file=sys.stderr)
        return 0
    table(("alert", "kind", "state", "job", "reason", "cause", "raised", "message"), [
        (a["id"], a["kind"], alert_state(a), a["job_id"] or "-", a["reason"],
         a.get("cause") or "-", a["raised_at"], (a["message"] or "")[:80])
        for a in data["alerts"]])
    return 0


@exits_1_when_refused
def cmd_alert_action(args: argparse.Namespace) -> int:
    if not args.note.strip():
        print("raftcron: --note must say why", file=sys.stderr)
        return EXIT_USAGE
    # A key always: the client retries a 503 whose outcome is unknown, which must not act
    # twice (a second ack would be refused as "already acknowledged" by ourselves).
    headers = {"Idempotency-Key": args.key or f"cli-{uuid.uuid4().hex}"}
    alert = api_call(args, "POST", f"/v1/alerts/{url_path(args.alert_id)}/{args.action}",
                     json={"note": args.note}, headers=headers, retries=3)
    if args.json:
        print(json.dumps(alert, indent=2))
        return 0
    last = alert["history"][-1]
    table(("alert", "state", "by", "at", "note"),
           [(alert["id"], alert_state(alert), last.get("by", ""), last["at"],
             last.get("note", ""))])
    return 0


@exits_1_when_refused
def cmd_run_cancel(args: argparse.Namespace) -> int:
    """Queued: cancelled now. Running: its worker is told at its next heartbeat and kills
    the job's process group; the occurrence ends `cancelled` once it has (follow it with
    `run logs -f`). Exit 1 when the API refuses (an occurrence that already ended: 409)."""
    if not args.note.strip():
        print("raftcron: --note must say why", file=sys.stderr)
        return EXIT_USAGE
    headers = {"Idempotency-Key": args.key or f"cli-{uuid.uuid4().hex}"}
    occ = api_call(args, "POST", f"/v1/occurrences/{url_path(args.occurrence_id)}/cancel",
                   json={"note": args.note}, headers=headers, retries=3)
    if args.json:
        print(json.dumps(occ, indent=2))
        return 0
    state = ("cancelled" if occ["status"] == "cancelled"
             else f"{occ['status']}, stopping (its worker kills it at its next heartbeat)")
    by = occ.get("cancellation") or {}
    table(("occurrence", "state", "by", "note"),
           [(occ["id"], state, by.get("by", ""), by.get("note", ""))])
    return 0


# --- status --watch --------------------------------------------------------------------------

def watch(render: Callable[[], int], interval: float) -> int:
    """Run `render` every `interval` seconds, redrawing in place on a terminal (one frame
    after another otherwise); a failed frame is shown and the watch goes on. Ctrl-C: 0."""
    tty = sys.stdout.isatty()
    try:
        while True:
            if tty:
                sys.stdout.write("\x1b[H\x1b[2J")
            stamp = datetime.now().astimezone().isoformat(timespec="seconds")
            print(f"every {interval:g}s, {stamp} (Ctrl-C to stop)\n", flush=True)
            render()
            sys.stdout.flush()
            if not tty:
                print(flush=True)
            time.sleep(interval)
    except KeyboardInterrupt:
        return 0
