"""The OpenAPI description served at /openapi.json.

Request schemas (api/schemas.py) are built from the constants the validators use
(core/model.py and the api modules): a bound moved there moves here. What JSON Schema
cannot state is named by a `format` and said in a description: a cron expression that
fires at all (`format: cron`, checked by core/schedule.py), `end_at` after `start_at`, a
backfill range of at most ten years, the duration bounds' order (`min_duration_s` at most
`max_duration_s`, both below `max_runtime_s`).
tests/integration/test_api_schema_agreement.py proves, field by field, that a value this
schema allows is accepted and one it refuses is refused with a 400 naming the field;
tests/system/test_api_contract.py runs schemathesis with every check against a real node.

Every status code and content type the server sends is listed per operation: 400 where
the request has parameters or a body, 401/403 for tokens (except the open health routes),
413 for bodies, 503 where the answer waits on Raft (a write, `?consistent=true`, the
leader's long poll), with `Retry-After`.
"""

from __future__ import annotations

from typing import Any

from raftcron.api import (
    alerts,
    apply,
    groups,
    job_history,
    jobpage,
    jobs,
    occurrences,
    outbox,
    status,
    workers,
)
from raftcron.api.channel_schemas import CHANNEL_INPUT
from raftcron.api.schemas import (
    ATTEMPT_ID,
    BULK_PAUSE,
    CALENDAR_INPUT,
    COMPLETIONS,
    CONSISTENT,
    CRON,
    FENCING_TOKEN,
    HEARTBEATS,
    INSTANT,
    INSTANT_TO_9998,
    JOB_ID,
    JOB_INPUT,
    JOB_REPLACE,
    LABEL_VALUE,
    LEASES,
    LIMIT,
    NAME,
    NOTE_BODY,
    OUTCOME_FIELDS,
    OUTCOME_TIMES,
    PAIRS,
    TENANT_INPUT,
    TIMEZONE,
    WORKER_ID,
    accepted_zones,
    anchored,
)
from raftcron.cluster import membership
from raftcron.core import model
from raftcron.state.digest_marks import DEFAULT_CAPACITY, MARK_PATTERN

JSON = "application/json"
ERROR = {"$ref": "#/components/schemas/Error"}
JSON_OBJ = {"type": "object"}
AUTH_ERRORS = (401, 403)
# Every answer that waits on Raft can be "no leader" or "outcome unknown": 503 with
# Retry-After; every write can meet a rate limit, a conflict or a reused idempotency key.
RAFT_WRITE = (409, 422, 429, 503)
# A job write also answers 404 when a calendar the job lists does not exist in its tenant.
JOB_WRITE = (404, *RAFT_WRITE)
DESCRIPTIONS = {
    400: "invalid input: `error.field` names the field, `error.message` the reason",
    401: "no token, or a token this cluster does not know",
    403: "the token's scopes do not allow this, or the tenant policy refuses it",
    404: "no such resource (or one the token may not see)",
    409: "conflicts with the current state (exists already, stale fencing token, a tenant "
         "quota: quota_exceeded naming max_jobs or max_schedules, a feature the cluster is "
         "not fully upgraded for: cluster_not_upgraded, ...)",
    412: "If-Match names another version than the current one",
    413: "the request body exceeds 1 MiB",
    422: "the Idempotency-Key was used before for another request",
    429: "a rate limit (max_fires_per_minute) or the tenant's max_pending_runs quota; "
         "Retry-After says when to try again",
    503: "no leader, the outcome is unknown (retry with the same Idempotency-Key), or "
         "this node knows no confirmed cluster time to stamp a write with "
         "(`clock_unconfirmed`); Retry-After: 1",
}




# --- operations ----------------------------------------------------------------------------

def _any_content(op: dict, media_types: Any) -> dict:
    """`op` whose 200 answer is text of any of `media_types`."""
    op["responses"]["200"]["content"] = {
        m: {"schema": JSON_OBJ if m == JSON else {}} for m in media_types}
    return op


