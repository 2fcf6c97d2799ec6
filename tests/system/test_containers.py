"""The image and deploy/, for real: a base made from Debian's packages, the image built on
it, three node containers and a worker container started from the shipped deploy/ files,
the leader's container killed and started again.

The commands are the README's "Deploy" section (`test_the_readme_shows_what_this_test_runs`
holds them to it). The only change made to the shipped files: the six port numbers in
deploy/n*.toml become free ones, because the containers share the host's network with
whatever else runs here. Skipped only when podman is absent outside CI; with $CI set a
missing tool is a failure.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from raftcron.testing import free_port_base, wait_until
from tests.system.helpers import assert_every_second_once, ts

REPO = Path(__file__).resolve().parents[2]
CACHE = Path("/var/tmp/raftcron-image-cache")
NODES = ("n1", "n2", "n3")
SHIPPED_HTTP = {"n1": 8701, "n2": 8702, "n3": 8703}
SHIPPED_RAFT = {"n1": 8801, "n2": 8802, "n3": 8803}
# Debian 12's podman 4.3 on a host without systemd or a registry (see the README).
PODMAN_FLAGS = ("--runtime", "runc", "--cgroup-manager", "cgroupfs")
TOOLS = ("podman", "runc", "mmdebstrap")

# The README's "Deploy" commands, with {placeholders} for what differs per run.
HOSTS = " ".join(f"--add-host {n}:127.0.0.1" for n in NODES)
BASE_CMD = ("mmdebstrap --variant=apt --include=python3,python3-venv,python3-pip,"
            "ca-certificates bookworm {tar}")
IMPORT_CMD = "podman import {tar} {base}"
WHEELS_CMD = "pip wheel -w dist/wheels ."
BUILD_CMD = ("podman build --isolation chroot --network=host --format docker "
             "--build-arg BASE={base} -t {image} .")
INIT_CMD = ("podman run --rm --user 0 --network=none --no-healthcheck -v {deploy}:/deploy "
            "{image} deploy init --dir /deploy --uid 10001")
NODE_CMD = ("podman run -d --name {name} --network=host " + HOSTS
            + " -v {deploy}/cluster.secret:/etc/raftcron/cluster.secret:ro"
            " -v {deploy}/tokens.json:/etc/raftcron/tokens.json:ro"
            " -v {deploy}/{node}.toml:/etc/raftcron/node.toml:ro -v {name}-data:/data {image}")
WORKER_CMD = ("podman run -d --name {name} --network=host " + HOSTS + " --no-healthcheck"
              " -v {deploy}/worker.token:/etc/raftcron/worker.token:ro {image} worker"
              " --server {servers} --id {name} --concurrency 8"
              " --token-file /etc/raftcron/worker.token")
HEALTH_CMD = "podman healthcheck run {name}"
KILL_CMD = "podman kill --signal KILL {name}"
START_CMD = "podman start {name}"

# What the README shows in those placeholders.
README_VALUES = {
    "tar": "base.tar", "base": "localhost/rc-base", "image": "raftcron",
    "deploy": "$PWD/deploy", "name": "$n", "node": "$n",
    "servers": ",".join(f"http://{n}:{SHIPPED_HTTP[n]}" for n in NODES),
}
README_COMMANDS = {BASE_CMD: {}, IMPORT_CMD: {}, WHEELS_CMD: {}, BUILD_CMD: {}, INIT_CMD: {},
                   NODE_CMD: {}, WORKER_CMD: {"name": "worker"}, HEALTH_CMD: {},
                   KILL_CMD: {"name": "n1"}, START_CMD: {"name": "n1"}}


def readme_deploy_commands() -> set[str]:
    """The shell commands of the README's "Deploy" section: continuation lines joined,
    comments dropped, split at `;`, `&&` and `do`."""
    text = (REPO / "README.md").read_text()
    start = text.index("\n## Deploy\n")
    end = text.find("\n## ", start + 1)
    section = re.sub(r"\\\n\s*", " ", text[start:end if end != -1 else None])
    commands = set()
    for line in section.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line)
        for piece in re.split(r";|&&|\bdo\b", line):
            commands.add(re.sub(r"\s+", " ", piece).strip())
    return commands


def test_the_readme_shows_what_this_test_runs() -> None:
    shown = readme_deploy_commands()
    for template, overrides in README_COMMANDS.items():
        command = template.format(**{**README_VALUES, **overrides})
        assert command in shown, f"the README's Deploy section lacks: {command}"


# --- the run ---------------------------------------------------------------------------


def tools_or_skip() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if not missing:
        return
    message = f"{', '.join(missing)} not installed (apt-get install -y podman runc mmdebstrap)"
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and {message}: the container test must run in CI")
    pytest.skip(message)


class Podman:
    """The podman command line with this host's flags and its own containers.conf."""

    def __init__(self, root: Path) -> None:
        conf = root / "containers.conf"
        conf.write_text("[containers]\ndefault_ulimits = []\n")
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        self.timings: dict[str, float] = {}

    def argv(self, command: str) -> list[str]:
        words = shlex.split(command)
        return ["podman", *PODMAN_FLAGS, *words[1:]] if words[0] == "podman" else words

    def run(self, command: str, *, check: bool = True, timeout: float = 120,
            cwd: Path | None = None, what: str | None = None
            ) -> subprocess.CompletedProcess[str]:
        started = time.monotonic()
        out = subprocess.run(self.argv(command), env=self.env, cwd=cwd, capture_output=True,
                             text=True, timeout=timeout)
        if what:
            self.timings[what] = time.monotonic() - started
        if check and out.returncode != 0:
            raise AssertionError(f"{command!r} exited {out.returncode}:\n{out.stderr[-3000:]}")
        return out


