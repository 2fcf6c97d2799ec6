"""Jobs as code: `raftcron apply -f PATH`, `raftcron export` and `raftcron import`.

`apply` reads jobs files (cli.job_files), asks the cluster for the plan (`POST
/v1/jobs:apply` with `dry_run`: what would be created, changed field by field, and with
`--prune` deleted, computed by the cluster against the stored jobs, secrets shown as
`***`), prints it, and then applies exactly that plan: the second request names the
version of every job the plan read, and the cluster refuses the whole apply (409, naming
the job) if any of them changed since. Everything commits in one entry, or nothing does.

Exit codes: 0 applied (or nothing to do, or `--dry-run`); 1 the cluster refused (a
conflict, a job of a tenant the token may not write) or no node answered; 2 a bad file,
job or argument, with one line naming the file, the job and the field.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from raftcron.cli import job_files
from raftcron.cli.client import ApiError
from raftcron.cli.common import EXIT_USAGE, api_call, connection_args, refused
from raftcron.core.importers.cronjob import import_cronjobs
from raftcron.core.importers.crontab import Imported, import_crontab
from raftcron.core.job_files import FORMATS, dump, exported

MAX_LISTED = 10_000


def _usage(message: str) -> int:
    print(f"raftcron: {message}", file=sys.stderr)
    return EXIT_USAGE


def parse_selector(text: str | None) -> dict[str, str]:
    """`--selector team=billing` as {"team": "billing"}; ValueError naming the problem."""
    if not text:
        return {}
    out: dict[str, str] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--selector: {part!r} is not label=value")
        out[key.strip()] = value.strip()
    return out


# --- apply ----------------------------------------------------------------------------------

def cmd_apply(args: argparse.Namespace) -> int:
    try:
        jobs = job_files.load(args.file)
        selector = parse_selector(args.selector)
    except (job_files.JobFileError, ValueError) as e:
        return _usage(str(e))
    if selector and not args.prune:
        return _usage("--selector: only with --prune (it chooses the jobs prune may delete)")
    body: dict[str, Any] = {"jobs": [j.job for j in jobs], "prune": args.prune,
                            "selector": selector, "dry_run": True}
    if args.tenant:
        body["tenant"] = args.tenant
    where = {j.job["id"]: j.where for j in jobs}
    try:
        plan = api_call(args, "POST", "/v1/jobs:apply", json=body)
        if args.json and args.dry_run:
            print(json.dumps(plan, indent=2))
            return 0
        if not args.json:
            print_plan(plan)
        if args.dry_run or not has_changes(plan):
            if args.json:
                print(json.dumps(plan, indent=2))
            return 0
        body.update(dry_run=False, expect=plan["expect"])
        done = api_call(args, "POST", "/v1/jobs:apply", json=body)
    except ApiError as e:
        if e.status == 400 and e.field:
            return _usage(f"{_where_of(e.field, body['jobs'], where)}: {e.message}")
        return refused(e)
    if args.json:
        print(json.dumps(done, indent=2))
    else:
        print(f"applied: {len(done['create'])} created, {len(done['change'])} changed, "
              f"{len(done['delete'])} deleted")
    return 0


def _where_of(field: str, jobs: list[dict[str, Any]], where: dict[str, str]) -> str:
    """`jobs.3.schedule.cron` as "file: jobs[i] (id): schedule.cron"."""
    head, _, rest = field.partition(".")
    index, _, inner = rest.partition(".")
    if head == "jobs" and index.isdigit() and int(index) < len(jobs):
        job_id = jobs[int(index)].get("id")
        return f"{where.get(job_id, job_id)}: {inner or 'job'}"
    return field


def has_changes(plan: dict[str, Any]) -> bool:
    return bool(plan["create"] or plan["change"] or plan["delete"])


def print_plan(plan: dict[str, Any]) -> None:
    for item in plan["create"]:
        print(f"+ create {item['id']}")
    for item in plan["change"]:
        print(f"~ change {item['id']}")
        for change in item["changes"]:
            print(f"    {change['field']}: {_shown(change['before'])} → "
                  f"{_shown(change['after'])}")
    for item in plan["delete"]:
        print(f"- delete {item['id']}")
    changed = len(plan["create"]) + len(plan["change"]) + len(plan["delete"])
    if changed == 0:
        print(f"0 changed ({len(plan['unchanged'])} unchanged)")
    else:
        print(f"{len(plan['create'])} to create, {len(plan['change'])} to change, "
              f"{len(plan['delete'])} to delete, {len(plan['unchanged'])} unchanged")


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


# --- export ---------------------------------------------------------------------------------

def exported_jobs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every job the token reads (of `--tenant` when given), in the apply shape: no version,
    secrets as `***` (apply keeps the stored value for those), nulls left out."""
    jobs: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 500}
    if args.tenant:
        params["tenant"] = args.tenant
    while len(jobs) < MAX_LISTED:
        page = api_call(args, "GET", "/v1/jobs", params=params)
        jobs += [exported(job) for job in page["jobs"]]
        if not page.get("next_cursor"):
            break
        params["cursor"] = page["next_cursor"]
    return jobs


