"""The `Allow` header of a 405 names the methods of the resource the path names."""

from __future__ import annotations

import pytest

from raftcron.api.allow import allowed_methods
from raftcron.api.app import ROUTES


def _scope(path: str) -> dict[str, object]:
    return {"type": "http", "path": path, "method": "OPTIONS", "root_path": ""}


@pytest.mark.parametrize(("path", "methods"), [
    ("/v1/jobs", ["GET", "HEAD", "POST"]),
    ("/v1/occurrences/nightly@2026-12-01T09:00:00Z", ["GET", "HEAD"]),
    # The cancel action: GET /v1/occurrences/{id:path} matches this path too, but with an
    # id that swallows "/cancel"; it is another resource's route.
    ("/v1/occurrences/nightly@2026-12-01T09:00:00Z/cancel", ["POST"]),
    ("/v1/attempts/nightly@2026-12-01T09:00:00Z~1/heartbeat", ["POST"]),
])
def test_allow_names_the_methods_of_the_resource_only(path: str, methods: list[str]) -> None:
    assert allowed_methods(ROUTES, _scope(path)) == methods


def test_a_path_only_a_swallowing_route_matches_still_gets_its_methods() -> None:
    # An id with a "/" in it (no real id has one) is still served by the GET route.
    assert allowed_methods(ROUTES, _scope("/v1/occurrences/a/b")) == ["GET", "HEAD"]
