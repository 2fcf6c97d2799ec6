"""A job's changes, newest first.

`GET /v1/jobs/{id}/history?limit=&before=`: the history of a job that exists (a deleted
job is 404 here, as all of `/v1/jobs/{id}`). `GET /v1/job-history/{id}` (same parameters):
the history of a job id whether or not it exists now, so "who deleted it, and what was
it?" has an answer until retention prunes it.

Each entry is one committed change (state.job_history): `seq`, `version`, `kind`, `by`
(the principal, null for changes logged before it was recorded), `at`, `note` (a bulk
pause's), `job` (the job as it was after the change, a delete's as it was last; secrets
`***` unless admin, as `GET /v1/jobs/{id}`), and `changes`: each field that differs from
the change before, `{"field", "before", "after"}` (null for a create, and for a change
whose predecessor is not in the history: pruned by the cap, or made before the
history was recorded).

Visibility is that of `GET /v1/jobs/{id}`: a job the caller may not see is 404. The
history of a deleted job stays readable (until retention) by those who could see it: its
rows are of its tenant, and so are those of an id's earlier life. Pages: `before` is the
`seq` to read below (the answer's `next_before`).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from raftcron.api.auth import reveals_secrets, tenant_clause
from raftcron.api.errors import HTTPError
from raftcron.api.jobs import ctx_of, page_limit, path_job_id, visible_job_row
from raftcron.core.errors import ValidationError
from raftcron.core.job_diff import changes
from raftcron.core.timefmt import ms_to_iso
from raftcron.state.job_history import HISTORY_COLUMNS
from raftcron.state.queries import JOB_SELECT, spec_to_api

DEFAULT_PAGE = 20
MAX_SEQ = 2**62


def before_param(request: Request) -> int | None:
    raw = request.query_params.get("before")
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_SEQ:
        raise ValidationError("before", "must be a seq of this job's history (an integer "
                              "from 1), as `next_before` gives it")
    return int(raw)


def _entry(row: tuple, previous: tuple | None, reveal: bool) -> dict[str, Any]:
    job_id, seq, version, kind, _tenant, who, note, at_ms, spec = row
    shown = spec_to_api(spec, reveal_secrets=reveal)
    diff = None
    if kind != "create" and previous is not None and previous[1] == seq - 1:
        diff = changes(spec_to_api(previous[8], reveal_secrets=True),
                       spec_to_api(spec, reveal_secrets=True),
                       shown_before=spec_to_api(previous[8], reveal_secrets=reveal),
                       shown_after=shown)
    return {"seq": seq, "version": version, "kind": kind, "by": who, "at": ms_to_iso(at_ms),
            "note": note, "job": shown, "changes": diff}


async def job_history(request: Request) -> JSONResponse:
    """`GET /v1/jobs/{id}/history`: 404 unless the job exists (and the caller sees it)."""
    return await _history(request, live_only=True)


async def any_job_history(request: Request) -> JSONResponse:
    """`GET /v1/job-history/{id}`: the job's history, deleted or not."""
    return await _history(request, live_only=False)


async def _history(request: Request, *, live_only: bool) -> JSONResponse:
    ctx = ctx_of(request)
    await ctx.maybe_barrier(request)
    job_id = path_job_id(request)
    limit = page_limit(request, DEFAULT_PAGE)
    before = before_param(request)
    exists = await ctx.fetchone(f"{JOB_SELECT} WHERE id = ?", (job_id,))
    if exists is not None or live_only:
        await visible_job_row(request, ctx, job_id)  # 404 for a job the caller may not see
    where, params = ["job_id = ?"], [job_id]
    clause, extra = tenant_clause(request)
    if clause:  # a deleted job's rows, and an earlier life's, are its tenant's
        where.append(clause)
        params += extra
    if before is not None:
        where.append("seq < ?")
        params.append(before)
    # One row beyond the page: the change before the page's oldest, for its `changes`.
    rows = await ctx.fetchall(
        f"SELECT {HISTORY_COLUMNS} FROM job_history WHERE {' AND '.join(where)} "
        "ORDER BY seq DESC LIMIT ?", (*params, limit + 1))
    if not rows and exists is None and (before is None or not await ctx.fetchone(
            f"SELECT 1 FROM job_history WHERE {' AND '.join(where[:-1])} LIMIT 1",
            params[:-1])):
        # No such job, and no history the caller may see: as GET /v1/jobs/{id}.
        raise HTTPError(404, "not_found", f"job {job_id!r} does not exist", "id")
    reveal = reveals_secrets(request)
    page = rows[:limit]
    entries = [_entry(row, rows[i + 1] if i + 1 < len(rows) else None, reveal)
               for i, row in enumerate(page)]
    return JSONResponse({"job_id": job_id, "exists": exists is not None, "versions": entries,
                         "next_before": page[-1][1] if len(rows) > limit else None})
