"""The served schema is the server's gate: every JSON body is checked against the request
schema that /openapi.json declares for its operation before any handler reads it.

So the document a client reads and the rules the server enforces are one: a body the
schema refuses never reaches a handler, whatever the handler itself checks. What follows
in the handlers and the core is only what JSON Schema cannot state, and each such rule is
named in the schema's `description` of its field or operation: a cron expression that
fires at all (`format: cron`), `end_at` after `start_at`, the order of the run bounds, a
backfill's span, distinct schedule names. `format` is an annotation here, as JSON Schema
2020-12 makes it: the core checks those values and names their exact fault.

A refusal is a `ValidationError`: HTTP 400 naming the dotted field (`schedules.2.jitter_s`,
`target.http.url`) and the reason, written from the failing keyword and its bounds; or,
for the bodies whose core parser has its own words (jobs, batches, leases, tenants), in
those words when that parser refuses the body too (`EXPLAINERS`). The schema decides.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any

import jsonschema_rs

from raftcron.api import jobs, tenants, workers
from raftcron.api.openapi import openapi_spec
from raftcron.core.errors import ValidationError

# Route templates name converters (`{alert_id:path}`); the document names the parameter.
_CONVERTER = re.compile(r"\{([^}:]+):[^}]+\}")
# An enumeration longer than this is described, not listed, in a refusal (time zones).
_LISTED_CHOICES = 12


def document_path(route_path: str) -> str:
    """The path of /openapi.json for a route's template."""
    return _CONVERTER.sub(r"{\1}", route_path)


@functools.cache
def _spec() -> dict[str, Any]:
    return openapi_spec()


@functools.cache
def _validator(method: str, path: str) -> tuple[Any, dict[str, Any]] | None:
    """The compiled request-body schema of one operation with that schema, or None when
    the operation declares no JSON body."""
    spec = _spec()
    operation = spec["paths"].get(path, {}).get(method.lower())
    if operation is None or "requestBody" not in operation:
        return None
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    rooted = {**schema, "components": spec["components"]}
    return jsonschema_rs.Draft202012Validator(rooted, validate_formats=False), rooted


# Where the core has its own words for a refusal (a header value's control character, a
# batch's `jobs[i]`), they are used: the schema decides that a body is refused, the core's
# parser says why when it refuses it too.
EXPLAINERS: dict[tuple[str, str], Callable[[Any], object]] = {
    ("POST", "/v1/jobs"): jobs.explain_job,
    ("PUT", "/v1/jobs/{job_id}"): jobs.explain_job,
    ("POST", "/v1/jobs:batchCreate"): jobs.batch_jobs,
    ("POST", "/v1/leases"): workers.lease_params,
    ("PUT", "/v1/tenants/{name}"): tenants.explain_tenant,
}


def check_body(method: str, route_path: str, body: Any) -> None:
    """Raise `ValidationError` for a body the operation's schema refuses; an operation
    without a declared body is not checked here."""
    key = (method.upper(), document_path(route_path))
    compiled = _validator(*key)
    if compiled is None:
        return
    validator, schema = compiled
    if validator.is_valid(body):
        return
    explain = EXPLAINERS.get(key)
    if explain is not None:
        try:
            explain(body)  # raises the core's ValidationError when it refuses too
        except ValidationError:
            raise
        except Exception:  # noqa: BLE001 - the schema's own words below, whatever failed
            pass
    error = _most_specific(validator.iter_errors(body))
    raise ValidationError(*_explain(error, schema))


def _depth(error: Any) -> int:
    """How deep an error reaches, counting into the branches of anyOf/oneOf."""
    branches = getattr(error.kind, "context", None) or []
    inner = [_depth(e) for branch in branches for e in branch]
    return max([len(error.instance_path), *inner])


def _most_specific(errors: Iterable[Any]) -> Any:
    """The error that names the most precise field: the deepest one, and inside a oneOf
    or anyOf the branch the client meant (the one whose type the value has, or the one
    that got furthest)."""
    error = max(errors, key=_depth)
    branches = getattr(error.kind, "context", None) or []
    if error.kind.name not in ("oneOf", "anyOf") or not all(branches):
        return error  # no branch to look into, or several branches were valid
    here = len(error.instance_path)
    meant = [b for b in branches if not any(_wrong_type(e, here) for e in b)]
    if len(meant) == 1:
        return _most_specific(meant[0])
    def rank(branch: list[Any]) -> tuple[int, int]:
        return max(map(_depth, branch)), -len(branch)

    best = max(branches, key=rank)
    # Deeper than here, or alone in failing least: the branch the client meant.
    if rank(best)[0] > here or [rank(b) for b in branches].count(rank(best)) == 1:
        return _most_specific(best)
    return error


def _wrong_type(error: Any, here: int) -> bool:
    """The value at `here` has none of the types the failing schema allows."""
    if len(error.instance_path) != here:
        return False
    return error.kind.name == "type" or (error.kind.name in ("oneOf", "anyOf")
                                         and _branch_types(error) is not None)