def cmd_export(args: argparse.Namespace) -> int:
    try:
        text = dump(exported_jobs(args), args.format)
    except ApiError as e:
        return refused(e)
    return _write(text, args.out)


def _write(text: str, out: str | None) -> int:
    if out is None or out == "-":
        sys.stdout.write(text)
        return 0
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as e:
        return _usage(f"--out: cannot write {out}: {e.strerror}")
    print(f"wrote {out}", file=sys.stderr)
    return 0


# --- import ---------------------------------------------------------------------------------

def cmd_import(args: argparse.Namespace) -> int:
    try:
        text = Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return _usage(f"{args.file}: cannot be read: {e}")
    if args.source == "crontab":
        system = args.system or args.file == "/etc/crontab" or "/cron.d/" in args.file
        imported = import_crontab(text, name=args.file, system=system, timezone=args.tz,
                                  tenant=args.tenant, queue=args.queue)
    else:
        try:
            docs = _yaml_docs(text, args.file)
        except job_files.JobFileError as e:
            return _usage(str(e))
        imported = import_cronjobs(docs, name=args.file, tenant=args.tenant,
                                   queue=args.queue)
    report(imported)
    if not imported.jobs:
        return _usage(f"{args.file}: nothing could be imported (see the report above)")
    return _write(dump(imported.jobs, args.format), args.out)


def _yaml_docs(text: str, name: str) -> list[Any]:
    import yaml

    try:
        return list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        raise job_files.JobFileError(f"{name}: not valid YAML: {str(e).splitlines()[0]}"
                                     ) from None
    except RecursionError:
        raise job_files.JobFileError(f"{name}: nested too deeply") from None


def report(imported: Imported) -> None:
    """The import report on stderr: one line for every line or field not mapped as is."""
    for note in imported.notes:
        print(note, file=sys.stderr)
    refused = sum(1 for n in imported.notes if n.severity == "refused")
    print(f"import: {len(imported.jobs)} job(s) written, {refused} refused, "
          f"{len(imported.notes) - refused} note(s)", file=sys.stderr)


# --- parser ---------------------------------------------------------------------------------

def register(sub: Any) -> None:
    ap = sub.add_parser("apply", help="create, change (and with --prune delete) jobs to "
                                      "match jobs files")
    ap.add_argument("-f", "--file", required=True, help="a .toml/.yaml/.json jobs file or a "
                                                        "directory of them")
    ap.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    ap.add_argument("--prune", action="store_true",
                    help="delete the tenant's jobs (matching --selector) the files do not name")
    ap.add_argument("--selector", help="label=value[,label=value]: the jobs --prune may delete")
    ap.add_argument("--tenant", help="the tenant the files' jobs belong to (default: the "
                                     "token's, or default)")
    connection_args(ap)
    ap.set_defaults(func=cmd_apply)

    ep = sub.add_parser("export", help="write the jobs as a jobs file (apply reads it back)")
    ep.add_argument("--tenant")
    ep.add_argument("--format", choices=FORMATS, default="toml")
    ep.add_argument("--out", help="file to write (default: stdout)")
    connection_args(ep)
    ep.set_defaults(func=cmd_export)

    ip = sub.add_parser("import", help="turn a crontab or Kubernetes CronJobs into a jobs file")
    isub = ip.add_subparsers(dest="source", required=True, parser_class=type(ip))
    for source, help_text in (("crontab", "a user crontab, /etc/crontab or /etc/cron.d/*"),
                              ("cronjob", "a YAML file of Kubernetes CronJob manifests")):
        p = isub.add_parser(source, help=help_text)
        p.add_argument("file")
        if source == "crontab":
            p.add_argument("--system", action="store_true",
                           help="the system format, with a user field (default for "
                                "/etc/crontab and /etc/cron.d/*)")
            p.add_argument("--tz", default="UTC",
                           help="the zone cron ran in, for entries before any CRON_TZ")
        p.add_argument("--tenant")
        p.add_argument("--queue")
        p.add_argument("--format", choices=FORMATS, default="toml")
        p.add_argument("--out", help="file to write (default: stdout)")
        p.set_defaults(func=cmd_import)