def base_image(podman: Podman) -> str:
    """localhost/rc-base:<today>, from the cached base tar of today or a fresh one."""
    day = datetime.datetime.now(datetime.UTC).date().isoformat()
    tag = f"localhost/rc-base:{day}"
    if podman.run(f"podman image exists {tag}", check=False).returncode == 0:
        return tag
    CACHE.mkdir(parents=True, exist_ok=True)
    tar = CACHE / f"base-{day}.tar"
    if not tar.exists():
        for old in CACHE.glob("base-*.tar"):  # other days' bases
            old.unlink(missing_ok=True)
        # mmdebstrap picks its output format by the name's ending: keep `.tar`.
        partial = CACHE / f"partial-{os.getpid()}-{tar.name}"
        podman.run(BASE_CMD.format(tar=partial), timeout=600, what="mmdebstrap (cold)")
        partial.rename(tar)
    podman.run(IMPORT_CMD.format(tar=tar, base=tag), timeout=300, what="podman import")
    return tag


def build_context(root: Path) -> Path:
    """The files the Dockerfile's allowlist (.dockerignore) lets through, and a wheelhouse
    made here: the image installs without reaching a package index."""
    context = root / "context"
    context.mkdir()
    for name in ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, context / name)
    for name in ("raftcron", "web"):
        shutil.copytree(REPO / name, context / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return context


def deploy_copy(root: Path, port_base: int) -> tuple[Path, dict[str, str]]:
    """deploy/ as shipped, its node ports moved to free ones; the node URLs."""
    deploy = root / "deploy"
    shutil.copytree(REPO / "deploy", deploy)
    urls = {}
    for i, node in enumerate(NODES):
        urls[node] = f"http://127.0.0.1:{port_base + i}"
    for path in deploy.glob("n*.toml"):
        text = path.read_text()
        for i, node in enumerate(NODES):
            text = text.replace(str(SHIPPED_HTTP[node]), str(port_base + i))
            text = text.replace(str(SHIPPED_RAFT[node]), str(port_base + 100 + i))
        path.write_text(text)
    return deploy, urls


class ContainerCluster:
    def __init__(self, podman: Podman, image: str, deploy: Path, urls: dict[str, str],
                 prefix: str, admin_token: str) -> None:
        self.podman, self.image, self.deploy, self.urls = podman, image, deploy, urls
        self.names = {node: f"{prefix}-{node}" for node in NODES}
        self.worker = f"{prefix}-worker"
        self.http = httpx.Client(timeout=5, headers={"Authorization": f"Bearer {admin_token}"})

    def start_nodes(self) -> None:
        for node, name in self.names.items():
            self.podman.run(NODE_CMD.format(name=name, node=node, deploy=self.deploy,
                                            image=self.image))

    def start_worker(self) -> None:
        servers = ",".join(f"http://{n}:{self.urls[n].rsplit(':', 1)[1]}" for n in NODES)
        self.podman.run(WORKER_CMD.format(name=self.worker, deploy=self.deploy,
                                          image=self.image, servers=servers))

    def view(self, node: str) -> dict | None:
        try:
            return self.http.get(self.urls[node] + "/v1/cluster", timeout=1).json()
        except (httpx.HTTPError, ValueError):
            return None

    def leader(self, among: tuple[str, ...] = NODES) -> str | None:
        for node in among:
            view = self.view(node)
            if view and view.get("role") == "leader" and view.get("leader_duties"):
                return node
        return None

    def wait_leader(self, among: tuple[str, ...] = NODES, timeout: float = 60) -> str:
        return wait_until(lambda: self.leader(among), timeout, interval=0.3,
                          message=f"a leader among {among}")

    def occurrences(self, node: str, job_id: str) -> list[dict]:
        out: list[dict] = []
        query: dict = {"job_id": job_id, "limit": 500}
        while True:
            page = self.http.get(self.urls[node] + "/v1/occurrences", params=query).json()
            out += page["occurrences"]
            if not page["next_cursor"]:
                return out
            query["cursor"] = page["next_cursor"]

    def converged(self) -> bool:
        digests = {(d["last_applied_index"], d["digest"]) for d in
                   (self.http.get(u + "/v1/digest", timeout=2).json()
                    for u in self.urls.values())}
        return len(digests) == 1

    def healthy(self, node: str) -> bool:
        out = self.podman.run(HEALTH_CMD.format(name=self.names[node]), check=False)
        return out.returncode == 0

    def logs(self) -> str:
        parts = []
        for name in [*self.names.values(), self.worker]:
            out = self.podman.run(f"podman logs --tail 40 {name}", check=False)
            parts.append(f"--- {name}\n{out.stdout[-4000:]}{out.stderr[-4000:]}")
        return "\n".join(parts)

    def remove(self) -> None:
        for name in [*self.names.values(), self.worker]:
            self.podman.run(f"podman rm -f -v -t 0 {name}", check=False)  # -v: anonymous /data too
            self.podman.run(f"podman volume rm -f {name}-data", check=False)
        self.http.close()


@pytest.fixture
def podman(tmp_path: Path) -> Podman:
    tools_or_skip()
    return Podman(tmp_path)


@pytest.fixture
def image(podman: Podman, tmp_path: Path) -> Iterator[str]:
    base = base_image(podman)
    context = build_context(tmp_path)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", *WHEELS_CMD.split()], cwd=context, check=True,
                   capture_output=True, timeout=600)
    podman.timings["pip wheel"] = time.monotonic() - started
    assert (context / "dist" / "wheels").is_dir()
    tag = f"localhost/raftcron-test:{uuid.uuid4().hex[:12]}"
    podman.run(BUILD_CMD.format(base=base, image=tag), cwd=context, timeout=900,
               what="podman build")
    try:
        yield tag
    finally:
        podman.run(f"podman rmi -f {tag}", check=False)


