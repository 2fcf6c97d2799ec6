"""Isolation checks made at apply time: idempotency records bound to the request, and
worker calls bound to the queues their token may lease (issue 17)."""

import json

import pytest

from raftcron.core import commands as c
from raftcron.state.machine import REQUEST_HASH_KEY
from tests.integration.test_machine import MIN, T0, Node, att, lease_one, spec


@pytest.fixture
def led(tmp_path):
    n = Node(tmp_path / "a.db")
    assert n.begin(1)["ok"]
    return n


# --- idempotency records ----------------------------------------------------------------

def test_same_request_id_and_hash_replays_the_stored_result(led):
    first = led.apply(c.PutJob("k", T0, spec("j"), True, request_hash="h1"))
    again = led.apply(c.PutJob("k", T0 + 5, spec("j"), True, request_hash="h1"))
    assert again == {**first, "replayed_request": True}
    assert REQUEST_HASH_KEY not in again


def test_same_request_id_with_another_hash_is_refused_and_changes_nothing(led):
    led.apply(c.PutJob("k", T0, spec("j"), True, request_hash="h1"))
    before = led.digest()
    r = led.apply(c.PutJob("k", T0 + 5, spec("j", max_attempts=9), True, request_hash="h2"))
    assert r["ok"] is False and r["rejected"] == "idempotency_key_reused"
    assert r["field"] == "Idempotency-Key"
    assert led.digest() == before


def test_the_hash_is_stored_with_the_result(led):
    led.apply(c.PauseJob("p", T0, "nope", request_hash="h9"))
    (stored,) = led.one("SELECT result FROM requests WHERE request_id = 'p'")
    assert json.loads(stored)[REQUEST_HASH_KEY] == "h9"


def test_records_and_entries_without_a_hash_replay_as_before(led):
    """A record written before hashes existed, and a command decoded from an old entry
    (no request_hash), both replay: old state keeps working."""
    legacy = led.apply(c.PutJob("old", T0, spec("j"), True))
    (stored,) = led.one("SELECT result FROM requests WHERE request_id = 'old'")
    assert REQUEST_HASH_KEY not in json.loads(stored)
    assert led.apply(c.PutJob("old", T0, spec("j"), True, request_hash="new")) == {
        **legacy, "replayed_request": True}
    hashed = led.apply(c.PutJob("new", T0, spec("j2"), True, request_hash="h"))
    old_entry = c.decode(json.dumps({"v": 1, "t": "put_job", "a": {
        "request_id": "new", "now_ms": T0, "job": spec("j2"), "create": True}}).encode())
    assert led.apply(old_entry) == {**hashed, "replayed_request": True}


# --- worker calls and queues ------------------------------------------------------------

def _leased_on_qb(led):
    led.create("j", queue="qb", heartbeat_timeout_s=10)
    led.fire("j", T0 + MIN)
    return att("j", T0 + MIN), lease_one(led, "j", T0 + MIN)


@pytest.mark.parametrize("call", ["heartbeat", "complete", "release"])
def test_a_worker_limited_to_other_queues_is_refused_before_the_token_is_looked_at(led, call):
    a, tok = _leased_on_qb(led)
    before = led.digest()
    for token in (tok, tok + 1):  # right or wrong token: the same answer, no oracle
        if call == "heartbeat":
            cmd = c.Heartbeat(T0 + MIN + 1, "w1", [[a, token]], ["qa"])
            r = led.apply(cmd)["results"][0]
        elif call == "complete":
            cmd = c.Complete(T0 + MIN + 1, "w1", [[a, token, "succeeded", 0, "x"]], ["qa"])
            r = led.apply(cmd)["results"][0]
        else:
            r = led.apply(c.Release(T0 + MIN + 1, "w1", [[a, token]], ["qa"]))["results"][0]
        assert r["ok"] is False and r["rejected"] == "forbidden", r
    assert led.digest() == before
    assert led.attempt(a)["status"] == "running"


def test_a_worker_allowed_the_queue_or_any_queue_acts_as_before(led):
    a, tok = _leased_on_qb(led)
    r = led.apply(c.Heartbeat(T0 + MIN + 1, "w1", [[a, tok]], ["qa", "qb"]))
    assert r["results"][0]["ok"] is True
    r = led.apply(c.Complete(T0 + MIN + 2, "w1", [[a, tok, "succeeded", 0, ""]], None))
    assert r["results"][0]["ok"] is True
    assert led.attempt(a)["status"] == "succeeded"


def test_worker_entries_written_before_the_queue_check_decode_and_apply_as_before(led):
    a, tok = _leased_on_qb(led)
    old = c.decode(json.dumps({"v": 1, "t": "heartbeat", "a": {
        "now_ms": T0 + MIN + 1, "worker_id": "w1", "attempts": [[a, tok]]}}).encode())
    assert old.queues is None
    assert led.apply(old)["results"][0]["ok"] is True
