"""Tokens are stored hashed; scopes decide what a bearer may do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raftcron.auth import AuthError, TokenStore, create_token, validate_scopes


def test_created_token_authenticates_and_only_its_hash_is_stored(tmp_path: Path) -> None:
    path = str(tmp_path / "tokens.json")
    token = create_token(path, ["admin"], name="ops")
    raw = Path(path).read_text()
    assert token not in raw and "sha256:" in raw
    assert oct(Path(path).stat().st_mode & 0o777) == "0o600"
    store = TokenStore(path)
    who = store.authenticate(f"Bearer {token}")
    assert who is not None and who.admin and who.name == "ops"
    assert store.authenticate(f"Bearer {token}x") is None
    assert store.authenticate(token) is None  # not a bearer header
    assert store.authenticate(None) is None


def test_new_tokens_are_seen_without_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "tokens.json")
    create_token(path, ["read"])
    store = TokenStore(path)
    later = create_token(path, ["tenant:acme"])
    who = store.authenticate(f"Bearer {later}")
    assert who is not None and who.tenants == {"acme"}
    assert who.can_write_tenant("acme") and not who.can_write_tenant("other")
    assert who.can_read() and not who.admin and not who.can_work()


def test_worker_scopes_limit_queues(tmp_path: Path) -> None:
    path = str(tmp_path / "tokens.json")
    any_q = TokenStore(path)
    tok = create_token(path, ["worker"])
    limited = create_token(path, ["worker:billing,reports"])
    assert any_q.authenticate(f"Bearer {tok}").allowed_queues(["x"])
    w = any_q.authenticate(f"Bearer {limited}")
    assert w.can_work() and w.allowed_queues(["billing"])
    assert not w.allowed_queues(["billing", "default"])
    assert not w.can_read() and not w.can_write_tenant("default")


@pytest.mark.parametrize("scope", ["root", "tenant:", "worker:", "tenant:a b", "",
                                   "admin\n", "tenant:acme\n"])
def test_bad_scopes_are_refused(scope: str) -> None:
    with pytest.raises(AuthError):
        validate_scopes([scope])


def test_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"nope": 1}))
    with pytest.raises(AuthError, match="no 'tokens' list"):
        TokenStore(str(path))
