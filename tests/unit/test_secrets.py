"""Redaction of target secrets (core.secrets) and secret references on the worker
(worker.secrets, executors.execute)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx
import pytest

from raftcron.core.errors import ValidationError
from raftcron.core.model import parse_job
from raftcron.core.secrets import holds_redacted, redact_target, redact_url, restore_redacted
from raftcron.worker.executors import execute
from raftcron.worker.secrets import SecretsError, SecretsFile, resolve_target
from tests.unit.test_worker_executors import make_lease

URL = "https://bot:hunter22@api.example.com/v1/charge?x=1"
STORED = {"http": {"url": URL, "method": "POST", "body": None,
                   "headers": {"Authorization": "Bearer tok-123", "X-Key": {"secret": "k"}}}}


# --- what non-admins see ---------------------------------------------------------------

def test_header_values_and_url_credentials_are_redacted_references_are_kept():
    shown = redact_target(STORED)
    assert shown["http"]["url"] == "https://***@api.example.com/v1/charge?x=1"
    assert shown["http"]["headers"] == {"Authorization": "***", "X-Key": {"secret": "k"}}
    assert STORED["http"]["headers"]["Authorization"] == "Bearer tok-123"  # a copy
    assert "hunter22" not in json.dumps(shown) and "tok-123" not in json.dumps(shown)


def test_targets_without_secrets_are_shown_as_they_are():
    assert redact_target({"shell": "echo hi"}) == {"shell": "echo hi"}
    assert redact_url("https://example.com/a@b") == "https://example.com/a@b"


# --- "***" sent back -------------------------------------------------------------------

def test_redacted_values_sent_back_keep_the_stored_ones_for_the_same_url():
    sent = redact_target(STORED)
    sent["http"]["method"] = "PUT"
    sent["http"]["headers"]["X-New"] = "plain"
    assert holds_redacted(sent)
    kept = restore_redacted(sent, STORED)
    assert kept["http"]["url"] == URL
    assert kept["http"]["headers"] == {"Authorization": "Bearer tok-123",
                                       "X-Key": {"secret": "k"}, "X-New": "plain"}
    assert kept["http"]["method"] == "PUT"


@pytest.mark.parametrize("change, field", [
    ({"url": "https://attacker.example/collect"}, "target.http.headers.Authorization"),
    ({"url": "https://***@attacker.example/"}, "target.http.url"),
    ({"headers": {"X-Other": "***"}}, "target.http.headers.X-Other"),
])
def test_a_placeholder_that_would_send_the_secret_elsewhere_is_refused(change, field):
    sent = redact_target(STORED)
    sent["http"].update(change)
    with pytest.raises(ValidationError) as e:
        restore_redacted(sent, STORED)
    assert e.value.field == field


def test_a_placeholder_without_a_stored_job_is_refused():
    with pytest.raises(ValidationError) as e:
        restore_redacted(redact_target(STORED), None)
    assert e.value.field == "target.http.url"


# --- the model accepts references --------------------------------------------------------

def test_a_job_may_name_secrets_for_header_values_and_body():
    job = parse_job({"id": "j", "schedule": "* * * * *", "target": {"http": {
        "url": "https://x.example", "headers": {"A": {"secret": "api"}},
        "body": {"secret": "payload"}}}})
    assert job.target["http"]["headers"] == {"A": {"secret": "api"}}
    for bad in ({"secret": ""}, {"secret": "a", "x": 1}, {"name": "a"}, 5):
        with pytest.raises(ValidationError) as e:
            parse_job({"id": "j", "schedule": "* * * * *", "target": {"http": {
                "url": "https://x.example", "headers": {"A": bad}}}})
        assert e.value.field == "target.http.headers"


# --- the worker's secrets file ------------------------------------------------------------

def _secrets(tmp_path: Path, data: object, mode: int = 0o600) -> str:
    path = tmp_path / "secrets.json"
    path.write_text(json.dumps(data))
    os.chmod(path, mode)
    return str(path)


def test_a_secrets_file_readable_by_others_or_malformed_is_refused(tmp_path):
    with pytest.raises(SecretsError, match="chmod 600"):
        SecretsFile(_secrets(tmp_path, {"t/a": "v"}, 0o644))
    with pytest.raises(SecretsError, match="JSON object"):
        SecretsFile(_secrets(tmp_path, {"t/a": 5}))
    with pytest.raises(SecretsError, match="cannot read"):
        SecretsFile(str(tmp_path / "missing.json"))


def test_references_resolve_within_the_jobs_tenant_only(tmp_path):
    secrets = SecretsFile(_secrets(tmp_path, {"billing/api": "Bearer b-secret-1"}))
    target = {"http": {"url": "https://x.example", "headers": {"Authorization": {"secret": "api"}}}}
    resolved, hidden = resolve_target(target, "billing", secrets)
    assert resolved["http"]["headers"]["Authorization"] == "Bearer b-secret-1"
    assert "b-secret-1" in hidden
    with pytest.raises(SecretsError, match="unknown secret 'api'"):
        resolve_target(target, "shop", secrets)
    with pytest.raises(SecretsError, match="no --secrets-file"):
        resolve_target(target, "billing", None)


def test_an_added_secret_is_found_without_a_restart(tmp_path):
    path = _secrets(tmp_path, {})
    secrets = SecretsFile(path)
    with pytest.raises(SecretsError):
        secrets.lookup("t", "a")
    _secrets(tmp_path, {"t/a": "value-a"})
    assert secrets.lookup("t", "a") == "value-a"


def test_execute_sends_the_resolved_secret_and_scrubs_it_from_the_output(tmp_path):
    secrets = SecretsFile(_secrets(tmp_path, {"billing/api": "Bearer b-secret-1"}))
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        return httpx.Response(200, text=f"you sent {request.headers['authorization']}")

    lease = make_lease({"http": {"url": "https://x.example", "method": "POST",
                                 "headers": {"Authorization": {"secret": "api"}}}},
                       tenant="billing")
    result = asyncio.run(execute(lease, secrets=secrets,
                                 http_transport=httpx.MockTransport(handler)))
    assert seen == ["Bearer b-secret-1"]
    assert result.outcome == "succeeded" and "b-secret-1" not in result.output
    assert result.output == "you sent ***"


def test_execute_fails_an_unknown_secret_without_sending_anything(tmp_path):
    secrets = SecretsFile(_secrets(tmp_path, {}))
    sent: list[httpx.Request] = []
    lease = make_lease({"http": {"url": "https://x.example",
                                 "headers": {"A": {"secret": "missing"}}}}, tenant="t")
    result = asyncio.run(execute(lease, secrets=secrets, http_transport=httpx.MockTransport(
        lambda r: sent.append(r) or httpx.Response(200))))
    assert sent == []
    assert result.outcome == "failed" and result.exit_code is None
    assert "unknown secret 'missing'" in result.output
