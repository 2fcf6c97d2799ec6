"""Kubernetes CronJobs as raftcron jobs (pure: parsed manifests in, jobs and a report out).

Mapped, field by field (batch/v1):

| CronJob | raftcron job |
|---|---|
| `metadata.name` (and `namespace`) | `id` (`<namespace>.<name>` outside `default`) |
| `spec.schedule`, `spec.timeZone` | `schedule.cron`, `schedule.timezone` (UTC without one) |
| `spec.suspend` | `paused` |
| `spec.concurrencyPolicy` Allow / Forbid / Replace | `overlap_policy` allow / forbid / replace |
| `spec.startingDeadlineSeconds` | `misfire_grace_s`, with `misfire_policy = run_once` |
| `jobTemplate.spec.activeDeadlineSeconds` | `max_runtime_s` |
| `jobTemplate.spec.backoffLimit` | `max_attempts` = backoffLimit + 1 (Kubernetes' default 6 → 7) |
| the container's `command` + `args` | a shell target (joined with shell quoting) |
| `metadata.labels` | `labels` (names and values that fit raftcron's label syntax) |

The image, env, volumes and everything else a container has are named in the report: a
raftcron worker runs the command on its own host.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from raftcron.core.importers.crontab import Imported, Note
from raftcron.core.schedule import ScheduleError, compile_schedule

CONCURRENCY = {"Allow": "allow", "Forbid": "forbid", "Replace": "replace"}
DEFAULT_BACKOFF_LIMIT = 6
LABEL_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9._-]{0,64}$")
# What a CronJob's spec may hold that has a raftcron counterpart (the rest is reported).
MAPPED_SPEC = {"schedule", "timeZone", "suspend", "concurrencyPolicy",
               "startingDeadlineSeconds", "jobTemplate"}
MAPPED_JOB_SPEC = {"activeDeadlineSeconds", "backoffLimit", "template"}
MAPPED_POD_SPEC = {"containers"}
MAPPED_CONTAINER = {"name", "image", "command", "args"}


def import_cronjobs(docs: list[Any], *, name: str = "cronjob.yaml",
                    tenant: str | None = None, queue: str | None = None) -> Imported:
    """The jobs of the CronJob manifests in `docs` (one YAML file's documents; a `List`
    is read item by item), and the report. Other kinds are reported, not imported."""
    out = Imported()
    for i, doc in enumerate(_items(docs)):
        where = f"{name}#{i + 1}"
        if not isinstance(doc, dict):
            out.notes.append(Note(where, "refused", "is not a manifest (an object)"))
            continue
        if doc.get("kind") != "CronJob":
            out.notes.append(Note(where, "refused",
                                  f"kind {doc.get('kind')!r} is not a CronJob"))
            continue
        job = _job_of(doc, where, out.notes)
        if job is not None:
            if tenant:
                job["tenant"] = tenant
            if queue:
                job["queue"] = queue
            out.jobs.append(job)
    return out


def _items(docs: list[Any]) -> list[Any]:
    items: list[Any] = []
    for doc in docs:
        if doc is None:
            continue
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(
                doc.get("items"), list):
            items += doc["items"]
        else:
            items.append(doc)
    return items


def _job_of(doc: dict[str, Any], where: str, notes: list[Note]) -> dict[str, Any] | None:
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        notes.append(Note(where, "refused", "has no metadata.name"))
        return None
    namespace = meta.get("namespace") or "default"
    job_id = name if namespace == "default" else f"{namespace}.{name}"
    where = f"{where} ({job_id})"
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", job_id):
        notes.append(Note(where, "refused", f"{job_id!r} cannot be a job id"))
        return None
    schedule = spec.get("schedule")
    zone = spec.get("timeZone") or "UTC"
    if not isinstance(schedule, str):
        notes.append(Note(where, "refused", "has no spec.schedule"))
        return None
    if not spec.get("timeZone"):
        notes.append(Note(where, "note", "no spec.timeZone: scheduled in UTC (the "
                          "controller would use its own local zone)"))
    try:
        compile_schedule(schedule, zone)
    except ScheduleError as e:
        notes.append(Note(where, "refused", f"spec.schedule {schedule!r}: {e}"))
        return None
    job_spec = _dict(_dict(spec.get("jobTemplate")).get("spec"))
    pod = _dict(_dict(job_spec.get("template")).get("spec"))
    containers = pod.get("containers") if isinstance(pod.get("containers"), list) else []
    if not containers or not isinstance(containers[0], dict):
        notes.append(Note(where, "refused", "has no container to take a command from"))
        return None
    container = containers[0]
    argv = [*_strings(container.get("command")), *_strings(container.get("args"))]
    if not argv:
        notes.append(Note(where, "refused", f"container {container.get('name')!r} has no "
                          "command or args (the image's entrypoint cannot be run by a worker)"))
        return None
    job: dict[str, Any] = {"id": job_id, "schedule": {"cron": schedule, "timezone": zone},
                           "target": {"shell": shlex.join(argv)}}
    notes.append(Note(where, "note", f"image {container.get('image')!r}: a worker runs the "
                      "command on its own host, not in the image"))
    if len(containers) > 1:
        notes.append(Note(where, "note", f"only the first of {len(containers)} containers "
                          "is imported"))
    for key in sorted(set(container) - MAPPED_CONTAINER):
        notes.append(Note(where, "note", f"container {key} is not imported"))
    for key in sorted(set(pod) - MAPPED_POD_SPEC):
        notes.append(Note(where, "note", f"pod spec.{key} has no counterpart"
                          + (" (retries follow max_attempts)" if key == "restartPolicy" else "")))
    if spec.get("suspend") is True:
        job["paused"] = True
    policy = spec.get("concurrencyPolicy")
    if policy is not None:
        if policy in CONCURRENCY:
            job["overlap_policy"] = CONCURRENCY[policy]
        else:
            notes.append(Note(where, "refused", f"concurrencyPolicy {policy!r} is not "
                              "Allow, Forbid or Replace; the default (allow) is used"))
    deadline = spec.get("startingDeadlineSeconds")
    if isinstance(deadline, int) and not isinstance(deadline, bool) and deadline >= 0:
        job["misfire_policy"] = "run_once"
        job["misfire_grace_s"] = deadline
    active = job_spec.get("activeDeadlineSeconds")
    if isinstance(active, int) and not isinstance(active, bool) and active > 0:
        job["max_runtime_s"] = active
    backoff = job_spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
    if isinstance(backoff, int) and not isinstance(backoff, bool) and backoff >= 0:
        job["max_attempts"] = backoff + 1
    labels = {k: v for k, v in _dict(meta.get("labels")).items()
              if isinstance(k, str) and isinstance(v, str) and LABEL_RE.fullmatch(k)
              and LABEL_VALUE_RE.fullmatch(v)}
    skipped = set(_dict(meta.get("labels"))) - set(labels)
    if skipped:
        notes.append(Note(where, "note", f"labels not in raftcron's syntax are left out: "
                          f"{', '.join(sorted(map(str, skipped)))}"))
    job["labels"] = {**dict(sorted(labels.items())[:15]), "source": "cronjob"}
    for key in sorted(set(spec) - MAPPED_SPEC):
        notes.append(Note(where, "note", f"spec.{key} has no counterpart"))
    for key in sorted(set(job_spec) - MAPPED_JOB_SPEC):
        notes.append(Note(where, "note", f"jobTemplate.spec.{key} has no counterpart"))
    return job


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [str(v) for v in value]
