"""The HTTP application: the routes table and the error → status mapping."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from raftcron.api import (
    alerts,
    apply,
    calendars,
    channels,
    cluster,
    digest_marks,
    groups,
    job_history,
    jobpage,
    jobs,
    metrics,
    occurrences,
    ops,
    outbox,
    status,
    tenants,
    webhook_keys,
    workers,
)
from raftcron.api.allow import allow_header
from raftcron.api.audit import AuditMiddleware, AuditSink
from raftcron.api.auth import Authenticator, AuthMiddleware, node_token
from raftcron.api.context import ApiContext
from raftcron.api.errors import HTTPError, error_response
from raftcron.api.openapi import openapi_spec
from raftcron.api.schema_gate import check_body
from raftcron.auth import TOKEN_USAGE_FILE
from raftcron.cluster.peer_tls import peer_tls
from raftcron.core.errors import ValidationError

if TYPE_CHECKING:
    from raftcron.node_view import NodeView

log = logging.getLogger("raftcron.api")
# The status page lives in the repository's top-level web/ (no build step); an installed
# package (e.g. the Docker image) points RAFTCRON_WEB_DIR at its copy.
WEB_DIR = Path(os.environ.get("RAFTCRON_WEB_DIR")
               or Path(__file__).resolve().parent.parent.parent / "web")


async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(openapi_spec())


async def index(request: Request) -> Response:
    page = WEB_DIR / "index.html"
    if page.exists():
        return FileResponse(page)
    return JSONResponse({"status_page": "not installed", "api": "/openapi.json"})


async def job_page(request: Request) -> Response:
    """`/jobs/{id}`, a job page's address to share: the page routes by its fragment
    (`/#/jobs/{id}`, no build step, one HTML file), so this sends the browser there. The
    id is re-quoted whole, so the target is always this node's own page."""
    return RedirectResponse(f"/#/jobs/{quote(request.path_params['job_id'], safe='')}",
                            status_code=302)


