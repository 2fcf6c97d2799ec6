"""Worker credentials: the token file must be private; --run-as needs root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from raftcron.worker.isolation import IsolationError, read_token_file, resolve_run_as


def _token_file(tmp_path: Path, text: str, mode: int) -> Path:
    path = tmp_path / "worker.token"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_reads_one_token_from_a_private_file(tmp_path: Path) -> None:
    assert read_token_file(str(_token_file(tmp_path, "rc_abc\n", 0o600))) == "rc_abc"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_refuses_a_token_file_others_can_reach(tmp_path: Path, mode: int) -> None:
    with pytest.raises(IsolationError, match="chmod 600"):
        read_token_file(str(_token_file(tmp_path, "rc_abc\n", mode)))


@pytest.mark.parametrize("text", ["", "\n", "rc_a rc_b\n", "rc_a\nrc_b\n"])
def test_refuses_a_file_without_exactly_one_token(tmp_path: Path, text: str) -> None:
    with pytest.raises(IsolationError, match="one token"):
        read_token_file(str(_token_file(tmp_path, text, 0o600)))


def test_refuses_a_missing_file_and_a_symlink(tmp_path: Path) -> None:
    with pytest.raises(IsolationError, match="cannot open"):
        read_token_file(str(tmp_path / "nope"))
    real = _token_file(tmp_path, "rc_abc\n", 0o600)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(IsolationError):
        read_token_file(str(link))


def test_run_as_needs_root_and_a_real_non_root_user() -> None:
    with pytest.raises(IsolationError, match="needs the worker to run as root"):
        resolve_run_as("nobody", euid=1000)
    with pytest.raises(IsolationError, match="no such user"):
        resolve_run_as("no-such-user-here", euid=0)
    with pytest.raises(IsolationError, match="other than root"):
        resolve_run_as("root", euid=0)
    nobody = resolve_run_as("nobody", euid=0)
    assert nobody.uid != 0 and nobody.env()["USER"] == "nobody"
    assert nobody.gid in nobody.groups


def _worker(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAFTCRON_TOKEN"}
    return subprocess.run([sys.executable, "-m", "raftcron", "worker", "--server",
                           "http://127.0.0.1:9", *args], capture_output=True, text=True,
                          timeout=60, env=env)


def test_the_cli_exits_2_with_one_line_for_a_readable_token_file(tmp_path: Path) -> None:
    out = _worker("--token-file", str(_token_file(tmp_path, "rc_abc\n", 0o644)))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "chmod 600" in out.stderr


def test_the_cli_refuses_run_as_when_not_root(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from raftcron.cli.main import main

    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # this suite may run as root
    code = main(["worker", "--server", "http://127.0.0.1:9", "--run-as", "nobody"])
    err = capsys.readouterr().err
    assert code == 2 and err == "raftcron: --run-as needs the worker to run as root\n"