def _alternatives(branches: list[Any]) -> list[str] | None:
    """The fields of a oneOf/anyOf each of whose branches requires one field (`schedule`
    or `schedules`; a tenant, a queue or a label; `dry_run` or `expect`)."""
    names = [b.get("required") for b in branches if isinstance(b, dict)]
    if len(names) != len(branches) or not all(n and len(n) == 1 for n in names):
        return None
    return [n[0] for n in names]


def _branch_types(error: Any) -> list[str] | None:
    """The types a oneOf/anyOf allows when the value has none of them (each branch
    failed on its type alone), in the API's words."""
    here = len(error.instance_path)
    types: list[str] = []
    for branch in getattr(error.kind, "context", None) or []:
        if not branch or any(len(e.instance_path) != here for e in branch):
            return None
        for e in branch:
            if e.kind.name in ("oneOf", "anyOf"):
                inner = _branch_types(e)
                if inner is None:
                    return None
                names = inner
            elif e.kind.name == "type":
                names = [_TYPE_NAMES.get(str(t), str(t))
                         for t in e.kind.as_dict().get("types") or [e.kind.as_dict().get("type")]]
            else:
                return None
            types += [n for n in names if n not in types]
    return types or None


def _subschema(schema: dict[str, Any], schema_path: Iterable[Any]) -> dict[str, Any]:
    """The schema object holding the failing keyword (refs followed)."""
    node: Any = schema
    parts = list(schema_path)[:-1]
    for part in parts:
        while isinstance(node, dict) and "$ref" in node:
            node = _resolve(schema, node["$ref"])
        node = node[part] if isinstance(node, dict) else node[int(part)]
    while isinstance(node, dict) and "$ref" in node:
        node = _resolve(schema, node["$ref"])
    return node if isinstance(node, dict) else {}


def _resolve(schema: dict[str, Any], ref: str) -> Any:
    node: Any = schema
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def _field(path: Iterable[Any], *more: str) -> str:
    return ".".join([*(str(p) for p in path), *more]) or "body"


def _choices(options: list[Any], where: dict[str, Any]) -> str:
    if len(options) > _LISTED_CHOICES and where.get("description"):
        return f"must be {where['description']}"
    shown = ", ".join("null" if o is None else str(o) for o in options)
    return f"must be one of {shown}"


def _bounds(where: dict[str, Any]) -> str:
    lo, hi = where.get("minimum"), where.get("maximum")
    if lo is not None and hi is not None:
        return f"must be between {lo} and {hi}"
    return f"must be at least {lo}" if lo is not None else f"must be at most {hi}"


_TYPE_NAMES = {"object": "an object", "array": "a list", "string": "a string",
               "integer": "an integer", "number": "a number", "boolean": "true or false",
               "null": "null"}


def _explain(error: Any, schema: dict[str, Any]) -> tuple[str, str]:
    """(dotted field, reason) of one schema error, in the API's own words."""
    kind, details = error.kind.name, error.kind.as_dict()
    where = _subschema(schema, error.schema_path)
    path = error.instance_path
    described = f" ({where['description']})" if where.get("description") else ""
    if kind == "required":
        return _field(path, str(details["property"])), "is required"
    if kind in ("additionalProperties", "unevaluatedProperties"):
        unexpected = details.get("unexpected") or [""]
        return _field(path, str(unexpected[0])), "unknown field"
    if kind == "type":
        types = details.get("types") or [details.get("type")]
        names = " or ".join(_TYPE_NAMES.get(str(t), str(t)) for t in types)
        return _field(path), f"must be {names}"
    if kind == "enum":
        return _field(path), _choices(details.get("options", []), where)
    if kind == "const":
        return _field(path), f"must be {details.get('expected_value')}"
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return _field(path), _bounds(where)
    if kind == "minLength":
        return _field(path), (f"must be at least {details['limit']} characters"
                              if details["limit"] > 1 else "must not be empty")
    if kind == "maxLength":
        return _field(path), f"must be at most {details['limit']} characters"
    if kind == "minItems":
        return _field(path), f"must hold at least {details['limit']} item(s)"
    if kind == "maxItems":
        return _field(path), f"must hold at most {details['limit']} items"
    if kind == "maxProperties":
        return _field(path), f"must hold at most {details['limit']} entries"
    if kind == "uniqueItems":
        return _field(path), "names the same item twice"
    if kind == "pattern":
        return _field(path), f"must match {where.get('pattern')}{described}"
    if kind == "propertyNames":
        return _field(path), f"holds a name that is not allowed: {error.message}"
    if kind in ("oneOf", "anyOf") and (types := _branch_types(error)):
        return _field(path), f"must be {' or '.join(types)}"
    if kind in ("oneOf", "anyOf") and (names := _alternatives(where.get(kind, []))):
        return _field(path), (f"needs exactly one of {', '.join(names)}" if kind == "oneOf"
                              else f"needs {' or '.join(names)}")
    return _field(path), f"is not valid here: {error.message}{described}"
