"""Jobs files written: the jobs of a tenant in the shape `apply -f` reads back (pure).

`exported` turns jobs as the API lists them into their definitions (what the cluster adds,
such as the version and the times, left out; secrets as `***`, which `apply` keeps as the
stored value), and `dump` writes them as TOML, YAML or JSON with nulls left out (TOML has
none; an absent field is the same as null), so `export` then `apply` changes nothing.
"""

from __future__ import annotations

import json
from typing import Any

import tomli_w
import yaml

from raftcron.core.secrets import redact_target

FORMATS = ("toml", "yaml", "json")
MEDIA_TYPES = {"toml": "application/toml", "yaml": "application/yaml",
               "json": "application/json"}
# What the API shows of a job that is the cluster's, not the job's definition.
SERVER_FIELDS = frozenset({"version", "watermark", "created_at", "updated_at",
                           "next_fire_times", "done"})


def exported(job: dict[str, Any]) -> dict[str, Any]:
    """A listed job as its definition: no server fields, its target's secrets as `***`."""
    out = {k: v for k, v in job.items() if k not in SERVER_FIELDS}
    out["target"] = redact_target(out["target"])
    return out


def without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def dump(jobs: list[dict[str, Any]], fmt: str) -> str:
    """`jobs` as a jobs file of format `fmt`, nulls left out."""
    doc = {"jobs": [without_nulls(j) for j in jobs]}
    if fmt == "toml":
        return tomli_w.dumps(doc, multiline_strings=True)
    if fmt == "yaml":
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
