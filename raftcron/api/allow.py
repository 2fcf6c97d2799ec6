"""The `Allow` header of a 405 answer (RFC 9110 §15.5.6): every method the path serves.

Starlette's router raises its 405 from the first route whose path matched, so its own
`Allow` names that route's methods only (`/v1/jobs` would say POST, hiding GET). The
whole routes table is asked instead.

A `{name:path}` parameter that swallows a `/` belongs to a route of another resource
(`GET /v1/occurrences/{id:path}` matches `/v1/occurrences/x/cancel`, the cancel action's
path): such a route counts only when no route matches the path without it."""

from __future__ import annotations

from collections.abc import Iterable

from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.types import Scope

# The order methods are listed in (then any other, alphabetically).
_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(routes: Iterable[BaseRoute], scope: Scope) -> list[str]:
    """The methods of every route whose path matches `scope`'s, in a stable order."""
    exact: set[str] = set()
    swallowing: set[str] = set()
    probe = {**scope, "type": "http"}
    for route in routes:
        match, child = route.matches(probe)
        if match == Match.NONE:
            continue
        if isinstance(route, Route) and route.methods:
            params = child.get("path_params") or {}
            spans = any(isinstance(v, str) and "/" in v for v in params.values())
            (swallowing if spans else exact).update(route.methods)
        elif isinstance(route, Mount):  # the status page's static files
            exact |= {"GET", "HEAD"}
    methods = exact or swallowing
    return sorted(methods, key=lambda m: (_ORDER.index(m) if m in _ORDER else len(_ORDER), m))


def allow_header(routes: Iterable[BaseRoute], scope: Scope, fallback: str | None) -> str:
    """The `Allow` value for a 405 on `scope`'s path; `fallback` (the raiser's own) when
    no route of the table matches it."""
    methods = allowed_methods(routes, scope)
    return ", ".join(methods) if methods else (fallback or "")
