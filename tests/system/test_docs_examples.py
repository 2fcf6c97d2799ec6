"""The runnable examples of README.md and docs/guide.md, run against a real cluster.

A shell example is runnable when the line `<!-- runnable -->` stands directly above its
```sh fence. In such a block:

- a line starting with `$ ` is a command; a command whose line ends with `\\` goes on to
  the next line, as in a shell;
- the lines after a command, up to the next command, are the output it prints on stdout
  (stderr is not compared). A command followed by no lines is only required to exit 0;
- before comparing, both sides have ISO 8601 instants replaced by `<time>`, durations
  (`0.005s`) by `<duration>`, numbers of ten digits or more (fencing tokens) by `<n>`, and
  runs of blanks by one space (column widths follow the values); a line `...` stands for
  any number of lines.

Each file's blocks run in order, each command in its own `bash` from the repository's
root, against a fresh one-node cluster with a worker named `local-w1` (the name of
`raftcron up`'s worker), with `RAFTCRON_TOKEN` set to the admin token and
`RAFTCRON_SERVER` to the node's URL. A command that must exit 0 and print its output is
run again until it does (up to 30 s): runs appear as their schedule reaches them, so
`job runs` shows them a few seconds after `job add`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from raftcron.testing import wait_until
from tests.system.helpers import serving_cluster

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
FILES = ("README.md", "docs/guide.md")
MARK = "<!-- runnable -->"
RETRY_S = 30.0

INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
DURATION = re.compile(r"\b\d+(?:\.\d+)?s\b")
LONG_NUMBER = re.compile(r"\b\d{10,}\b")


@dataclass
class Command:
    text: str
    line: int
    expected: list[str] = field(default_factory=list)


@dataclass
class Block:
    path: str
    line: int
    commands: list[Command]


def runnable_blocks(path: str) -> list[Block]:
    """The marked blocks of `path` (relative to the repository), parsed."""
    lines = (REPO / path).read_text().split("\n")
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        where = f"{path}:{i + 1}"
        assert i + 1 < len(lines) and lines[i + 1].strip() == "```sh", (
            f"{where}: {MARK} must stand directly above a ```sh fence")
        j, commands = i + 2, []
        current: Command | None = None
        while j < len(lines) and lines[j].strip() != "```":
            text = lines[j]
            if text.startswith("$ "):
                current = Command(text[2:], j + 1)
                while current.text.endswith("\\") and j + 1 < len(lines):
                    j += 1
                    current.text += "\n" + lines[j]
                commands.append(current)
            else:
                assert current is not None, f"{path}:{j + 1}: output before any `$ ` command"
                current.expected.append(text)
            j += 1
        assert j < len(lines), f"{where}: the block is not closed"
        assert commands, f"{where}: a runnable block without a `$ ` command"
        blocks.append(Block(path, i + 1, commands))
    return blocks


def normalise(text: str) -> str:
    text = INSTANT.sub("<time>", text)
    text = DURATION.sub("<duration>", text)
    text = LONG_NUMBER.sub("<n>", text)
    return re.sub(r"\s+", " ", text).strip()


def lines_match(expected: list[str], actual: list[str]) -> bool:
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(lines_match(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and expected[0] == actual[0] and lines_match(expected[1:], actual[1:])


def output_lines(text: str) -> list[str]:
    lines = [normalise(line) for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def shell_env(tmp: Path, token: str, server: str) -> dict[str, str]:
    """The environment of the examples: `raftcron` on PATH runs this checkout with this
    interpreter, talking to the test's cluster as admin."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "raftcron"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m raftcron "$@"\n')
    shim.chmod(0o755)
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": pythonpath, "RAFTCRON_TOKEN": token, "RAFTCRON_SERVER": server}


def run_command(block: Block, command: Command, env: dict[str, str]) -> None:
    where = f"{block.path}:{command.line}"
    expected = [normalise(line) for line in command.expected]
    tries: list[subprocess.CompletedProcess[str]] = []

    def attempt() -> bool:
        out = subprocess.run(["bash", "-c", "set -o pipefail\n" + command.text], cwd=REPO,
                             env=env, capture_output=True, text=True, timeout=60)
        tries.append(out)
        if out.returncode != 0:
            return False
        return not command.expected or lines_match(expected, output_lines(out.stdout))

    try:
        wait_until(attempt, timeout=RETRY_S, interval=0.5, message=where)
    except TimeoutError:
        first, last = tries[0], tries[-1]
        pytest.fail(
            f"{where}: `{command.text}` did not exit 0 with the output shown, in "
            f"{len(tries)} tries over {RETRY_S:.0f} s\n"
            f"--- expected (normalised)\n" + "\n".join(expected)
            + f"\n--- first try: exit {first.returncode}\nstdout:\n{first.stdout}"
            + f"stderr:\n{first.stderr}"
            + f"\n--- last try: exit {last.returncode}\nstdout:\n{last.stdout}"
            + f"stderr:\n{last.stderr}")


def test_the_docs_mark_their_examples() -> None:
    """The README shows a job added, its runs, a run's output and a jobs file applied,
    all runnable; the guide has runnable examples too."""
    readme = "\n".join(c.text for b in runnable_blocks("README.md") for c in b.commands)
    for needle in ("raftcron job add ", "raftcron job runs ", "raftcron run logs ",
                   "raftcron apply -f docs/examples/jobs.toml"):
        assert needle in readme, f"no runnable README example runs `{needle}`"
    assert runnable_blocks("docs/guide.md"), "docs/guide.md has no runnable example"


@pytest.mark.parametrize("path", FILES)
def test_runnable_examples(path: str, tmp_path: Path) -> None:
    blocks = runnable_blocks(path)
    assert blocks, f"{path} has no runnable example"
    (tmp_path / "cluster").mkdir()
    with serving_cluster(tmp_path / "cluster", nodes=1) as c:
        c.start_worker("local-w1", concurrency=8)
        env = shell_env(tmp_path, c.admin_token, ",".join(c.urls.values()))
        for block in blocks:
            for command in block.commands:
                run_command(block, command, env)
