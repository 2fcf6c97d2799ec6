"""The Dockerfile's recipe, replayed without a Docker engine (none runs on these machines).

Its COPY sources are laid out as in the image, installed with a plain (non-editable)
`pip install`, three nodes run from that install with the image's ENV, and the image's
HEALTHCHECK command runs verbatim against one of them. What this cannot show: the base
image itself, and the non-root USER (the interpreter of a test run is rarely readable by
another uid)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from raftcron.testing import LocalCluster, wait_until

REPO = Path(__file__).resolve().parents[2]
APP = "/app"

pytestmark = pytest.mark.system


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (REPO / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def image_env(app: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in dockerfile_instructions():
        if word == "ENV":
            for pair in rest.split():
                key, _, value = pair.partition("=")
                env[key] = value.replace(APP, str(app), 1) if value.startswith(APP) else value
    return env


def lay_out_copies(app: Path) -> None:
    """Each `COPY src... dest` relative to WORKDIR (the image's /app is `app`)."""
    for word, rest in dockerfile_instructions():
        if word != "COPY":
            continue
        *sources, dest = rest.split()
        for src in sources:
            path = REPO / src
            into_dir = len(sources) > 1 or dest.endswith("/")
            target = app / dest / path.name if into_dir else app / dest
            if path.is_dir():
                shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)


def healthcheck_command() -> str:
    rest = next(rest for word, rest in dockerfile_instructions() if word == "HEALTHCHECK")
    return rest.split(" CMD ", 1)[1]


def test_the_image_recipe_installs_serves_and_passes_its_healthcheck(tmp_path: Path) -> None:
    app, site, bindir = tmp_path / "app", tmp_path / "site", tmp_path / "bin"
    app.mkdir()
    lay_out_copies(app)
    assert (app / "pyproject.toml").exists() and (app / "raftcron" / "node.py").exists()
    # The image's `pip install .`: a regular install, no editable link to this checkout.
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(site), str(app)], check=True, timeout=600)
    env = {**os.environ, **image_env(app), "PYTHONPATH": str(site)}
    bindir.mkdir()
    (bindir / "python").symlink_to(sys.executable)
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    where = subprocess.run([sys.executable, "-c", "import raftcron; print(raftcron.__file__)"],
                           env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    assert where.stdout.strip().startswith(str(site)), where.stdout
    # The image's ENTRYPOINT is the installed console script.
    entry = next(rest for word, rest in dockerfile_instructions() if word == "ENTRYPOINT")
    script = site / "bin" / json.loads(entry)[0]
    usage = subprocess.run([sys.executable, str(script), "--help"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0 and "node" in usage.stdout, usage.stderr

    c = LocalCluster(tmp_path / "cluster")
    c.env, c.cwd = env, tmp_path
    c.start()
    try:
        leader = c.wait_leader(timeout=60)
        page = c.http.get(c.urls[leader] + "/")
        assert page.status_code == 200 and "<html" in page.text.lower()
        port = c.urls[leader].rsplit(":", 1)[1]
        check = healthcheck_command()

        def healthy() -> bool:
            return subprocess.run(["/bin/sh", "-c", check], env={**env,
                                  "RAFTCRON_HTTP_PORT": port}, cwd=tmp_path,
                                  capture_output=True, timeout=10).returncode == 0

        wait_until(healthy, 30, message="the image's HEALTHCHECK to pass")
        c.kill(leader)
        assert not healthy(), "the HEALTHCHECK passed against a dead node"
    finally:
        c.close()
