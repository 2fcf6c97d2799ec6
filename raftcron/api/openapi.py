"""The OpenAPI description served at /openapi.json."""

from __future__ import annotations

from typing import Any

ERROR = {"$ref": "#/components/schemas/Error"}
JSON_OBJ = {"type": "object"}

JOB_INPUT: dict[str, Any] = {
    "type": "object",
    "required": ["id", "schedule", "target"],
    "properties": {
        "id": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,128}$"},
        "tenant": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
        "schedule": {
            "type": "object", "required": ["cron"],
            "properties": {
                "cron": {"type": "string", "maxLength": 256},
                "timezone": {"type": "string"},
                "dst_gap": {"enum": ["auto", "shift", "skip"]},
                "dst_fold": {"enum": ["auto", "once", "both"]},
                "jitter_s": {"type": "integer", "minimum": 0, "maximum": 3600},
                "start_at": {"type": ["string", "null"], "format": "date-time"},
                "end_at": {"type": ["string", "null"], "format": "date-time"},
            },
        },
        "misfire_policy": {"enum": ["skip", "run_once", "catch_up"]},
        "misfire_grace_s": {"type": "integer", "minimum": 0},
        "catch_up_max": {"type": "integer", "minimum": 1, "maximum": 10000},
        "overlap_policy": {"enum": ["allow", "forbid", "replace", "buffer_one"]},
        "max_runtime_s": {"type": ["integer", "null"], "minimum": 1},
        "max_attempts": {"type": "integer", "minimum": 1, "maximum": 100},
        "retry_backoff_s": {"type": "integer", "minimum": 0},
        "heartbeat_timeout_s": {"type": "integer", "minimum": 2, "maximum": 3600},
        "ack_timeout_s": {"type": "integer", "minimum": 1, "maximum": 600},
        "deadline_s": {"type": ["integer", "null"], "minimum": 1},
        "target": {"type": "object", "description": (
            '{"shell": "cmd"} or {"http": {"url", "method", "headers", "body"}}; a header '
            'value or the body may be {"secret": "<name>"}, resolved on the worker. Header '
            'values and URL credentials read as "***" for non-admins')},
        "queue": {"type": "string"},
        "paused": {"type": "boolean"},
        "notify": {"type": "array", "items": {"type": "string"}},
    },
}


QUOTA = {"type": ["integer", "null"], "minimum": 1, "maximum": 1_000_000}
TENANT_INPUT: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "description": "Quotas and policy of one tenant; the body replaces every field: a "
                   "missing or null quota is unlimited, a missing or null policy list is any",
    "properties": {"max_jobs": QUOTA, "max_concurrent_runs": QUOTA,
                   "max_fires_per_minute": QUOTA,
                   "queues": {"type": ["array", "null"], "maxItems": 100, "items": {
                       "type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"}},
                   "targets": {"type": ["array", "null"], "items": {
                       "type": "string", "enum": ["shell", "http"]}},
                   "http_hosts": {"type": ["array", "null"], "maxItems": 100, "items": {
                       "type": "string", "description": "a host, *.domain, or an IP"}}},
}
AUTH_ERRORS = (401, 403)


def _op(summary: str, *, body: dict | None = None, ok: int = 200,
        params: list[dict] | None = None, errors: tuple[int, ...] = (400, 503)) -> dict:
    op: dict[str, Any] = {
        "summary": summary,
        "responses": {str(ok): {"description": "OK", "content": {
            "application/json": {"schema": JSON_OBJ}}}},
    }
    for status in (*errors, *AUTH_ERRORS):
        op["responses"][str(status)] = {"description": "error", "content": {
            "application/json": {"schema": ERROR}}}
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    if params:
        op["parameters"] = params
    return op


def _path_param(name: str) -> dict:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _query(name: str, schema: dict | None = None) -> dict:
    return {"name": name, "in": "query", "required": False,
            "schema": schema or {"type": "string"}}


JOB = [_path_param("job_id")]
PAIRS = {"type": "object", "required": ["worker_id", "attempts"], "properties": {
    "worker_id": {"type": "string"},
    "attempts": {"type": "array", "items": {"type": "object", "properties": {
        "attempt_id": {"type": "string"}, "fencing_token": {"type": "integer"}}}}}}


def openapi_spec() -> dict[str, Any]:
    spec = _spec()
    for path in ("/healthz", "/readyz"):  # open: no token needed
        for op in spec["paths"][path].values():
            op["security"] = []
            for status in AUTH_ERRORS:
                op["responses"].pop(str(status), None)
    return spec


