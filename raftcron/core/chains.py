"""Chains: a job that runs after another job's run ends (`after`).

`"after": {"job": "extract", "on": "success" | "failure" | "finish"}` gives the job one
occurrence for each occurrence of `extract` that ends that way: `success` is an occurrence
that ended `succeeded`, `failure` one that ended `failed` (after its last retry, a timeout
or a lost worker included), `finish` either. A cancelled or skipped occurrence did not
run to an end, and starts nothing.

The downstream occurrence is created by the same log entry that ends the upstream one
(state.chains), so no failover can fall between the two; its identity is (downstream job,
upstream occurrence id), which a UNIQUE index makes the final call on.

A chained job has no schedule of its own: its runs come from its upstream (and from manual
triggers). Pure: no clock, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from raftcron.core.errors import ValidationError

CHAIN_ON = ("success", "failure", "finish")
# The upstream occurrence statuses each `on` follows.
ENDS_FOLLOWED: dict[str, tuple[str, ...]] = {
    "success": ("succeeded",),
    "failure": ("failed",),
    "finish": ("succeeded", "failed"),
}
# The longest chain a job may end: A1 -> A2 -> ... (cycles are refused at any length; this
# bounds the walk that finds them, and a chain a person can follow on a page).
MAX_CHAIN_DEPTH = 32
# The most chained jobs one job may start: each of its ends creates one run of each,
# inside the apply of the entry that ends it (state.chains), so this bounds that apply.
MAX_FOLLOWERS = 50
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


@dataclass(frozen=True, slots=True)
class After:
    """The upstream a chained job follows, and which of its ends start it."""

    job: str
    on: str = "success"

    def to_spec(self) -> dict[str, str]:
        return {"job": self.job, "on": self.on}

    def follows(self, upstream_status: str) -> bool:
        return upstream_status in ENDS_FOLLOWED[self.on]

    def describe(self) -> str:
        return f"after each {self.on} of {self.job}"


def parse_after(value: Any, job_id: str) -> After:
    """`after` of a job definition; `job_id` is the job's own id (it cannot follow itself)."""
    if not isinstance(value, dict):
        raise ValidationError("after", 'must be an object {"job": ..., "on": ...}')
    unknown = sorted(set(value) - {"job", "on"})
    if unknown:
        raise ValidationError(f"after.{unknown[0][:64]}", "is not a field of after "
                              "(job, on)")
    upstream = value.get("job")
    if not isinstance(upstream, str) or not _JOB_ID_RE.fullmatch(upstream):
        raise ValidationError("after.job", "must be a job id: 1-128 characters of "
                              "A-Z a-z 0-9 . _ -")
    if upstream == job_id:
        raise ValidationError("after.job", "a job cannot run after itself (a cycle)")
    on = value.get("on", "success")
    if on not in CHAIN_ON:
        raise ValidationError("after.on", f"must be one of {', '.join(CHAIN_ON)}")
    return After(job=upstream, on=on)


def after_from_spec(value: dict[str, Any] | None) -> After | None:
    return None if value is None else After(job=value["job"], on=value["on"])


def upstream_of(occurrence_id: str | None, outcome: str | None) -> dict[str, Any] | None:
    """What the API and a lease say of a run's upstream (None for a run no chain started).
    Job ids hold no `@`, so the upstream's job is its occurrence id's prefix."""
    if occurrence_id is None:
        return None
    return {"job_id": occurrence_id.split("@", 1)[0], "occurrence_id": occurrence_id,
            "outcome": outcome}


def upstream_env(upstream: dict[str, Any] | None) -> dict[str, str]:
    """The environment a chained run gets: what triggered it (empty for other runs)."""
    if not upstream:
        return {}
    return {
        "RAFTCRON_UPSTREAM_JOB_ID": str(upstream.get("job_id", "")),
        "RAFTCRON_UPSTREAM_OCCURRENCE_ID": str(upstream.get("occurrence_id", "")),
        "RAFTCRON_UPSTREAM_OUTCOME": str(upstream.get("outcome", "")),
    }


def upstream_headers(upstream: dict[str, Any] | None) -> dict[str, str]:
    """The headers a chained HTTP run sends: what triggered it (empty for other runs)."""
    if not upstream:
        return {}
    return {
        "X-Raftcron-Upstream-Job-Id": str(upstream.get("job_id", "")),
        "X-Raftcron-Upstream-Occurrence-Id": str(upstream.get("occurrence_id", "")),
        "X-Raftcron-Upstream-Outcome": str(upstream.get("outcome", "")),
    }