def healthcheck_test(podman: Podman, image: str) -> list[str]:
    out = podman.run(f"podman image inspect --format '{{{{json .Config.Healthcheck}}}}' "
                     f"{image}")
    check = json.loads(out.stdout)
    assert check and check["Test"][0] == "CMD", f"the image has no HEALTHCHECK: {out.stdout}"
    return check["Test"][1:]


@pytest.mark.system
@pytest.mark.timeout(600)
def test_three_node_containers_and_a_worker_survive_the_leader_container_killed(
        podman: Podman, image: str, tmp_path: Path) -> None:
    started = time.monotonic()
    deploy, urls = deploy_copy(tmp_path, free_port_base(len(NODES)))
    init = podman.run(INIT_CMD.format(deploy=deploy, image=image))
    tokens = dict(line.split(" ", 1) for line in init.stdout.splitlines())
    assert sorted(tokens) == ["admin", "worker"], init.stdout
    for name in ("cluster.secret", "tokens.json", "worker.token"):
        st = (deploy / name).stat()
        assert (st.st_uid, st.st_mode & 0o777) == (10001, 0o600), name
    check = healthcheck_test(podman, image)
    prefix = f"rc{uuid.uuid4().hex[:8]}"
    c = ContainerCluster(podman, image, deploy, urls, prefix, tokens["admin"])
    try:
        run_the_cluster(c, check)
    except BaseException:
        print(c.logs())
        raise
    finally:
        c.remove()
        podman.timings["whole test"] = time.monotonic() - started
        print("timings (s):", {k: round(v, 1) for k, v in podman.timings.items()})


