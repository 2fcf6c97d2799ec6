"""Jobs files: TOML, YAML or JSON holding `jobs = [...]` in the API's JSON shape.

`load` reads a file or a directory of them (sorted by name, not recursing into hidden
directories) and checks every job with the API's own parser before anything is sent, so
a file with one invalid job is refused whole, naming the file, the job and the field.
Writing them is core.job_files (shared with the API's export).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from raftcron.api.schema_gate import check_body
from raftcron.core.errors import ValidationError
from raftcron.core.model import parse_job

SUFFIXES = {".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".json": "json"}
# A bound on what one run of `apply` reads: a typo'd path at / must not read the disk.
MAX_FILES = 1_000
MAX_FILE_BYTES = 16 * 1024 * 1024


class JobFileError(Exception):
    """A file or one of its jobs cannot be applied; the message names where and why."""


@dataclass(frozen=True)
class FileJob:
    path: str
    index: int
    job: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.path}: jobs[{self.index}] ({self.job.get('id', '?')})"


def load(path: str) -> list[FileJob]:
    """Every job of the file or directory at `path`, each checked by the API's parser."""
    root = Path(path)
    if root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in SUFFIXES
                       and not any(part.startswith(".") for part in p.relative_to(root).parts))
        if not files:
            raise JobFileError(f"{path}: no .toml, .yaml, .yml or .json file in it")
        if len(files) > MAX_FILES:
            raise JobFileError(f"{path}: more than {MAX_FILES} jobs files")
    elif root.is_file():
        files = [root]
    else:
        raise JobFileError(f"{path}: no such file or directory")
    jobs: list[FileJob] = []
    seen: dict[str, str] = {}
    for file in files:
        for item in _jobs_of_file(file):
            job_id = item.job.get("id")
            if isinstance(job_id, str) and job_id in seen:
                raise JobFileError(f"{item.where}: id: also defined at {seen[job_id]}")
            if isinstance(job_id, str):
                seen[job_id] = item.where
            jobs.append(item)
    return jobs


def _jobs_of_file(file: Path) -> list[FileJob]:
    kind = SUFFIXES.get(file.suffix)
    if kind is None:
        raise JobFileError(f"{file}: not a .toml, .yaml, .yml or .json file")
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            raise JobFileError(f"{file}: larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise JobFileError(f"{file}: cannot be read: {e}") from None
    doc = parse_text(text, kind, str(file))
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise JobFileError(f"{file}: must hold a table (object) with a `jobs` list")
    unknown = sorted(set(doc) - {"jobs"})
    if unknown:
        raise JobFileError(f"{file}: {unknown[0]}: unknown key (a jobs file holds `jobs`)")
    items = doc.get("jobs", [])
    if not isinstance(items, list):
        raise JobFileError(f"{file}: jobs: must be a list of jobs")
    out = []
    for i, job in enumerate(items):
        item = FileJob(str(file), i, job if isinstance(job, dict) else {})
        if not isinstance(job, dict):
            raise JobFileError(f"{item.where}: must be a table (object)")
        try:
            # The server's own checks, in its order: the served schema, then the core.
            check_body("POST", "/v1/jobs", json.loads(json.dumps(job, default=str)))
            parse_job(job)
        except ValidationError as e:
            raise JobFileError(f"{item.where}: {e.field}: {e.message}") from None
        out.append(item)
    return out


def parse_text(text: str, kind: str, name: str) -> Any:
    """The document in `text` (`kind` toml, yaml or json); JobFileError naming the file
    and the position on a syntax error."""
    try:
        if kind == "toml":
            return tomllib.loads(text)
        if kind == "yaml":
            return yaml.safe_load(text)
        return json.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise JobFileError(f"{name}: not valid TOML: {e}") from None
    except yaml.YAMLError as e:
        raise JobFileError(f"{name}: not valid YAML: {str(e).splitlines()[0]}") from None
    except json.JSONDecodeError as e:
        raise JobFileError(f"{name}: not valid JSON: {e}") from None
    except RecursionError:
        raise JobFileError(f"{name}: nested too deeply to be a jobs file") from None
