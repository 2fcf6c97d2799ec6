"""No module of the `raftcron` package is longer than MAX_LINES lines.

A module past that has grown more than one responsibility; it is split by responsibility
(as core/schedule.py, cli/main.py and api/openapi.py were), not trimmed to fit.
"""

from __future__ import annotations

from pathlib import Path

# The source tree next to these tests, whichever copy of the package is installed.
PACKAGE_DIR = Path(__file__).resolve().parents[2] / "raftcron"
MAX_LINES = 600


def line_count(path: Path) -> int:
    """Lines as `wc -l` counts them, plus a last line without a newline."""
    return len(path.read_bytes().splitlines())


def oversized() -> list[tuple[str, int]]:
    """(path relative to the repository, lines) of every module over MAX_LINES."""
    out = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        count = line_count(path)
        if count > MAX_LINES:
            out.append((str(path.relative_to(PACKAGE_DIR.parent)), count))
    return out


def test_the_walk_sees_the_package() -> None:
    modules = list(PACKAGE_DIR.rglob("*.py"))
    assert PACKAGE_DIR / "core" / "schedule.py" in modules and len(modules) > 50


def test_line_count_counts_a_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("a = 1\nb = 2")
    assert line_count(path) == 2
    path.write_text("a = 1\nb = 2\n")
    assert line_count(path) == 2


def test_no_module_exceeds_the_line_limit() -> None:
    offenders = oversized()
    if offenders:
        message = f"modules over {MAX_LINES} lines:\n" + "\n".join(
            f"  {path}: {count}" for path, count in offenders)
        print(message)
        raise AssertionError(message)
