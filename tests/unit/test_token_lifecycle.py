"""Token lifecycle: expiry, revocation, listing without secrets, last-used times."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from raftcron.auth import (
    AuthError,
    TokenStore,
    create_token,
    list_tokens,
    parse_expires_in,
    read_usage,
    revoke_token,
)


def bearer(token: str) -> str:
    return f"Bearer {token}"


def test_an_expired_token_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "tokens.json")
    t0 = 1_800_000_000
    token = create_token(path, ["read"], "short", expires_in_s=60, now=t0)
    store = TokenStore(path)
    assert store.authenticate(bearer(token), now=t0 + 59) is not None
    assert store.authenticate(bearer(token), now=t0 + 60) is None
    forever = create_token(path, ["read"], "forever", now=t0)
    assert TokenStore(path).authenticate(bearer(forever), now=t0 + 10**9) is not None


def test_revoke_removes_the_named_tokens_and_the_store_sees_it(tmp_path: Path) -> None:
    path = str(tmp_path / "tokens.json")
    keep = create_token(path, ["read"], "keep")
    gone = create_token(path, ["admin"], "gone")
    store = TokenStore(path)
    assert store.authenticate(bearer(gone)) is not None
    time.sleep(0.01)  # a new mtime
    assert revoke_token(path, "gone") == 1
    assert store.authenticate(bearer(gone)) is None
    assert store.authenticate(bearer(keep)) is not None
    with pytest.raises(AuthError, match="no token named"):
        revoke_token(path, "gone")


def test_default_names_stay_unique_after_a_revoke(tmp_path: Path) -> None:
    path = str(tmp_path / "tokens.json")
    create_token(path, ["read"])
    create_token(path, ["read"])
    revoke_token(path, "token-1")
    create_token(path, ["read"])
    names = [t["name"] for t in list_tokens(path)]
    assert len(set(names)) == len(names) == 2


def test_list_shows_no_token_and_no_hash(tmp_path: Path) -> None:
    path = str(tmp_path / "tokens.json")
    token = create_token(path, ["tenant:a"], "a", expires_in_s=86_400, now=1_800_000_000)
    stored = json.loads(Path(path).read_text())["tokens"][0]["hash"]
    rows = list_tokens(path, {stored: 1_800_000_100})
    assert rows == [{"name": "a", "scopes": ["tenant:a"], "created_at": 1_800_000_000,
                     "last_used_at": 1_800_000_100, "expires_at": 1_800_086_400}]
    text = json.dumps(rows)
    assert token not in text and stored not in text


def test_last_used_is_written_to_the_usage_file(tmp_path: Path) -> None:
    path = str(tmp_path / "tokens.json")
    usage = str(tmp_path / "token-usage.json")
    token = create_token(path, ["read"], "r")
    store = TokenStore(path, usage)
    store.authenticate(bearer(token), now=1_800_000_000)
    assert list(read_usage(usage).values()) == [1_800_000_000]
    store.authenticate(bearer(token), now=1_800_000_005)  # within the flush interval
    assert list(read_usage(usage).values()) == [1_800_000_000]
    store.flush_usage()
    assert list(read_usage(usage).values()) == [1_800_000_005]
    assert list(TokenStore(path, usage).last_used.values()) == [1_800_000_005]  # reloaded


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("30m", 1800), ("12h", 43_200),
                                          ("30d", 2_592_000), ("2w", 1_209_600)])
def test_expires_in(text: str, seconds: int) -> None:
    assert parse_expires_in(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "0d", "-1d", "1y", "30 d", "99999w"])
def test_bad_expires_in(text: str) -> None:
    with pytest.raises(AuthError, match="expires-in"):
        parse_expires_in(text)
