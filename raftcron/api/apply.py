"""`POST /v1/jobs:apply`: make a tenant's jobs match a list of specs (jobs as code).

Body: `{"jobs": [spec, ...], "tenant": T, "prune": bool, "selector": {label: value},
"dry_run": bool, "expect": {job_id: version}}`.

The plan is computed here against the committed jobs of tenant `T` (a barrier first):
each spec is created, changed (the changed fields listed before → after, every secret
shown as `***`) or unchanged; with `prune`, the tenant's jobs that no spec names (and that
carry every label of `selector`) are deleted. `expect` is the version of every job the plan
read (0: absent). A dry run answers the plan and its `expect`; an apply must send that
`expect` back, and is refused whole (409, naming the job) when any job moved since, here
or in the state machine, where one `ApplyJobs` entry applies the plan or nothing of it.

A spec without `paused` keeps the job's paused state, and a `***` sent back for a secret
keeps the stored value (as `PUT /v1/jobs/{id}` does), so a file exported by a principal
who cannot read secrets applies back unchanged.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from raftcron.api.auth import principal_of, require_tenant_write, tenant_clause
from raftcron.api.context import request_hash, request_id
from raftcron.api.errors import HTTPError, json_body
from raftcron.api.jobs import ctx_of, who
from raftcron.core import commands as c
from raftcron.core.errors import ValidationError
from raftcron.core.job_diff import changes
from raftcron.core.job_files import FORMATS, MEDIA_TYPES, dump, exported
from raftcron.core.model import LABEL_VALUE_RE, NAME_RE, Job, json_int, parse_job
from raftcron.core.secrets import holds_redacted, redact_target, restore_redacted
from raftcron.state.queries import job_to_api

MAX_APPLY_JOBS = 1_000
MAX_EXPORT_JOBS = 10_000
FIELDS = {"jobs", "tenant", "prune", "selector", "dry_run", "expect"}


def _options(body: Any, request: Request) -> tuple[list[Any], str, bool, dict[str, str],
                                                    bool, dict[str, int] | None]:
    if not isinstance(body, dict):
        raise ValidationError("body", "must be a JSON object")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise ValidationError(unknown[0], "unknown field")
    jobs = body.get("jobs")
    if not isinstance(jobs, list) or not 1 <= len(jobs) <= MAX_APPLY_JOBS:
        # An empty list is refused too: with prune it would delete every job of the tenant
        # (an empty directory, a file that lost its contents).
        raise ValidationError("jobs", f"must be a list of 1 to {MAX_APPLY_JOBS} jobs")
    principal = principal_of(request)
    default_tenant = (sorted(principal.tenants)[0] if not principal.admin
                      and len(principal.tenants) == 1 else "default")
    tenant = body.get("tenant", default_tenant)
    if not isinstance(tenant, str) or not NAME_RE.fullmatch(tenant):
        raise ValidationError("tenant", "must be 1-64 characters of A-Z a-z 0-9 . _ -")
    require_tenant_write(request, tenant)
    flags = {}
    for name in ("prune", "dry_run"):
        value = body.get(name, False)
        if not isinstance(value, bool):
            raise ValidationError(name, "must be true or false")
        flags[name] = value
    selector = body.get("selector", {})
    if not isinstance(selector, dict) or not all(
            isinstance(k, str) and NAME_RE.fullmatch(k) and isinstance(v, str)
            and LABEL_VALUE_RE.fullmatch(v) for k, v in selector.items()):
        raise ValidationError("selector", "must map label names to label values")
    if selector and not flags["prune"]:
        raise ValidationError("selector", "only with prune: it chooses what prune deletes")
    expect = body.get("expect")
    if "expect" in body:
        # JSON's integers: 3.0 is 3 (json_int), true is not.
        versions = ({k: json_int(v) for k, v in expect.items()}
                    if isinstance(expect, dict) else None)
        if versions is None or not all(v is not None and v >= 0 for v in versions.values()):
            raise ValidationError("expect", "must map job ids to the versions the plan read")
        expect = versions
    if expect is None and not flags["dry_run"]:
        raise ValidationError("expect", "is required unless dry_run: send the plan's expect "
                              "back, so nothing changed since the plan is overwritten")
    return jobs, tenant, flags["prune"], selector, flags["dry_run"], expect


def _desired(jobs: list[Any], tenant: str) -> list[tuple[Job, dict[str, Any]]]:
    out: list[tuple[Job, dict[str, Any]]] = []
    seen: set[str] = set()
    for i, spec in enumerate(jobs):
        if isinstance(spec, dict) and "tenant" not in spec:
            spec = {**spec, "tenant": tenant}
        try:
            job = parse_job(spec)
        except ValidationError as e:
            raise ValidationError(f"jobs.{i}.{e.field}", e.message) from None
        # A request the schema allows, refused for what it asks of the state: 409.
        if job.tenant != tenant:
            raise HTTPError(409, "conflict", f"job {job.id!r} names tenant {job.tenant!r}; "
                            f"this apply is for tenant {tenant!r}", f"jobs.{i}.tenant")
        if job.id in seen:
            raise HTTPError(409, "conflict", f"{job.id!r} is given twice", f"jobs.{i}.id")
        seen.add(job.id)
        out.append((job, spec))
    return out


def _comparable(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in Job.from_spec(spec).to_spec().items() if k != "version"}


def _shown(job_api: dict[str, Any]) -> dict[str, Any]:
    return {**job_api, "target": redact_target(job_api["target"])}


async def plan(request: Request, jobs: list[Any], tenant: str, prune: bool,
               selector: dict[str, str]) -> tuple[dict[str, Any], list[list[Any]],
                                                  list[list[Any]], list[list[Any]]]:
    """(the plan as answered, puts, deletes, unchanged) against the committed state."""
    ctx = ctx_of(request)
    desired = _desired(jobs, tenant)
    await ctx.barrier()
    rows = await ctx.fetchall("SELECT id, tenant, version, spec, paused FROM jobs "
                              "WHERE tenant = ? OR id IN (SELECT value FROM json_each(?))",
                              (tenant, json.dumps([j.id for j, _ in desired])))
    current = {r[0]: r for r in rows}
    answer: dict[str, Any] = {"tenant": tenant, "create": [], "change": [], "delete": [],
                              "unchanged": []}
    expect: dict[str, int] = {}
    puts: list[list[Any]] = []
    unchanged: list[list[Any]] = []
    for i, (job, given) in enumerate(desired):
        row = current.get(job.id)
        if row is not None and row[1] != tenant:
            raise HTTPError(409, "already_exists", f"job {job.id!r} already exists in another "
                            "tenant", f"jobs.{i}.id")
        spec = job.to_spec()
        if row is None:
            if holds_redacted(job.target):
                raise HTTPError(409, "conflict", "holds '***' for a secret, but the job does "
                                "not exist: give the value", f"jobs.{i}.target")
            answer["create"].append({"id": job.id})
            expect[job.id] = 0
            puts.append([spec, 0])
            continue
        stored = json.loads(row[3])
        if "paused" not in given:
            spec["paused"] = bool(row[4])
        spec["target"] = restore_redacted(job.target, stored["target"], f"jobs.{i}.target")
        expect[job.id] = row[2]
        if _comparable(spec) == _comparable(stored):
            answer["unchanged"].append(job.id)
            unchanged.append([job.id, row[2]])
            continue
        before, after = Job.from_spec(stored).to_api(), Job.from_spec(spec).to_api()
        answer["change"].append({"id": job.id, "version": row[2], "changes": changes(
            before, after, shown_before=_shown(before), shown_after=_shown(after))})
        puts.append([spec, row[2]])
    deletes: list[list[Any]] = []
    if prune:
        named = {j.id for j, _ in desired}
        for job_id, row in sorted(current.items()):
            if row[1] != tenant or job_id in named:
                continue
            labels = json.loads(row[3]).get("labels") or {}
            if all(labels.get(k) == v for k, v in selector.items()):
                answer["delete"].append({"id": job_id, "version": row[2]})
                expect[job_id] = row[2]
                deletes.append([job_id, row[2]])
    answer["expect"] = expect
    return answer, upstream_first(puts), deletes, unchanged


def upstream_first(puts: list[list[Any]]) -> list[list[Any]]:
    """The puts in their order, except that a chained job comes after the job it follows
    when the plan holds that too (the state checks an upstream exists when it writes the
    job). Linear: each put is placed once, after its chain above within the plan. A cycle
    keeps its order, and the state refuses it."""
    by_id = {spec["id"]: put for put in puts for spec in (put[0],)}
    placed: set[str] = set()
    ordered: list[list[Any]] = []
    for put in puts:
        chain: list[list[Any]] = []
        current: list[Any] | None = put
        seen: set[str] = set()
        while current is not None and current[0]["id"] not in placed \
                and current[0]["id"] not in seen:
            seen.add(current[0]["id"])
            chain.append(current)
            upstream = (current[0].get("after") or {}).get("job")
            current = by_id.get(upstream) if isinstance(upstream, str) else None
        for item in reversed(chain):
            placed.add(item[0]["id"])
            ordered.append(item)
    return ordered


async def apply_jobs(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    body = await json_body(request)
    jobs, tenant, prune, selector, dry_run, expect = _options(body, request)
    answer, puts, deletes, unchanged = await plan(request, jobs, tenant, prune, selector)
    if dry_run:
        return JSONResponse({**answer, "applied": False})
    assert expect is not None
    for job_id in sorted(answer["expect"].keys() | expect.keys()):
        planned, now = expect.get(job_id), answer["expect"].get(job_id)
        if planned != now:
            raise HTTPError(409, "version_conflict",
                            f"job {job_id!r} changed since the plan (the plan read "
                            f"{_version_text(planned)}, it is {_version_text(now)} now); "
                            "nothing was applied: plan again", f"expect.{job_id}")
    if puts or deletes:
        await ctx.propose(c.ApplyJobs(request_id(request), ctx.stamp_ms(), puts, deletes,
                                      unchanged, request_hash(request, body),
                                      who=await who(request, ctx)))
    return JSONResponse({**answer, "applied": True})


def _version_text(version: int | None) -> str:
    if version is None:
        return "not in the plan"
    return "absent" if version == 0 else f"version {version}"


async def export_jobs(request: Request) -> Response:
    """`GET /v1/jobs:export?format=toml|yaml|json[&tenant=T]`: the jobs this principal reads
    as a jobs file (core.job_files), the one `apply -f` reads back; secrets as `***`.
    Encoded off the event loop: ten thousand jobs take a while to write out."""
    ctx = ctx_of(request)
    fmt = request.query_params.get("format", "toml")
    if fmt not in FORMATS:
        raise ValidationError("format", f"must be one of {', '.join(FORMATS)}")
    where, params = ["1"], []
    tenant = request.query_params.get("tenant")
    if tenant is not None:
        where.append("tenant = ?")
        params.append(tenant)
    clause, extra = tenant_clause(request)
    if clause:
        where.append(clause)
        params += extra
    rows = await ctx.fetchall(
        "SELECT id, tenant, version, spec, paused, queue, watermark_ms, created_ms, updated_ms "
        f"FROM jobs WHERE {' AND '.join(where)} ORDER BY id LIMIT ?",
        (*params, MAX_EXPORT_JOBS + 1))
    if len(rows) > MAX_EXPORT_JOBS:
        raise HTTPError(413, "too_large", f"more than {MAX_EXPORT_JOBS} jobs: export one "
                        "tenant at a time", "tenant")
    text = await asyncio.to_thread(
        lambda: dump([exported(job_to_api(r)) for r in rows], fmt))
    # The name is fixed: a tenant filter is any text, and a header cannot carry all of it.
    return Response(text, media_type=MEDIA_TYPES[fmt],
                    headers={"Content-Disposition": f'attachment; filename="jobs.{fmt}"'})