# The status page's own addresses, not API routes (not in /openapi.json).
PAGE_PATHS = frozenset({"/", "/jobs/{job_id:path}"})
ROUTES = [
    Route("/", index),
    Route("/jobs/{job_id:path}", job_page, methods=["GET"]),
    Route("/healthz", cluster.healthz),
    Route("/readyz", cluster.readyz),
    Route("/openapi.json", openapi),
    Route("/metrics", metrics.metrics),
    Route("/v1/cluster", cluster.cluster),
    Route("/v1/cluster/nodes", cluster.cluster_nodes),
    Route("/v1/alerts", alerts.list_alerts, methods=["GET"]),
    Route("/v1/alerts/{alert_id:path}/ack", alerts.ack_alert, methods=["POST"]),
    Route("/v1/alerts/{alert_id:path}/resolve", alerts.resolve_alert, methods=["POST"]),
    Route("/v1/status/jobs", status.jobs_overview, methods=["GET"]),
    Route("/v1/status/queues", status.queues_overview, methods=["GET"]),
    Route("/v1/status/jobs/{job_id}", jobpage.job_page, methods=["GET"]),
    Route("/v1/status/jobs/{job_id}/backfill-preview", jobpage.backfill_preview,
          methods=["GET"]),
    Route("/v1/status/fire-lag", jobpage.fire_lag, methods=["GET"]),
    Route("/v1/attempts", status.list_attempts, methods=["GET"]),
    Route("/v1/workers", status.list_workers, methods=["GET"]),
    Route("/v1/schedule/herd", status.herd, methods=["GET"]),
    Route("/v1/digest", cluster.state_digest),
    *digest_marks.ROUTES,
    Route("/v1/jobs", jobs.create_job, methods=["POST"]),
    Route("/v1/jobs", jobs.list_jobs, methods=["GET"]),
    Route("/v1/jobs:batchCreate", jobs.batch_create_jobs, methods=["POST"]),
    Route("/v1/jobs:apply", apply.apply_jobs, methods=["POST"]),
    Route("/v1/jobs:export", apply.export_jobs, methods=["GET"]),
    Route("/v1/jobs:pause", calendars.bulk_pause, methods=["POST"]),
    Route("/v1/jobs:resume", calendars.bulk_resume, methods=["POST"]),
    Route("/v1/calendars", calendars.list_calendars, methods=["GET"]),
    Route("/v1/calendars/{name}", calendars.get_calendar, methods=["GET"]),
    Route("/v1/calendars/{name}", calendars.put_calendar, methods=["PUT"]),
    Route("/v1/calendars/{name}", calendars.delete_calendar, methods=["DELETE"]),
    Route("/v1/channels", channels.list_channels, methods=["GET"]),
    Route("/v1/channels/{name}", channels.get_channel, methods=["GET"]),
    Route("/v1/channels/{name}", channels.put_channel, methods=["PUT"]),
    Route("/v1/channels/{name}", channels.delete_channel, methods=["DELETE"]),
    Route("/v1/jobs/{job_id}", jobs.get_job, methods=["GET"]),
    Route("/v1/jobs/{job_id}", jobs.put_job, methods=["PUT"]),
    Route("/v1/jobs/{job_id}", jobs.delete_job, methods=["DELETE"]),
    Route("/v1/jobs/{job_id}/history", job_history.job_history, methods=["GET"]),
    Route("/v1/job-history/{job_id}", job_history.any_job_history, methods=["GET"]),
    Route("/v1/jobs/{job_id}/pause", jobs.pause_job, methods=["POST"]),
    Route("/v1/jobs/{job_id}/resume", jobs.resume_job, methods=["POST"]),
    Route("/v1/jobs/{job_id}/trigger", jobs.trigger_job, methods=["POST"]),
    Route("/v1/jobs/{job_id}/backfill", jobs.backfill_job, methods=["POST"]),
    Route("/v1/tenants", tenants.list_tenants, methods=["GET"]),
    Route("/v1/tenants/{name}", tenants.get_tenant, methods=["GET"]),
    Route("/v1/tenants/{name}", tenants.put_tenant, methods=["PUT"]),
    Route("/v1/tenants/{name}/webhook-key", webhook_keys.get_tenant_key, methods=["GET"]),
    Route("/v1/tenants/{name}/webhook-key", webhook_keys.rotate_tenant_key, methods=["PUT"]),
    Route("/v1/webhook-key", webhook_keys.get_cluster_key, methods=["GET"]),
    Route("/v1/outbox", outbox.list_outbox, methods=["GET"]),
    Route("/v1/outbox/{outbox_id}/retry", outbox.retry_outbox, methods=["POST"]),
    Route("/v1/occurrences", occurrences.list_occurrences, methods=["GET"]),
    Route("/v1/occurrences/{occurrence_id:path}/cancel", occurrences.cancel_occurrence,
          methods=["POST"]),
    Route("/v1/occurrences/{occurrence_id:path}", occurrences.get_occurrence, methods=["GET"]),
    Route("/v1/concurrency-groups", groups.list_groups, methods=["GET"]),
    Route("/v1/concurrency-groups/{name}", groups.get_group, methods=["GET"]),
    Route("/v1/concurrency-groups/{name}", groups.put_group, methods=["PUT"]),
    Route("/v1/leases", workers.leases, methods=["POST"]),
    Route("/v1/heartbeats", workers.heartbeats, methods=["POST"]),
    Route("/v1/completions", workers.completions, methods=["POST"]),
    Route("/v1/releases", workers.releases, methods=["POST"]),
    Route("/v1/attempts/{attempt_id:path}/heartbeat", workers.heartbeat_one, methods=["POST"]),
    Route("/v1/attempts/{attempt_id:path}/complete", workers.complete_one, methods=["POST"]),
    *ops.ROUTES,
]
if WEB_DIR.is_dir():
    ROUTES.append(Mount("/web", app=StaticFiles(directory=WEB_DIR), name="web"))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPError)
    return error_response(exc.status, exc.code, exc.message, exc.field, exc.headers, exc.extra)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ValidationError)
    return error_response(400, "invalid", exc.message, exc.field)


async def _starlette_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    headers = dict(exc.headers or {})
    message = str(exc.detail)
    if exc.status_code == 405:
        headers["Allow"] = allow_header(request.app.router.routes, request.scope,
                                        headers.get("Allow"))
        message = f"{request.method} is not allowed here (allowed: {headers['Allow']})"
    return error_response(exc.status_code, code, message, headers=headers or None)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "internal", "internal error")


def create_app(node: NodeView) -> Starlette:
    """The API of one node. Raises `raftcron.auth.AuthError` for an unusable tokens file."""
    ctx = ApiContext(node)
    config = node.config
    secret = config.read_secret()
    authenticator = Authenticator(config.tokens_file, config.auth_off, secret,
                                  usage_file=os.path.join(config.data_dir, TOKEN_USAGE_FILE))
    audit = AuditSink(config.audit_log)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await ctx.open()
        # Calls to other nodes (their /v1/cluster) carry the node token; forwarded requests
        # set the caller's own Authorization header instead.
        app.state.http = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {node_token(secret)}"}, verify=peer_tls(config))
        try:
            yield
        finally:
            await app.state.http.aclose()
            await ctx.close()
            if authenticator.store is not None:
                authenticator.store.flush_usage()
            audit.close()

    app = Starlette(
        routes=ROUTES,
        lifespan=lifespan,
        middleware=[Middleware(AuditMiddleware, sink=audit, node_id=config.node_id),
                    Middleware(AuthMiddleware, authenticator=authenticator)],
        exception_handlers={
            HTTPError: _http_error,
            ValidationError: _validation_error,
            HTTPException: _starlette_error,
            Exception: _unexpected,
        },
    )
    app.state.ctx = ctx
    app.state.body_gate = check_body
    return app