def _spec() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "raftcron", "version": "1"},
        "security": [{"bearer": []}],
        "components": {"securitySchemes": {"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "Scopes: admin, read, tenant:<name>, worker[:<queues>]"}},
            "schemas": {"Error": {"type": "object", "properties": {"error": {
            "type": "object", "properties": {"code": {"type": "string"},
                                             "message": {"type": "string"},
                                             "field": {"type": "string"}}}}}}},
        "paths": {
            "/openapi.json": {"get": _op("This description", errors=())},
            "/healthz": {"get": _op("The process is up", errors=())},
            "/readyz": {"get": _op("Caught up and the cluster has a leader", errors=(503,))},
            "/v1/cluster": {"get": _op("This node's view of the cluster", errors=())},
            "/v1/digest": {"get": _op("Canonical digest of this node's state", errors=())},
            "/metrics": {"get": _op("Prometheus text exposition of this node", errors=())},
            "/v1/cluster/nodes": {"get": _op(
                "Every node's view (asked over HTTP), replication lag and clock skew vs the "
                "leader", errors=())},
            "/v1/alerts": {"get": _op("Alerts with their raise/resolve history", params=[
                _query("status", {"enum": ["open", "resolved", "all"]}), _query("job_id"),
                _query("cursor"), _query("limit", {"type": "integer"}),
                _query("consistent", {"type": "boolean"})], errors=(400,))},
            **{f"/v1/alerts/{{alert_id}}/{action}": {"post": _op(
                f"{summary} an open alert by hand, with a note (admin, or the job's tenant); "
                "409 when it is already resolved" + extra,
                params=[_path_param("alert_id")],
                body={"type": "object", "additionalProperties": False, "required": ["note"],
                      "properties": {"note": {"type": "string", "minLength": 1,
                                              "maxLength": 1000}}},
                errors=(400, 403, 404, 409, 422, 503))}
               for action, summary, extra in (
                   ("ack", "Acknowledge", " or already acknowledged"), ("resolve", "Resolve", ""))},
            "/v1/status/jobs": {"get": _op(
                "Jobs with schedule in words, next fire times and recent occurrences",
                params=[_query("timeline", {"type": "integer", "minimum": 1, "maximum": 60})],
                errors=(400,))},
            "/v1/status/jobs/{job_id}": {"get": _op(
                "One job for its page: schedule in words, next fire times marked where "
                "the zone's UTC offset changes (DST)",
                params=[*JOB, _query("fires", {"type": "integer", "minimum": 1, "maximum": 50}),
                        _query("after", {"type": "string", "format": "date-time"}),
                        # a proposed schedule: its fire times are returned as `proposed`
                        _query("cron"), _query("timezone"),
                        _query("dst_gap", {"enum": ["auto", "skip", "shift"]}),
                        _query("dst_fold", {"enum": ["auto", "once", "both"]})],
                errors=(400, 404))},
            "/v1/status/jobs/{job_id}/backfill-preview": {"get": _op(
                "The instants a backfill of [start, end] would create (count, first 50); "
                "writes nothing",
                params=[*JOB, {**_query("start", {"type": "string", "format": "date-time"}),
                               "required": True},
                        {**_query("end", {"type": "string", "format": "date-time"}),
                         "required": True}],
                errors=(400, 404))},
            "/v1/status/fire-lag": {"get": _op(
                "Per minute: p50/p99 of first-lease time minus dispatch instant of "
                "scheduled occurrences (at most 20,000 newest instants)",
                params=[_query("minutes", {"type": "integer", "minimum": 1, "maximum": 180})],
                errors=(400,))},
            "/v1/status/queues": {"get": _op(
                "Per queue: runs due and not yet leased, and how long the oldest has waited",
                errors=())},
            "/v1/attempts": {"get": _op("Running (or pending) attempts with heartbeat age",
                                        params=[_query("status", {"enum": ["running", "pending"]}),
                                                _query("limit", {"type": "integer"})],
                                        errors=(400,))},
            "/v1/workers": {"get": _op("Workers as derived from the attempts they held",
                                       errors=())},
            "/v1/schedule/herd": {"get": _op(
                "Occurrences due per bucket over the next hours, from the schedules",
                params=[_query("hours", {"type": "integer", "minimum": 1, "maximum": 168}),
                        _query("bucket_s", {"type": "integer", "minimum": 60})],
                errors=(400,))},
            "/v1/jobs": {
                "post": _op("Create a job", body=JOB_INPUT, ok=201,
                            errors=(400, 409, 413, 422, 503)),
                "get": _op("List jobs", params=[
                    _query("tenant"), _query("paused", {"enum": ["true", "false"]}),
                    _query("cursor"), _query("limit", {"type": "integer"}),
                    _query("consistent", {"type": "boolean"})]),
            },
            "/v1/jobs:batchCreate": {"post": _op(
                "Create up to 1,000 jobs in one replicated entry; one result per job (for "
                "an existing one: its current_version and the fields that differ)",
                body={"type": "object", "required": ["jobs"], "properties": {
                    "jobs": {"type": "array", "minItems": 1, "maxItems": 1000,
                             "items": JOB_INPUT}}},
                errors=(400, 413, 422, 503))},
            "/v1/jobs/{job_id}": {
                "get": _op("A job with its next fire times", params=JOB, errors=(400, 404)),
                "put": _op("Replace a job (If-Match: version)", body=JOB_INPUT, params=JOB,
                           errors=(400, 404, 412, 422, 503)),
                "delete": _op("Delete a job", params=JOB, errors=(400, 404, 412, 422, 503)),
            },
            "/v1/jobs/{job_id}/pause": {"post": _op("Pause", params=JOB, errors=(400, 404, 422))},
            "/v1/jobs/{job_id}/resume": {"post": _op("Resume", params=JOB, errors=(400, 404, 422))},
            "/v1/jobs/{job_id}/trigger": {"post": _op(
                "Run now (Idempotency-Key header dedupes)", ok=202, params=JOB,
                errors=(400, 404, 422, 429, 503))},
            "/v1/jobs/{job_id}/backfill": {"post": _op(
                "Create occurrences for the nominal instants in a range", ok=202, params=JOB,
                body={"type": "object", "required": ["start", "end"], "properties": {
                    "start": {"type": "string", "format": "date-time"},
                    "end": {"type": "string", "format": "date-time"}}},
                errors=(400, 404, 503))},
            "/v1/tenants": {"get": _op("Tenants with quotas (a tenant token sees its own)",
                                       params=[_query("consistent", {"type": "boolean"})],
                                       errors=())},
            "/v1/tenants/{name}": {
                "get": _op("One tenant's quotas", params=[_path_param("name")],
                           errors=(400, 404)),
                "put": _op("Set a tenant's quotas and policy (admin)", body=TENANT_INPUT,
                           params=[_path_param("name")], errors=(400, 413, 503)),
            },
            "/v1/tenants/{name}/webhook-key": {
                "get": _op("The key that signs the tenant's notify webhooks (admin)",
                           params=[_path_param("name")], errors=(400, 403, 503)),
                "put": _op("Rotate the tenant's webhook key; answers the new key (admin)",
                           params=[_path_param("name")], errors=(400, 403, 503)),
            },
            "/v1/webhook-key": {"get": _op(
                "The key that signs webhooks to the cluster-wide receivers (admin)",
                errors=(403, 503))},
            "/v1/outbox": {"get": _op(
                "Webhook deliveries given up (dead) or pending, per receiver (admin)", params=[
                    _query("status", {"enum": ["dead", "pending"]}), _query("cursor"),
                    _query("limit", {"type": "integer", "minimum": 1, "maximum": 500}),
                    _query("consistent", {"type": "boolean"})], errors=(400, 403))},
            "/v1/outbox/{outbox_id}/retry": {"post": _op(
                "Deliver a dead row again, attempts reset (admin)",
                params=[_path_param("outbox_id")],
                body={"type": "object", "additionalProperties": False,
                      "properties": {"receiver": {"type": "string"}}},
                errors=(400, 403, 404, 409, 503))},
            "/v1/backup": {"get": _op(
                "A consistent SQLite snapshot of the state (admin)", errors=(403, 503))},
            "/v1/cluster/members": {
                "get": _op("Cluster members (admin)", errors=(403,)),
                "post": _op("Add a member (admin; raftcron cluster add-node)", body={
                    "type": "object", "required": ["id", "raft_addr", "http_url"],
                    "properties": {"id": {"type": "string"}, "raft_addr": {"type": "string"},
                                   "http_url": {"type": "string"}}},
                    errors=(400, 403, 409, 503)),
            },
            "/v1/cluster/members/{member_id}": {"delete": _op(
                "Remove a member (admin; raftcron cluster remove-node)",
                params=[_path_param("member_id")], errors=(400, 403, 404, 409, 503))},
            "/v1/occurrences": {"get": _op("List occurrences", params=[
                _query("job_id"), _query("status"), _query("kind"), _query("since"),
                _query("until"), _query("cursor"), _query("limit", {"type": "integer"})])},
            "/v1/occurrences/{occurrence_id}": {"get": _op(
                "An occurrence with its attempts", params=[_path_param("occurrence_id")],
                errors=(404,))},
            "/v1/leases": {"post": _op("Lease due runs (long-poll)", body={
                "type": "object", "required": ["worker_id"], "properties": {
                    "worker_id": {"type": "string"},
                    "queues": {"type": "array", "items": {"type": "string"}},
                    "max": {"type": "integer", "minimum": 1, "maximum": 1000},
                    "wait_s": {"type": "number", "minimum": 0, "maximum": 30},
                    "acknowledge": {"type": "boolean", "description":
                                    "acknowledge each lease (first heartbeat) within the "
                                    "job's ack_timeout_s, or it is released and leased "
                                    "again"}}})},
            "/v1/heartbeats": {"post": _op("Heartbeat many attempts", body=PAIRS)},
            "/v1/releases": {"post": _op("Hand leases back unrun", body=PAIRS)},
            "/v1/completions": {"post": _op("Report many outcomes", body=JSON_OBJ)},
            "/v1/attempts/{attempt_id}/heartbeat": {"post": _op(
                "Heartbeat one attempt", params=[_path_param("attempt_id")], body=JSON_OBJ,
                errors=(400, 404, 409, 503))},
            "/v1/attempts/{attempt_id}/complete": {"post": _op(
                "Report one outcome", params=[_path_param("attempt_id")], body=JSON_OBJ,
                errors=(400, 404, 409, 503))},
        },
    }