def run_the_cluster(c: ContainerCluster, check: list[str]) -> None:
    c.start_nodes()
    leader = c.wait_leader()
    # The shipped configs refuse a request without a token, and a worker token cannot
    # create jobs.
    job = {"id": "tick", "schedule": {"cron": "* * * * * *"},
           "target": {"shell": 'echo "$RAFTCRON_OCCURRENCE_ID" >> /data/ran.txt'}}
    assert httpx.post(c.urls[leader] + "/v1/jobs", json=job, timeout=5).status_code == 401
    resp = c.http.post(c.urls[leader] + "/v1/jobs", json=job)
    assert resp.status_code == 201, resp.text
    c.start_worker()
    time.sleep(4)

    killed_at = time.time()
    c.podman.run(KILL_CMD.format(name=c.names[leader]))
    survivors = tuple(n for n in NODES if n != leader)
    new_leader = c.wait_leader(survivors, timeout=30)
    # The image's HEALTHCHECK, run against the killed node's config, says "unhealthy".
    down = c.podman.run("podman run --rm --network=host " + HOSTS + " --no-healthcheck -v "
                        f"{c.deploy}/{leader}.toml:/etc/raftcron/node.toml:ro --entrypoint "
                        f"{check[0]} {c.image} " + shlex.join(check[1:]), check=False)
    assert down.returncode != 0, "the HEALTHCHECK passed for a node that is down"
    time.sleep(4)

    c.podman.run(START_CMD.format(name=c.names[leader]))
    wait_until(lambda: c.view(leader), 60, interval=0.5, message=f"{leader} serving again")
    time.sleep(3)
    resp = c.http.post(c.urls[new_leader] + "/v1/jobs/tick/pause")
    assert resp.status_code == 200, resp.text
    paused_at = time.time()
    wait_until(c.converged, 60, interval=0.5, message="equal digests on the three nodes")
    for node in NODES:
        assert wait_until(lambda n=node: c.healthy(n), 60, interval=2,
                          message=f"{node}'s container healthy"), node

    # Every instant from the job's first to its pause is there once, across the kill ...
    occs = c.occurrences(leader, "tick")  # as the node that came back sees them
    instants = assert_every_second_once(occs)
    assert instants[0] < killed_at - 2 and instants[-1] > killed_at + 6
    assert len({o["epoch"] for o in occs}) >= 2, "no failover happened"
    # ... and each one settled ran exactly once in the worker container.
    def settled() -> list[dict] | None:
        now = [o for o in c.occurrences(leader, "tick") if ts(o["scheduled_for"]) < paused_at]
        return now if all(o["status"] == "succeeded" for o in now) else None

    done = wait_until(settled, 60, interval=1, message="every occurrence succeeded")
    ran = c.podman.run(f"podman exec {c.worker} cat /data/ran.txt").stdout.split()
    assert len(ran) == len(set(ran)), "an occurrence ran twice"
    assert {o["id"] for o in done} <= set(ran)
