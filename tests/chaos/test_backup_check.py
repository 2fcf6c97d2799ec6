"""The backup -> restore step of the chaos run on a real SQLite state file: a restored copy
digests like its source, and a copy that differs is told apart."""

from __future__ import annotations

import os
from pathlib import Path

from chaos.backup_check import backup_digests, restored_digest
from raftcron.cluster.membership import Member, apply_op, encode_remove
from raftcron.ops.backup import write_backup
from raftcron.state.db import open_writer
from raftcron.state.digest import digest


def source_db(path: Path) -> str:
    conn = open_writer(str(path))
    conn.execute("INSERT INTO tenants (name, max_jobs, updated_ms) VALUES ('t2', 10, 5)")
    value = digest(conn)
    conn.close()
    return value


def test_a_restored_backup_has_the_digest_of_its_source(tmp_path: Path) -> None:
    want = source_db(tmp_path / "state.db")
    write_backup(str(tmp_path / "state.db"), str(tmp_path / "backup.db"))
    got = restored_digest(tmp_path / "backup.db", tmp_path / "restored", dict(os.environ))
    assert got == want


def test_a_backup_of_another_state_digests_differently(tmp_path: Path) -> None:
    want = source_db(tmp_path / "state.db")
    conn = open_writer(str(tmp_path / "state.db"))
    conn.execute("UPDATE tenants SET max_jobs = 11")
    conn.close()
    write_backup(str(tmp_path / "state.db"), str(tmp_path / "backup.db"))
    assert restored_digest(tmp_path / "backup.db", tmp_path / "restored",
                           dict(os.environ)) != want


def test_the_restored_digest_is_the_backups_without_the_member_records(tmp_path: Path) -> None:
    """A cluster that changed its membership has member records; a restore drops them (a
    restored backup starts a new cluster). Compared with the source's whole digest, every
    backup after a membership change looked like a mismatch (chaos seed 101)."""
    conn = open_writer(str(tmp_path / "state.db"))
    conn.execute("INSERT INTO tenants (name, max_jobs, updated_ms) VALUES ('t2', 10, 5)")
    apply_op(conn, 7, encode_remove(Member("n1", "10.77.0.11:7000", "http://10.77.0.11:8700")))
    whole = digest(conn)
    conn.close()
    write_backup(str(tmp_path / "state.db"), str(tmp_path / "backup.db"))
    restored = restored_digest(tmp_path / "backup.db", tmp_path / "restored", dict(os.environ))
    assert restored != whole
    full, without_members = backup_digests(tmp_path / "backup.db", tmp_path)
    assert (full, without_members) == (whole, restored)
    assert not [p.name for p in tmp_path.iterdir() if "digested" in p.name]
