"""The shipped systemd units pass `systemd-analyze verify` without a single warning.

`verify` also checks that ExecStart's program exists: the units name the install path of
the README (/opt/raftcron/.venv), so the check runs in a private mount namespace whose
/opt holds that path, pointing at this checkout's `raftcron`. Skipped only outside CI when
systemd-analyze or unshare is absent; with $CI set that is a failure.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNITS = sorted(DEPLOY.glob("*.service"))
INSTALLED = "/opt/raftcron/.venv/bin/raftcron"

pytestmark = pytest.mark.system


def tools_or_skip() -> None:
    missing = [t for t in ("systemd-analyze", "unshare") if shutil.which(t) is None]
    if not missing:
        return
    message = f"{', '.join(missing)} not installed (apt-get install -y systemd util-linux)"
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and {message}")
    pytest.skip(message)


def problems(unit: Path) -> str:
    """What `systemd-analyze verify unit` says (with the README's install path in place),
    with its exit code when it fails; "" for a clean unit."""
    raftcron = Path(sys.executable).with_name("raftcron")
    assert raftcron.exists(), raftcron
    script = (f"mount -t tmpfs raftcron-opt /opt && mkdir -p {Path(INSTALLED).parent} && "
              f"ln -s {raftcron} {INSTALLED} && exec systemd-analyze verify \"$1\"")
    userns = [] if os.geteuid() == 0 else ["--map-root-user"]
    out = subprocess.run(["unshare", "--mount", *userns, "sh", "-c", script, "verify",
                          str(unit)], capture_output=True, text=True, timeout=60)
    said = (out.stdout + out.stderr).strip()
    return said if out.returncode == 0 else f"exit {out.returncode}: {said}"


def test_the_units_are_shipped() -> None:
    assert [u.name for u in UNITS] == ["raftcron-node.service", "raftcron-worker.service"]
    for unit in UNITS:
        assert f"ExecStart={INSTALLED} " in unit.read_text(), unit.name


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_systemd_analyze_verifies_the_unit_without_a_warning(unit: Path) -> None:
    tools_or_skip()
    assert problems(unit) == ""


@pytest.mark.parametrize("mistake, expected", [
    ("NoNewPrivilege=true\n", "Unknown key"),  # a typo systemd only warns about
    ("ExecStart=/opt/raftcron/.venv/bin/raftcronx node\n", "not executable"),
])
def test_the_check_catches_a_broken_unit(tmp_path: Path, mistake: str, expected: str) -> None:
    tools_or_skip()
    text = (DEPLOY / "raftcron-node.service").read_text()
    broken = tmp_path / "raftcron-node.service"
    lines = [line for line in text.splitlines(keepends=True)
             if not (mistake.startswith("ExecStart=") and line.startswith("ExecStart="))]
    at = lines.index("[Service]\n") + 1
    broken.write_text("".join(lines[:at] + [mistake] + lines[at:]))
    assert expected in problems(broken)


def unit_settings(unit: Path) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith(("#", "[")):
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_the_node_unit_keeps_its_state_where_its_sandbox_lets_it_write() -> None:
    """ProtectSystem=strict makes everything read-only but the state directory: the data
    dir the node ends up with (a shipped config as /etc/raftcron/node.toml, the unit's
    flags on top) must be in it."""
    from raftcron.cli.main import build_parser
    from raftcron.config import load_config

    settings = unit_settings(DEPLOY / "raftcron-node.service")
    assert settings["ProtectSystem"] == ["strict"]
    program, *argv = shlex.split(settings["ExecStart"][0])
    args = build_parser().parse_args(argv)
    assert args.command == "node" and args.config == "/etc/raftcron/node.toml"
    writable = [f"/var/lib/{d}" for v in settings.get("StateDirectory", []) for d in v.split()]
    writable += [p for v in settings.get("ReadWritePaths", []) for p in v.split()]
    for shipped in sorted(DEPLOY.glob("n*.toml")):
        config = load_config(str(shipped), {"data_dir": args.data_dir})
        assert any(config.data_dir == w or config.data_dir.startswith(w + "/")
                   for w in writable), f"{shipped.name}: {config.data_dir} not in {writable}"
