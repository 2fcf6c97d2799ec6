"""A crontab as raftcron jobs (pure: text in, jobs and a report out).

Reads user crontabs (`crontab -l`: five time fields, then the command) and the system
format of `/etc/crontab` and `/etc/cron.d/*` (a user field before the command), as Debian's
cron reads them:

- `NAME = value` lines set the environment of the entries below them (quotes stripped).
  `CRON_TZ` (and `TZ`) set the zone the entries below are scheduled in; `SHELL` runs the
  command under that shell; `PATH` and every other name are exported to the command;
  `MAILTO` has no counterpart (raftcron sends no mail): it is named in the report.
- `%` in a command: the first unescaped one ends the command, and the rest is its standard
  input, each further `%` a newline; `\\%` is a literal `%`.
- `@hourly`, `@daily`, `@midnight`, `@weekly`, `@monthly`, `@yearly`, `@annually` are kept
  as they are (the schedule engine reads them); `@reboot` has no instant and is refused.

One job per (user, environment, command); the same command on several lines becomes one
job with several schedules. A job's id comes from its command and user, so importing the
same crontab again gives the same ids (and `apply` then changes nothing). Every line that
is not mapped, or mapped with a caveat, is in the report with its reason: nothing is
dropped silently.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from raftcron.core.schedule import ScheduleError, compile_schedule

MACROS = ("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually")
ENV_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")
ZONE_NAMES = ("CRON_TZ", "TZ")
DEFAULT_SHELL = "/bin/sh"


@dataclass(frozen=True)
class Note:
    """One line of the report: where (file:line), what, why."""

    where: str
    severity: str  # "refused": not imported; "note": imported, read this
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.severity}: {self.message}"


@dataclass
class Imported:
    jobs: list[dict[str, Any]] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


@dataclass
class _Entry:
    schedule: str
    user: str | None
    command: str
    stdin: str | None
    env: tuple[tuple[str, str], ...]
    timezone: str
    line: int


def import_crontab(text: str, *, name: str = "crontab", system: bool = False,
                   timezone: str = "UTC", tenant: str | None = None,
                   queue: str | None = None) -> Imported:
    """The jobs of crontab `text` (`system`: the /etc/crontab format, with a user field),
    and the report. `timezone` is the zone cron ran in (its machine's local zone) for the
    entries before any CRON_TZ line; `name` names the file in the report."""
    out = Imported()
    env: dict[str, str] = {}
    zone_set = zone_noted = False
    entries: list[_Entry] = []
    for number, raw in enumerate(text.splitlines(), 1):
        where = f"{name}:{number}"
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        assignment = ENV_RE.match(line)
        if assignment and not line.startswith("@") and not line[0].isdigit() \
                and not line.startswith("*"):
            key, value = assignment.group(1), _unquote(assignment.group(2))
            if key in ZONE_NAMES:
                if value and not _zone_ok(value):
                    out.notes.append(Note(where, "refused",
                                          f"{key}={value} is not a time zone; the entries "
                                          f"below stay in {timezone}"))
                else:
                    timezone = value or "UTC"
                    zone_set = True
                if key == "TZ":
                    env[key] = value
            elif key == "MAILTO":
                out.notes.append(Note(where, "note",
                                      f"MAILTO={value or '(empty)'}: raftcron sends no mail; "
                                      "use the job's notify webhooks or a channel"))
            else:
                env[key] = value
            continue
        entry = _parse_entry(line, number, where, system, env, timezone, out.notes)
        if entry is not None:
            if not zone_set and not zone_noted:
                out.notes.append(Note(where, "note", f"no CRON_TZ above: scheduled in "
                                      f"{timezone} (--tz names the zone cron ran in)"))
                zone_noted = True
            entries.append(entry)
    out.jobs = _jobs_of(entries, name, tenant, queue, out.notes)
    return out


def _parse_entry(line: str, number: int, where: str, system: bool, env: dict[str, str],
                 timezone: str, notes: list[Note]) -> _Entry | None:
    if line.startswith("@"):
        macro, rest = (line.split(None, 1) + [""])[:2]
        if macro.lower() == "@reboot":
            notes.append(Note(where, "refused",
                              "@reboot runs when a machine starts; a cluster has no such "
                              "instant (run it from the host's service manager)"))
            return None
        if macro.lower() not in MACROS:
            notes.append(Note(where, "refused", f"unknown macro {macro!r}"))
            return None
        schedule = macro.lower()
        fields_after = rest
    else:
        parts = line.split(None, 5)
        if len(parts) < 6:
            notes.append(Note(where, "refused",
                              "needs five time fields and a command"
                              + (" after the user field" if system else "")))
            return None
        schedule = " ".join(parts[:5])
        fields_after = parts[5]
    user: str | None = None
    if system:
        user, fields_after = (fields_after.strip().split(None, 1) + [""])[:2]
        if not user or not fields_after.strip():
            notes.append(Note(where, "refused", "needs a user field and a command"))
            return None
    command, stdin = split_percent(fields_after)
    if not command.strip():
        notes.append(Note(where, "refused", "has no command"))
        return None
    try:
        compile_schedule(schedule, timezone)
    except ScheduleError as e:
        notes.append(Note(where, "refused", f"schedule {schedule!r}: {e}"))
        return None
    return _Entry(schedule, user, command.strip(), stdin, tuple(sorted(env.items())),
                  timezone, number)


def split_percent(command: str) -> tuple[str, str | None]:
    """cron's `%`: the command before the first unescaped `%`, and the standard input
    after it (each further unescaped `%` a newline), or None without one. `\\%` is `%`."""
    head: list[str] = []
    body: list[str] | None = None
    i = 0
    while i < len(command):
        ch = command[i]
        if ch == "\\" and i + 1 < len(command) and command[i + 1] == "%":
            (head if body is None else body).append("%")
            i += 2
            continue
        if ch == "%":
            if body is None:
                body = []
            else:
                body.append("\n")
        else:
            (head if body is None else body).append(ch)
        i += 1
    return "".join(head), None if body is None else "".join(body)


def shell_command(entry_command: str, stdin: str | None, env: tuple[tuple[str, str], ...]
                  ) -> str:
    """The shell target running `entry_command` as cron would: its environment exported
    first, under its SHELL, with its standard input."""
    shell = DEFAULT_SHELL
    exports = []
    for key, value in env:
        if key == "SHELL":
            shell = value or DEFAULT_SHELL
            continue
        exports.append(f"export {key}={shlex.quote(value)}")
    command = entry_command
    if shell != DEFAULT_SHELL:
        command = f"exec {shlex.quote(shell)} -c {shlex.quote(command)}"
    if stdin is not None:
        command = f"printf '%s' {shlex.quote(stdin)} | {{ {command}\n}}"
    return "\n".join([*exports, command])


def job_id_for(command: str, user: str | None) -> str:
    """A stable id: `cron-` + the command's first words + a hash of user and command."""
    digest = hashlib.sha256(f"{user or ''}\0{command}".encode()).hexdigest()[:10]
    words = re.sub(r"[^A-Za-z0-9]+", "-", command).strip("-").lower()[:40].strip("-")
    return f"cron-{words + '-' if words else ''}{digest}"


def _jobs_of(entries: list[_Entry], name: str, tenant: str | None, queue: str | None,
             notes: list[Note]) -> list[dict[str, Any]]:
    groups: dict[tuple[Any, ...], list[_Entry]] = {}
    for e in entries:
        groups.setdefault((e.user, e.env, e.command, e.stdin), []).append(e)
    jobs = []
    for (user, env, command, stdin), members in groups.items():
        job_id = job_id_for(command if stdin is None else f"{command}%{stdin}", user)
        kept: list[_Entry] = []
        for e in members:
            if any((k.schedule, k.timezone) == (e.schedule, e.timezone) for k in kept):
                notes.append(Note(f"{name}:{e.line}", "note",
                                  f"the same schedule and command as line "
                                  f"{members[0].line}: one run per instant, not two"))
                continue
            kept.append(e)
        job: dict[str, Any] = {"id": job_id,
                               "target": {"shell": shell_command(command, stdin, env)}}
        if len(kept) == 1:
            job["schedule"] = {"cron": kept[0].schedule, "timezone": kept[0].timezone}
        else:
            job["schedules"] = [{"cron": e.schedule, "timezone": e.timezone,
                                 "name": f"line-{e.line}"} for e in kept]
        # cron runs a missed minute never: no catch-up after downtime, and one run at a
        # time is not promised either (cron would start a second copy).
        job["misfire_policy"] = "skip"
        job["max_attempts"] = 1
        labels = {"source": "crontab"}
        if user is not None:
            labels["cron-user"] = re.sub(r"[^A-Za-z0-9._-]", "_", user)[:64]
            notes.append(Note(f"{name}:{members[0].line}", "note",
                              f"runs as user {user} under cron; a raftcron worker runs it "
                              "as the worker's own user"))
        job["labels"] = labels
        if tenant:
            job["tenant"] = tenant
        if queue:
            job["queue"] = queue
        jobs.append(job)
    return jobs


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _zone_ok(zone: str) -> bool:
    try:
        compile_schedule("0 0 * * *", zone)
    except ScheduleError:
        return False
    return True