def _op(summary: str, *, body: dict | None = None, body_required: bool = True, ok: int = 200,
        params: list[dict] | None = None, errors: tuple[int, ...] = (),
        content: str = JSON, extra: dict | None = None) -> dict:
    """One operation. 400 is added when it takes input, 413 with a body, 503 when a
    parameter asks for a barrier; 401/403 always (removed for the open routes)."""
    statuses = set(errors) | set(AUTH_ERRORS)
    if body is not None or params:
        statuses.add(400)
    if body is not None:
        statuses.add(413)
    if any(p["name"] == "consistent" for p in params or ()):
        statuses.add(503)
    if any(p["in"] == "path" for p in params or ()):
        statuses.add(404)  # none such, or `.`/`..` that URL normalisation moved elsewhere
    op: dict[str, Any] = {"summary": summary, "responses": {
        str(ok): {"description": "OK", "content": {content: {"schema": (
            JSON_OBJ if content == JSON else {"type": "string"})}}}}}
    for code in sorted(statuses):
        response: dict[str, Any] = {"description": DESCRIPTIONS[code],
                                    "content": {JSON: {"schema": ERROR}}}
        if code in (429, 503):
            response["headers"] = {"Retry-After": {"schema": {"type": "string"}}}
        op["responses"][str(code)] = response
    if body is not None:
        op["requestBody"] = {"required": body_required,
                             "content": {JSON: {"schema": body}}}
    if params:
        op["parameters"] = params
    op.update(extra or {})
    return op


def _also_created(op: dict) -> dict:
    """`op` answering 201 as well as 200 (a PUT that creates or replaces)."""
    op["responses"]["201"] = {"description": "Created",
                              "content": {JSON: {"schema": JSON_OBJ}}}
    return op


def _path(name: str, schema: dict | None = None) -> dict:
    return {"name": name, "in": "path", "required": True,
            "schema": schema or {"type": "string", "minLength": 1}}


def _query(name: str, schema: dict | None = None) -> dict:
    return {"name": name, "in": "query", "required": False,
            "schema": schema or {"type": "string"}}


# If-Match is described, not declared as a parameter: whether a version matches depends
# on the state, not on the request's shape (a generator would send versions at random).
IF_MATCH = (" An If-Match header with the version the edit expects (a number, quoted or "
            "not) makes it conditional: 412 when the job is at another version.")


JOB = [_path("job_id", JOB_ID)]
HISTORY_PAGE = [_query("limit", {**LIMIT, "default": job_history.DEFAULT_PAGE}),
                _query("before", {"type": "integer", "minimum": 1,
                                  "maximum": job_history.MAX_SEQ}),
                CONSISTENT]
TENANT = [_path("name", NAME)]


def openapi_spec() -> dict[str, Any]:
    spec = _spec()
    for path in ("/healthz", "/readyz"):  # open: no token needed
        for op in spec["paths"][path].values():
            op["security"] = []
            for code in AUTH_ERRORS:
                op["responses"].pop(str(code), None)
    return spec


