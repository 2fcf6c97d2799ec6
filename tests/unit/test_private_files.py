"""Every file raftcron writes under a data directory, every backup and every secret is
mode 0600 and every directory it makes 0700, from the moment it exists and whatever the
umask of the process (issue 40 §5). Each writer runs here under umask 022, the common
default that made the files 0644 before."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftcron.auth import TokenStore, create_token
from raftcron.cli.deploy_init import init_deploy
from raftcron.ops import backup
from raftcron.ops.local import _spawn, local_tokens, write_cluster_configs
from raftcron.private_files import (
    create_private_empty,
    make_private_dirs,
    open_private,
    tighten,
    write_private,
)
from raftcron.state import db


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def modes_under(root: Path) -> dict[str, int]:
    """Every directory and file under `root` (itself included), by relative path."""
    out = {".": mode(root)}
    for top, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = os.path.join(top, name)
            out[os.path.relpath(path, root)] = mode(path)
    return out


def assert_private(root: Path) -> dict[str, int]:
    found = modes_under(root)
    loose = {p: oct(m) for p, m in found.items()
             if m != (0o700 if os.path.isdir(root / p) else 0o600)}
    assert not loose, f"not private under {root}: {loose}"
    return found


def state_db(path: Path) -> Path:
    """A state database as a node leaves it (WAL mode, the schema applied)."""
    db.open_writer(str(path)).close()
    return path


# --- the helpers -------------------------------------------------------------------------

def test_make_private_dirs_gives_0700_to_every_directory_it_creates(tmp_path: Path) -> None:
    make_private_dirs(tmp_path / "a" / "b" / "c")
    assert mode(tmp_path / "a") == mode(tmp_path / "a" / "b") == 0o700
    assert mode(tmp_path / "a" / "b" / "c") == 0o700
    os.chmod(tmp_path / "a", 0o755)
    make_private_dirs(tmp_path / "a" / "b" / "c")
    assert mode(tmp_path / "a") == 0o755  # only the leaf is ours to tighten


def test_make_private_dirs_tightens_an_existing_leaf_and_refuses_a_file(tmp_path: Path
                                                                        ) -> None:
    leaf = tmp_path / "data"
    leaf.mkdir(mode=0o755)
    os.chmod(leaf, 0o755)
    make_private_dirs(leaf)
    assert mode(leaf) == 0o700
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError):
        make_private_dirs(tmp_path / "file" / "sub")


def test_open_private_creates_0600_and_tightens_an_older_file(tmp_path: Path) -> None:
    new = tmp_path / "new"
    os.close(open_private(new, os.O_WRONLY))
    assert mode(new) == 0o600
    old = tmp_path / "old"
    old.write_text("from an older build")
    os.chmod(old, 0o644)
    write_private(old, "now")
    assert mode(old) == 0o600 and old.read_text() == "now"
    with pytest.raises(FileExistsError):
        write_private(old, "again", exclusive=True)
    with pytest.raises(FileExistsError):
        create_private_empty(old)


def test_exclusive_refuses_a_planted_symlink(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    link = tmp_path / "cluster.secret"
    link.symlink_to(target)
    with pytest.raises(FileExistsError):
        write_private(link, "secret", exclusive=True)
    assert not target.exists()


def test_tighten_keeps_the_owner_bits_and_skips_what_is_missing(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    os.chmod(script, 0o755)
    tighten(script)
    assert mode(script) == 0o700
    tighten(tmp_path / "absent")


# --- backup and restore ------------------------------------------------------------------

def test_a_backup_is_0600(tmp_path: Path) -> None:
    src = state_db(tmp_path / "state.db")
    os.chmod(src, 0o644)  # the source's mode is not what the copy gets
    out = tmp_path / "backup.db"
    backup.write_backup(str(src), str(out))
    assert mode(out) == 0o600
    # Replacing an earlier (loose) file gives a private one too.
    os.chmod(out, 0o644)
    backup.write_backup(str(src), str(out))
    assert mode(out) == 0o600
    assert backup.inspect(str(out)).last_applied_index == 0


def test_restore_makes_private_directories_and_files(tmp_path: Path) -> None:
    src = state_db(tmp_path / "state.db")
    out = tmp_path / "backup.db"
    backup.write_backup(str(src), str(out))
    target = tmp_path / "new" / "cluster" / "n1"
    backup.restore(str(out), str(target))
    found = assert_private(tmp_path / "new")
    assert {"cluster", "cluster/n1", "cluster/n1/state.db",
            "cluster/n1/raft.journal.meta"} <= set(found)


def test_restore_into_an_existing_loose_directory_tightens_it(tmp_path: Path) -> None:
    src = state_db(tmp_path / "state.db")
    out = tmp_path / "backup.db"
    backup.write_backup(str(src), str(out))
    target = tmp_path / "n1"
    target.mkdir()
    os.chmod(target, 0o755)
    (target / "state.db").write_text("old")
    os.chmod(target / "state.db", 0o644)
    backup.restore(str(out), str(target), force=True)
    assert_private(target)


# --- raftcron up ---------------------------------------------------------------------------

def test_up_writes_its_secret_tokens_and_configs_private(tmp_path: Path) -> None:
    root = tmp_path / "up" / "cluster"
    write_cluster_configs(root, 3, 26100)
    found = assert_private(tmp_path / "up")
    assert {"cluster/cluster.secret", "cluster/tokens.json", "cluster/admin.token",
            "cluster/worker.token", "cluster/n1.toml", "cluster/n3.toml"} <= set(found)
    # A second run (configs rewritten, tokens reused) keeps them private.
    write_cluster_configs(root, 3, 26100)
    local_tokens(root)
    assert_private(tmp_path / "up")


def test_up_tightens_what_an_earlier_build_left_readable(tmp_path: Path) -> None:
    root = tmp_path / "cluster"
    write_cluster_configs(root, 3, 26100)
    # As an earlier build left them: 0755 directories and 0644 files.
    os.chmod(root, 0o755)
    (root / "n1").mkdir(mode=0o755)
    os.chmod(root / "n1", 0o755)
    for name in ("n1/state.db", "n1/raft.journal", "n1.log", "worker1.log"):
        (root / name).write_text("x")
        os.chmod(root / name, 0o644)
    for name in ("cluster.secret", "n2.toml", "tokens.json"):
        os.chmod(root / name, 0o644)
    mine = root / "notes.txt"  # not raftcron's: left as it is
    mine.write_text("the user's own")
    os.chmod(mine, 0o644)
    write_cluster_configs(root, 3, 26100)
    assert mode(mine) == 0o644
    mine.unlink()
    assert_private(root)


def test_up_logs_are_private(tmp_path: Path) -> None:
    log = tmp_path / "n1.log"
    proc = _spawn(["--help"], log)
    assert proc.wait(60) == 0
    assert mode(log) == 0o600 and log.stat().st_size > 0
    os.chmod(log, 0o644)  # a log of an earlier build
    assert _spawn(["--help"], log).wait(60) == 0
    assert mode(log) == 0o600


# --- secrets and tokens --------------------------------------------------------------------

def test_deploy_init_files_are_0600(tmp_path: Path) -> None:
    init_deploy(str(tmp_path))
    assert {p: m for p, m in modes_under(tmp_path).items() if p != "."} == {
        "cluster.secret": 0o600, "tokens.json": 0o600, "worker.token": 0o600}


def test_token_files_are_0600(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    token = create_token(str(tokens), ["admin"], "a")
    assert mode(tokens) == 0o600
    usage = tmp_path / "token-usage.json"
    store = TokenStore(str(tokens), usage_file=str(usage))
    assert store.authenticate(f"Bearer {token}") is not None
    store.flush_usage()
    assert mode(usage) == 0o600
    assert {p for p in modes_under(tmp_path) if p != "."} == {"tokens.json",
                                                            "token-usage.json"}
