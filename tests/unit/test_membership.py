"""Member records: new requests are checked in full; a logged entry is applied by the
rules it was first applied with, so replay gives the same result on every version."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from raftcron.cluster import membership
from raftcron.state.db import open_writer

LOGGED_WITH_NEWLINE = membership.MEMBER_PREFIX + (
    b'{"op":"put","id":"n4\\n","raft_addr":"127.0.0.1:7004",'
    b'"http_url":"http://127.0.0.1:8004"}')


@pytest.mark.parametrize("member_id, addr, url, field", [
    ("n4\n", "127.0.0.1:7004", "http://127.0.0.1:8004", "id"),
    ("n4", "127.0.0.1:7004\n", "http://127.0.0.1:8004", "raft_addr"),
    ("n4", "127.0.0.1:7004", "http://127.0.0.1:8004\n", "http_url"),
])
def test_a_new_request_with_a_trailing_newline_is_refused(member_id: str, addr: str, url: str,
                                                           field: str) -> None:
    with pytest.raises(membership.MembershipError) as e:
        membership.validate(member_id, addr, url)
    assert e.value.field == field


def test_a_logged_entry_keeps_the_result_it_was_first_applied_with(tmp_path: Path) -> None:
    conn: sqlite3.Connection = open_writer(str(tmp_path / "state.db"))
    result = membership.apply_op(conn, 1, LOGGED_WITH_NEWLINE)
    assert result == {"ok": True, "op": "put", "id": "n4\n"}
    assert [m.id for m in membership.read_members(conn)] == ["n4\n"]