def _spec() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "raftcron", "version": "1"},
        "security": [{"bearer": []}],
        "components": {"securitySchemes": {"bearer": {
            "type": "http", "scheme": "bearer",
            "description": "Scopes: admin, read, tenant:<name>, worker[:<queues>]"}},
            "schemas": {
                "TimeZone": {"type": "string", "enum": accepted_zones(),
                             "description": "an IANA time zone name"},
                "Error": {
                "type": "object", "required": ["error"], "properties": {"error": {
                    "type": "object", "required": ["code", "message"], "properties": {
                        "code": {"type": "string"}, "message": {"type": "string"},
                        "field": {"type": "string"}}}}}}},
        "paths": {
            "/openapi.json": {"get": _op("This description")},
            "/healthz": {"get": _op("The process is up")},
            "/readyz": {"get": _op(
                "Caught up and the cluster has a leader", extra={"responses": {
                    "200": {"description": "ready", "content": {JSON: {"schema": JSON_OBJ}}},
                    "503": {"description": "not ready: `problems` says why",
                            "content": {JSON: {"schema": JSON_OBJ}}}}})},
            "/v1/cluster": {"get": _op("This node's view of the cluster")},
            "/v1/digest": {"get": _op("Canonical digest of this node's state")},
            "/v1/digest/marks": {"post": _op(
                "Commit a digest mark (admin): a barrier entry at whose index every node "
                "keeps its digest. Answers `mark` and `index` (and this node's `digest` "
                "once computed); an unknown outcome (503) names the `mark` too",
                ok=201, errors=(503,))},
            "/v1/digest/marks/{mark}": {"get": _op(
                "This node's digest at a mark's index (admin): `mark`, `index`, `digest`, "
                "`node_id`; `digest` null with `error` when this node could not compute "
                "it. 404 while this node has not applied or digested the mark, once it "
                f"evicted it (it keeps the newest {DEFAULT_CAPACITY}), or for an id never "
                "made",
                params=[_path("mark", {"type": "string", "pattern": MARK_PATTERN})])},
            "/metrics": {"get": _op("Prometheus text exposition of this node",
                                    content="text/plain")},
            "/v1/cluster/nodes": {"get": _op(
                "Every node's view (asked over HTTP), replication lag and clock skew vs the "
                "leader")},
            "/v1/alerts": {"get": _op("Alerts with their raise/resolve history", params=[
                _query("status", {"enum": list(alerts.STATUSES), "default": "open"}),
                _query("job_id", JOB_ID),
                _query("cursor", {"type": "string", "maxLength": 600,
                                  "pattern": r"^([0-9]{1,15}\|[\s\S]*)?$"}),
                _query("limit", LIMIT), CONSISTENT])},
            **{f"/v1/alerts/{{alert_id}}/{action}": {"post": _op(
                f"{summary} an open alert by hand, with a note (admin, or the job's tenant); "
                "409 when it is already resolved" + extra,
                params=[_path("alert_id", {"type": "string", "minLength": 1,
                                           "maxLength": alerts.MAX_ALERT_ID})],
                body=NOTE_BODY,
                errors=(404, *RAFT_WRITE))}
               for action, summary, extra in (
                   ("ack", "Acknowledge", " or already acknowledged"), ("resolve", "Resolve", ""))},
            "/v1/status/jobs": {"get": _op(
                "Jobs with schedule in words, next fire times and recent occurrences",
                params=[_query("timeline", {"type": "integer", "minimum": 1,
                                            "maximum": status.TIMELINE_MAX}),
                        _query("q", {"type": "string",
                                     "maxLength": status.MAX_QUERY_CHARS})])},
            "/v1/status/jobs/{job_id}": {"get": _op(
                "One job for its page: schedule in words, next fire times marked where "
                "the zone's UTC offset changes (DST); cron, timezone, dst_gap or dst_fold "
                "propose a schedule (validated as a PUT, nothing written) whose fire times "
                "come back as `proposed` (409 for a chained job, which has no schedule)",
                params=[*JOB, _query("fires", {"type": "integer", "minimum": 1,
                                               "maximum": jobpage.MAX_FIRES}),
                        _query("after", INSTANT_TO_9998), _query("cron", CRON),
                        _query("timezone", TIMEZONE),
                        _query("dst_gap", {"enum": ["auto", "skip", "shift"]}),
                        _query("dst_fold", {"enum": ["auto", "once", "both"]})],
                errors=(404, 409))},
            "/v1/status/jobs/{job_id}/backfill-preview": {"get": _op(
                "The instants a backfill of [start, end] would create (count, first 50; "
                "end not before start, at most ten years); writes nothing",
                params=[*JOB, {**_query("start", INSTANT), "required": True},
                        {**_query("end", INSTANT), "required": True}],
                errors=(404,))},
            "/v1/status/fire-lag": {"get": _op(
                "Per minute: p50/p99 of first-lease time minus dispatch instant of "
                "scheduled occurrences (at most 20,000 newest instants)",
                params=[_query("minutes", {"type": "integer", "minimum": 1,
                                           "maximum": jobpage.LAG_MAX_MINUTES})])},
            "/v1/status/queues": {"get": _op(
                "Per queue: runs due and not yet leased, and how long the oldest has waited")},
            "/v1/attempts": {"get": _op("Running (or pending) attempts with heartbeat age",
                                        params=[_query("status", {"enum": ["running", "pending"]}),
                                                _query("limit", LIMIT)])},
            "/v1/workers": {"get": _op("Workers as derived from the attempts they held")},
            "/v1/schedule/herd": {"get": _op(
                "Occurrences due per bucket over the next hours, from the schedules",
                params=[_query("hours", {"type": "integer", "minimum": 1,
                                         "maximum": status.HERD_MAX_HOURS}),
                        _query("bucket_s", {"type": "integer",
                                            "minimum": status.HERD_BUCKET_S[0],
                                            "maximum": status.HERD_BUCKET_S[1]})])},
            "/v1/jobs": {
                "post": _op("Create a job", body=JOB_INPUT, ok=201, errors=JOB_WRITE),
                "get": _op("List jobs", params=[
                    _query("tenant"), _query("paused", {"enum": ["true", "false"]}),
                    _query("cursor", {"type": "string",
                                      "pattern": r"^([A-Za-z0-9._-]{1,128})?$"}),
                    _query("limit", LIMIT), CONSISTENT]),
            },
            "/v1/jobs:batchCreate": {"post": _op(
                "Create up to 1,000 jobs in one replicated entry; one result per job (for "
                "an existing one: its current_version and the fields that differ)",
                body={"type": "object", "required": ["jobs"], "properties": {
                    "jobs": {"type": "array", "minItems": 1, "maxItems": jobs.MAX_BATCH_CREATE,
                             "items": JOB_INPUT}}},
                errors=RAFT_WRITE)},
            "/v1/jobs:apply": {"post": _op(
                "Make a tenant's jobs match a list of specs (jobs as code): the plan "
                "(create, change field by field with secrets as ***, and with prune "
                "delete) and its expect; an apply sends expect back and commits the plan "
                "whole in one entry, or nothing of it (409 when a job moved since)",
                body={"type": "object", "required": ["jobs"], "additionalProperties": False,
                      "properties": {
                          "jobs": {"type": "array", "minItems": 1,
                                   "maxItems": apply.MAX_APPLY_JOBS, "items": JOB_INPUT},
                          "tenant": NAME,
                          "prune": {"type": "boolean"}, "dry_run": {"type": "boolean"},
                          "selector": {"type": "object", "propertyNames": NAME,
                                       "additionalProperties": LABEL_VALUE},
                          "expect": {"type": "object", "additionalProperties": {
                              "type": "integer", "minimum": 0}}},
                      # An apply sends the plan's expect back; a dry run needs none.
                      "anyOf": [{"required": ["dry_run"],
                                 "properties": {"dry_run": {"const": True}}},
                                {"required": ["expect"]}],
                      # A selector chooses what prune deletes: only with prune.
                      "dependentSchemas": {"selector": {"anyOf": [
                          {"properties": {"selector": {"maxProperties": 0}}},
                          {"required": ["prune"], "properties": {"prune": {"const": True}}}]}}},
                errors=(409, *JOB_WRITE))},
            "/v1/jobs:export": {"get": _any_content(_op(
                "The jobs this token reads as a jobs file (TOML, YAML or JSON) that apply "
                "reads back unchanged; secrets as ***", content="application/toml",
                params=[_query("format", {"enum": list(apply.FORMATS)}), _query("tenant")],
                errors=(413,)), apply.MEDIA_TYPES.values())},
            "/v1/jobs/{job_id}": {
                "get": _op("A job with its next fire times", params=[*JOB, CONSISTENT],
                           errors=(404,)),
                "put": _op("Replace a job." + IF_MATCH, body=JOB_REPLACE,
                           params=JOB, errors=(412, *JOB_WRITE)),
                "delete": _op("Delete a job." + IF_MATCH, params=JOB,
                              errors=(412, *RAFT_WRITE)),
            },
            "/v1/jobs/{job_id}/history": {"get": _op(
                "A job's committed changes, newest first (create, edit, pause, resume, "
                "bulk_pause, bulk_resume, delete): who, when, the job after the change and "
                "the fields changed. 404 once the job is deleted (see /v1/job-history). "
                "`before`: the `next_before` of the previous page",
                params=[*JOB, *HISTORY_PAGE], errors=(404,))},
            "/v1/job-history/{job_id}": {"get": _op(
                "The changes of a job id whether or not it exists now: a deleted job's "
                "stay until retention (its last change is the delete, with the last "
                "definition)", params=[*JOB, *HISTORY_PAGE], errors=(404,))},
            "/v1/jobs/{job_id}/pause": {"post": _op("Pause", params=JOB,
                                                    errors=(404, *RAFT_WRITE))},
            "/v1/jobs/{job_id}/resume": {"post": _op("Resume", params=JOB,
                                                     errors=(404, *RAFT_WRITE))},
            "/v1/jobs/{job_id}/trigger": {"post": _op(
                "Run now (Idempotency-Key header dedupes)", ok=202, params=JOB,
                body={"type": "object", "additionalProperties": False,
                      "properties": {"override_overlap": {"type": "boolean"}}},
                body_required=False, errors=(404, *RAFT_WRITE))},
            "/v1/jobs/{job_id}/backfill": {"post": _op(
                "Create occurrences for the nominal instants in a range (at most ten years "
                f"and {jobs.MAX_BACKFILL:,} instants; end not before start). An instant the "
                "job already has a run of waiting, running or succeeded creates nothing, "
                "whatever the Idempotency-Key (`existing` counts them)", ok=202,
                params=JOB,
                body={"type": "object", "required": ["start", "end"],
                      "additionalProperties": False,
                      "properties": {"start": INSTANT, "end": INSTANT}},
                errors=(404, *RAFT_WRITE))},
            "/v1/jobs:pause": {"post": _op(
                "Pause every job of a tenant, a queue or a label (within the token's "
                "tenants), with a note; each job records who and why", body=BULK_PAUSE,
                errors=RAFT_WRITE)},
            "/v1/jobs:resume": {"post": _op(
                "Resume every job of a tenant, a queue or a label, with a note",
                body=BULK_PAUSE, errors=RAFT_WRITE)},
            "/v1/calendars": {"get": _op("Calendars (a tenant token sees its own)",
                                         params=[CONSISTENT])},
            "/v1/calendars/{name}": {
                "get": _op("A calendar and the jobs that list it",
                           params=[*TENANT, CONSISTENT], errors=(404,)),
                "put": _also_created(_op(
                    "Create (201) or replace (200) a calendar (admin, or its tenant)",
                    body=CALENDAR_INPUT, params=TENANT, errors=RAFT_WRITE)),
                "delete": _op("Delete a calendar; 409 naming the jobs while jobs list it",
                              params=TENANT, errors=(404, *RAFT_WRITE)),
            },
            "/v1/channels": {"get": _op("Notification channels (a tenant token sees its "
                                        "own)", params=[CONSISTENT])},
            "/v1/channels/{name}": {
                "get": _op("A notification channel and the jobs that name it (never its "
                           "password)", params=[*TENANT, CONSISTENT], errors=(404,)),
                "put": _also_created(_op(
                    "Create (201) or replace (200) a notification channel (admin, or its "
                    "tenant)", body=CHANNEL_INPUT, params=TENANT, errors=RAFT_WRITE)),
                "delete": _op("Delete a channel; 409 naming the jobs while jobs name it",
                              params=TENANT, errors=(404, *RAFT_WRITE)),
            },
            "/v1/tenants": {"get": _op("Tenants with quotas (a tenant token sees its own)",
                                       params=[CONSISTENT])},
            "/v1/tenants/{name}": {
                "get": _op("One tenant's quotas", params=[*TENANT, CONSISTENT],
                           errors=(404,)),
                "put": _op("Set a tenant's quotas and policy (admin)", body=TENANT_INPUT,
                           params=TENANT, errors=RAFT_WRITE),
            },
            "/v1/tenants/{name}/webhook-key": {
                "get": _op("The key that signs the tenant's notify webhooks (admin)",
                           params=TENANT, errors=(503,)),
                "put": _op("Rotate the tenant's webhook key; answers the new key (admin)",
                           params=TENANT, errors=RAFT_WRITE),
            },
            "/v1/webhook-key": {"get": _op(
                "The key that signs webhooks to the cluster-wide receivers (admin)",
                errors=(503,))},
            "/v1/outbox": {"get": _op(
                "Webhook deliveries given up (dead) or pending, per receiver (admin)", params=[
                    _query("status", {"enum": list(outbox.STATUSES), "default": "dead"}),
                    _query("cursor", {"type": "string", "maxLength": outbox.MAX_CURSOR_LEN,
                                      "pattern": r"^([0-9]{1,18}\|[\s\S]*)?$"}),
                    _query("limit", LIMIT), CONSISTENT])},
            "/v1/outbox/{outbox_id}/retry": {"post": _op(
                "Deliver a dead row again, attempts reset (admin)",
                params=[_path("outbox_id", {"type": "integer", "minimum": 0,
                                            "maximum": outbox.MAX_OUTBOX_ID})],
                body={"type": "object", "additionalProperties": False,
                      "properties": {"receiver": {
                          "type": ["string", "null"], "minLength": 1,
                          "maxLength": model.MAX_URL_LEN,
                          "description": "only the delivery to this receiver (missing or "
                                         "null: every dead delivery of the row)"}}},
                body_required=False, errors=(404, *RAFT_WRITE))},
            "/v1/backup": {"get": _op(
                "A consistent SQLite snapshot of the state (admin)", params=[CONSISTENT],
                content="application/vnd.sqlite3", errors=(503,))},
            "/v1/cluster/members": {
                "get": _op("Cluster members (admin)"),
                "post": _op("Add a member (admin; raftcron cluster add-node)", body={
                    "type": "object", "required": ["id", "raft_addr", "http_url"],
                    "properties": {
                        "id": {"type": "string", "pattern": anchored(membership.ID_RE)},
                        "raft_addr": {"type": "string",
                                      "pattern": anchored(membership.ADDR_RE),
                                      "description": "HOST:PORT, the port 1-65535 "
                                                     "without a leading zero (voters are "
                                                     "told apart by this text)"},
                        "http_url": {"type": "string", "maxLength": 500,
                                     "pattern": anchored(membership.URL_RE)}}},
                    errors=(409, 503)),
            },
            "/v1/cluster/members/{member_id}": {"delete": _op(
                "Remove a member (admin; raftcron cluster remove-node)",
                params=[_path("member_id")], errors=(404, 409, 503))},
            "/v1/occurrences": {"get": _op("List occurrences", params=[
                _query("job_id"), _query("status", {"enum": list(occurrences.STATUSES)}),
                _query("kind", {"enum": list(occurrences.KINDS)}), _query("since", INSTANT),
                _query("until", INSTANT),
                _query("cursor", {"type": "string", "pattern": r"^[0-9]{1,18}:[\s\S]+$"}),
                _query("limit", LIMIT), CONSISTENT])},
            "/v1/occurrences/{occurrence_id}": {"get": _op(
                "An occurrence with its attempts",
                params=[_path("occurrence_id"), CONSISTENT], errors=(404,))},
            "/v1/occurrences/{occurrence_id}/cancel": {"post": _op(
                "Cancel a run, with a note (admin, or the run's tenant): a queued one at "
                "once; a running one is told by its heartbeat answer, killed after a grace "
                "period and ends cancelled. 409 naming the state when it already ended",
                params=[_path("occurrence_id")],
                body=NOTE_BODY,
                errors=(404, *RAFT_WRITE))},
            "/v1/concurrency-groups": {"get": _op(
                "Concurrency groups of the visible tenants (set, or named by a job), with "
                "runs holding and waiting", params=[CONSISTENT])},
            "/v1/concurrency-groups/{name}": {
                "get": _op("One group: limit, jobs, holders and waiters",
                           params=[*TENANT, _query("tenant", NAME), CONSISTENT],
                           errors=(404,)),
                "put": _op(
                    "Set a group's limit (admin, or the group's tenant): at most `limit` "
                    "runs of its jobs hold leases at once, across all workers",
                    params=TENANT, body={
                        "type": "object", "additionalProperties": False,
                        "required": ["limit"], "properties": {
                            "limit": {"type": "integer", "minimum": 1,
                                      "maximum": groups.MAX_LIMIT},
                            "tenant": NAME}},
                    errors=RAFT_WRITE)},
            "/v1/leases": {"post": _op(
                "Lease due runs (long poll, up to wait_s seconds)", body=LEASES,
                errors=(503,), extra={"x-long-poll": {"parameter": "wait_s",
                                                      "max_s": workers.MAX_WAIT_S}})},
            "/v1/heartbeats": {"post": _op("Heartbeat many attempts", body=HEARTBEATS,
                                           errors=(403, 503))},
            "/v1/releases": {"post": _op("Hand leases back unrun", body=PAIRS,
                                         errors=(403, 503))},
            "/v1/completions": {"post": _op("Report many outcomes", body=COMPLETIONS,
                                            errors=(403, 503))},
            "/v1/attempts/{attempt_id}/heartbeat": {"post": _op(
                "Heartbeat one attempt", params=[_path("attempt_id", ATTEMPT_ID)],
                body={"type": "object", "required": ["worker_id", "fencing_token"],
                      "properties": {"worker_id": WORKER_ID, "fencing_token": FENCING_TOKEN}},
                errors=(404, 409, 503))},
            "/v1/attempts/{attempt_id}/complete": {"post": _op(
                "Report one outcome", params=[_path("attempt_id", ATTEMPT_ID)],
                body={"type": "object", "required": ["worker_id", "fencing_token", "outcome"],
                      "properties": {"worker_id": WORKER_ID, **OUTCOME_FIELDS},
                      **OUTCOME_TIMES},
                errors=(404, 409, 503))},
        },
    }
