"""Notification channels against real nodes and real servers: a Slack receiver that checks
the incoming-webhook payload, a signed webhook channel, e-mail to an SMTP server with
STARTTLS (aiosmtpd, a self-signed certificate the nodes trust), a dead and a hanging
channel beside them, who may see and change channels, and a muted channel that holds its
messages through its calendar's window and sums them up when the window ends."""

from __future__ import annotations

import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

from raftcron.testing import LocalCluster, self_signed_cert, wait_until
from tests.system.helpers import add_job
from tests.system.test_operability import Receiver, configure

pytestmark = pytest.mark.system

NEVER = "0 0 1 1 *"  # the job runs only when triggered


class Mailbox:
    """An SMTP server on 127.0.0.1 that requires STARTTLS before AUTH and records every
    message with whether it came over TLS and who logged in."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.messages: list[dict[str, Any]] = []
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        box = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                box.messages.append({
                    "from": envelope.mail_from, "to": list(envelope.rcpt_tos),
                    "content": envelope.content.decode("utf-8", "replace"),
                    "tls": session.ssl is not None,
                    "login": session.auth_data if session.authenticated else None})
                return "250 OK"

        def authenticator(server: Any, session: Any, envelope: Any, mechanism: str,
                          auth_data: Any) -> AuthResult:
            ok = (auth_data.login, auth_data.password) == (b"cron", b"s3cret-pw")
            return AuthResult(success=ok, auth_data=auth_data.login.decode() if ok else None)

        self.port = free_port()
        self.controller = Controller(
            Handler(), hostname="127.0.0.1", port=self.port, tls_context=ctx,
            require_starttls=True, auth_require_tls=True, authenticator=authenticator,
            auth_required=True)
        self.controller.start()

    def close(self) -> None:
        self.controller.stop()


class Hanging:
    """A server that accepts connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    certs = Path(tmp_path_factory.mktemp("smtp-certs"))
    cert, key = self_signed_cert(certs)
    out = {"slack": Receiver(), "hook": Receiver(), "mail": Mailbox(cert, key),
           "hanging": Hanging(), "cert": cert}
    try:
        yield out
    finally:
        for name in ("slack", "hook", "mail", "hanging"):
            out[name].close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory,
            servers: dict[str, Any]) -> Iterator[LocalCluster]:
    c = LocalCluster(Path(tmp_path_factory.mktemp("channels")))
    configure(c, ["outbox_give_up_attempts = 2"])
    # The nodes trust the test's SMTP certificate (and nothing else: no other TLS here).
    c.env = {**os.environ, "SSL_CERT_FILE": str(servers["cert"])}
    c.start()
    c.wait_leader(timeout=30)
    c.wait_serving()
    c.start_worker("w1")
    try:
        yield c
    finally:
        c.close()


def put(c: LocalCluster, name: str, body: Any, token: str | None = None) -> httpx.Response:
    return c.http.put(c.urls[c.ids[0]] + f"/v1/channels/{name}", json=body,
                      headers=c.auth_headers(token))


def trigger(c: LocalCluster, job_id: str) -> None:
    resp = c.post(c.ids[0], f"/v1/jobs/{job_id}/trigger")
    assert resp.status_code == 202, resp.text


def slack_messages(r: Receiver, path: str) -> list[dict[str, Any]]:
    return [json.loads(h["body"]) for h in r.hooks() if h["path"] == path]


def check_slack_shape(body: dict[str, Any]) -> None:
    """What Slack's incoming webhooks accept: text, and blocks of known kinds."""
    assert set(body) == {"text", "blocks"}
    assert isinstance(body["text"], str) and 0 < len(body["text"]) <= 3000
    assert body["blocks"][0]["type"] == "header"
    assert body["blocks"][0]["text"]["type"] == "plain_text"
    assert len(body["blocks"][0]["text"]["text"]) <= 150
    for block in body["blocks"][1:]:
        assert block["type"] == "section" and block["text"]["type"] == "mrkdwn"
        assert len(block["text"]["text"]) <= 3000


def test_failure_and_recovery_reach_slack_webhook_and_mail_and_dead_channels_hold_nothing(
        cluster: LocalCluster, servers: dict[str, Any], tmp_path: Path) -> None:
    slack, hook, mail, hanging = (servers[k] for k in ("slack", "hook", "mail", "hanging"))
    assert put(cluster, "ops-slack", {"slack": {"webhook_url": f"{slack.url}/hook/slack"}}
               ).status_code == 201
    assert put(cluster, "ops-hook", {"webhook": {"url": f"{hook.url}/hook/chan"}}
               ).status_code == 201
    resp = put(cluster, "ops-mail", {"email": {
        "host": "127.0.0.1", "port": mail.port, "starttls": True,
        "from": "cron@example.com", "to": ["ops@example.com", "dev@example.com"],
        "username": "cron", "password": {"secret": "s3cret-pw"}}})
    assert resp.status_code == 201, resp.text
    assert resp.json()["email"]["password"] == {"secret": "***"}
    assert "s3cret-pw" not in resp.text
    # A channel nobody listens on, and one that accepts and never answers.
    assert put(cluster, "refused", {"slack": {
        "webhook_url": f"http://127.0.0.1:{free_port()}/hook"}}).status_code == 201
    assert put(cluster, "hanging", {"slack": {
        "webhook_url": f"http://127.0.0.1:{hanging.port}/hook"}}).status_code == 201

    flag = tmp_path / "ok"
    add_job(cluster, cluster.ids[0], "nightly", cron=NEVER, max_attempts=2,
            retry_backoff_s=0, target={"shell": f"test -f {flag}"},
            notify=[{"channel": "refused"}, {"channel": "hanging"},
                    {"channel": "ops-slack"}, {"channel": "ops-hook"},
                    {"channel": "ops-mail"}])
    started = time.time()
    trigger(cluster, "nightly")
    failed = wait_until(lambda: slack_messages(slack, "/hook/slack"), 30,
                        message="the failure at Slack")
    # The dead and the hanging channel (10 s deadline) delayed nothing.
    assert time.time() - started < 9
    assert len(failed) == 1, failed  # after the last retry only, not per attempt
    check_slack_shape(failed[0])
    text = failed[0]["text"]
    occ = cluster.occurrences(cluster.ids[0], "nightly")[0]["id"]
    for word in ("nightly", "failed", "Tenant: default", occ, "When:", "Instant:"):
        assert word in text, (word, text)
    assert "http" not in text  # link-free

    hooked = wait_until(lambda: [json.loads(h["body"]) for h in hook.hooks()
                                 if h["path"] == "/hook/chan"], 30,
                        message="the webhook channel")
    assert hooked[0]["event"] == "occurrence.failed"
    assert hooked[0]["data"]["occurrence_id"] == occ
    assert all("x-raftcron-signature" in h["headers"] for h in hook.hooks())

    got = wait_until(lambda: mail.messages, 30, message="the e-mail")
    assert got[0]["tls"] and got[0]["login"] == "cron"
    assert got[0]["to"] == ["ops@example.com", "dev@example.com"]
    assert "Subject: [raftcron] Job nightly failed" in got[0]["content"]
    assert occ in got[0]["content"]

    flag.write_text("")
    trigger(cluster, "nightly")
    recovered = wait_until(lambda: [m for m in slack_messages(slack, "/hook/slack")
                                    if "recovered" in m["text"]], 30,
                           message="the recovery at Slack")
    check_slack_shape(recovered[0])
    wait_until(lambda: [m for m in mail.messages if "recovered" in m["content"]], 30,
               message="the recovery by e-mail")
    trigger(cluster, "nightly")  # a second success is no recovery
    time.sleep(3)
    assert len([m for m in slack_messages(slack, "/hook/slack")
                if "recovered" in m["text"]]) == 1

    def dead() -> list[str]:
        rows = cluster.get(cluster.ids[1], "/v1/outbox", params={"status": "dead"})
        return sorted(d["receiver"] for d in rows["deliveries"])
    assert "channel:refused" in wait_until(
        lambda: "channel:refused" in dead() and dead(), 60, message="the refused channel dead")


def test_a_job_names_only_existing_channels_of_its_own_tenant(cluster: LocalCluster) -> None:
    assert put(cluster, "acme-only", {"tenant": "acme", "webhook": {
        "url": "http://127.0.0.1:9/hook"}}).status_code == 201
    for notify, field in [([{"channel": "nope"}], "notify.0.channel"),
                          (["http://127.0.0.1:9/x", {"channel": "acme-only"}],
                           "notify.1.channel")]:
        resp = cluster.post(cluster.ids[1], "/v1/jobs", {
            "id": "refs", "schedule": {"cron": NEVER}, "target": {"shell": "true"},
            "notify": notify})
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["field"] == field
    add_job(cluster, cluster.ids[0], "uses-acme", cron=NEVER, tenant="acme",
            notify=[{"channel": "acme-only"}])
    resp = cluster.http.delete(cluster.urls[cluster.ids[0]] + "/v1/channels/acme-only")
    assert resp.status_code == 409 and "uses-acme" in resp.text
    shown = cluster.get(cluster.ids[2], "/v1/channels/acme-only",
                        params={"consistent": "true"})
    assert shown["jobs"] == ["uses-acme"] and shown["kind"] == "webhook"


def test_tokens_see_and_change_only_their_own_channels(cluster: LocalCluster) -> None:
    assert put(cluster, "default-secret", {"slack": {
        "webhook_url": "http://127.0.0.1:9/services/T0/B0/tok3n"}}).status_code in (200, 201)
    acme = cluster.create_token("tenant:acme", name="acme-chan")
    read = cluster.create_token("read", name="read-chan")
    url = cluster.urls[cluster.ids[0]]

    def call(method: str, path: str, token: str, body: Any = None) -> httpx.Response:
        return httpx.request(method, url + path, json=body, timeout=10,
                             headers=cluster.auth_headers(token))
    assert call("GET", "/v1/channels/default-secret", acme).status_code == 404
    assert "default-secret" not in call("GET", "/v1/channels", acme).text
    assert call("DELETE", "/v1/channels/default-secret", acme).status_code == 404
    resp = call("PUT", "/v1/channels/default-secret", acme,
                {"slack": {"webhook_url": "http://127.0.0.1:9/evil"}})
    assert resp.status_code in (403, 409), resp.text
    resp = call("PUT", "/v1/channels/acme-new", acme,
                {"tenant": "acme", "slack": {"webhook_url": "http://127.0.0.1:9/a/b"}})
    assert resp.status_code == 201, resp.text
    assert resp.json()["slack"]["webhook_url"] == "http://127.0.0.1:9/***"
    # A read token sees every channel, never a secret, and changes none.
    listed = call("GET", "/v1/channels", read)
    assert listed.status_code == 200 and "tok3n" not in listed.text
    assert "default-secret" in listed.text
    assert call("PUT", "/v1/channels/x", read, {"webhook": {"url": "http://a.b/"}}
                ).status_code == 403
    assert call("DELETE", "/v1/channels/default-secret", read).status_code == 403
    admin = cluster.get(cluster.ids[0], "/v1/channels/default-secret")
    assert admin["slack"]["webhook_url"].endswith("/tok3n")


def test_tenant_host_policy_applies_to_slack_urls_and_smtp_hosts(cluster: LocalCluster) -> None:
    resp = cluster.http.put(cluster.urls[cluster.ids[0]] + "/v1/tenants/strict",
                            json={"http_hosts": ["hooks.example.com"]})
    assert resp.status_code == 200, resp.text
    resp = put(cluster, "strict-slack", {"tenant": "strict", "slack": {
        "webhook_url": "http://127.0.0.1:9/hook"}})
    assert resp.status_code == 403 and resp.json()["error"]["field"] == "slack.webhook_url"
    resp = put(cluster, "strict-mail", {"tenant": "strict", "email": {
        "host": "10.0.0.5", "from": "a@b.c", "to": ["d@e.f"]}})
    assert resp.status_code == 403 and resp.json()["error"]["field"] == "email.host"
    assert put(cluster, "strict-ok", {"tenant": "strict", "slack": {
        "webhook_url": "https://hooks.example.com/T/B/x"}}).status_code == 201


@pytest.mark.parametrize(("body", "field"), [
    ({}, "body"),
    ([], "body"),
    ({"slack": {}}, "slack"),
    ({"slack": {"webhook_url": "ftp://x"}}, "slack"),
    ({"slack": {"webhook_url": "https://h/" + "a" * 5000}}, "slack"),
    ({"slack": {"webhook_url": "https://h/"}, "webhook": {"url": "https://h/"}}, None),
    ({"email": {"host": "h", "from": "a@b.c", "to": []}}, "email"),
    ({"email": {"host": "h", "from": "a@b.c", "to": ["x"]}}, "email"),
    ({"email": {"host": "h", "port": "25", "from": "a@b.c", "to": ["d@e.f"]}}, "email"),
    ({"email": {"host": "h", "from": "a@b.c", "to": ["d@e.f"], "starttls": False,
                "username": "u", "password": {"secret": "p"}}}, "email.starttls"),
    ({"email": {"host": "h", "from": "a@b.c", "to": ["d@e.f"], "username": "u"}},
     "email.password"),
    ({"webhook": {"url": 5}}, "webhook"),
    ({"webhook": {"url": "https://h/"}, "mute": "maintenance"}, "mute"),
    ({"webhook": {"url": "https://h/"}, "tenant": "a b"}, "tenant"),
])
def test_bad_channel_input_is_a_400_naming_the_field(cluster: LocalCluster, body: Any,
                                                     field: str | None) -> None:
    resp = put(cluster, "bad", body)
    assert resp.status_code == 400, resp.text
    got = resp.json()["error"].get("field") or ""
    if field is not None:
        assert got.startswith(field), (got, field)


def test_bad_names_and_huge_bodies(cluster: LocalCluster) -> None:
    resp = put(cluster, "a%20b", {"webhook": {"url": "https://h/"}})
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "name"
    huge = {"webhook": {"url": "https://h/"}, "tenant": "x" * 2_000_000}
    assert put(cluster, "huge", huge).status_code == 413
    resp = cluster.http.put(cluster.urls[cluster.ids[0]] + "/v1/channels/empty",
                            content=b"", headers={"content-type": "application/json"})
    assert resp.status_code == 400 and resp.json()["error"]["field"] == "body"
    resp = cluster.http.get(cluster.urls[cluster.ids[0]] + "/v1/channels/none-such")
    assert resp.status_code == 404


def test_nodes_agree_on_channel_state(cluster: LocalCluster) -> None:
    cluster.wait_converged(timeout=30)




def test_the_cli_puts_lists_shows_and_deletes_channels(cluster: LocalCluster) -> None:
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", "import sys; from raftcron.cli.main import main; "
             "sys.exit(main())", "channel", *args,
             "--server", cluster.urls[cluster.ids[1]], "--token", cluster.admin_token],
            capture_output=True, text=True, timeout=60)
    put_ = cli("put", "cli-hook", "--webhook", "https://ex.test/h", "--tenant", "cli")
    assert put_.returncode == 0, put_.stderr
    assert "cli-hook" in put_.stdout and "webhook" in put_.stdout
    listed = cli("list", "--json")
    assert "cli-hook" in {c["name"] for c in json.loads(listed.stdout)["channels"]}
    assert "named by 0 job(s)" in cli("show", "cli-hook").stdout
    assert cli("delete", "cli-hook").returncode == 0
    gone = cli("show", "cli-hook")
    assert gone.returncode == 1 and "does not exist" in gone.stderr
    assert cli("put", "x").returncode == 2


def test_a_run_bound_alert_reaches_the_channel(cluster: LocalCluster,
                                               servers: dict[str, Any]) -> None:
    slack = servers["slack"]
    assert put(cluster, "bounds", {"slack": {"webhook_url": f"{slack.url}/hook/bounds"}}
               ).status_code == 201
    add_job(cluster, cluster.ids[0], "quick", cron=NEVER, min_duration_s=60,
            target={"shell": "true"}, notify=[{"channel": "bounds"}])
    trigger(cluster, "quick")
    got = wait_until(lambda: slack_messages(slack, "/hook/bounds"), 30,
                     message="the too_fast alert at Slack")
    check_slack_shape(got[0])
    assert "Job quick finished too fast" in got[0]["text"]
    assert "min_duration_s" in got[0]["text"] and "Occurrence:" in got[0]["text"]


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_muted_channel_holds_messages_and_sums_them_up_when_the_window_ends(
        cluster: LocalCluster, servers: dict[str, Any]) -> None:
    slack = servers["slack"]
    path = "/hook/muted"
    start = int(time.time())
    end = start + 10
    cal = cluster.http.put(cluster.urls[cluster.ids[0]] + "/v1/calendars/deploy-window",
                           json={"exclude": [{"start": iso(start), "end": iso(end)}]})
    assert cal.status_code in (200, 201), cal.text
    assert put(cluster, "quiet", {"slack": {"webhook_url": f"{slack.url}{path}"},
                                  "mute": "deploy-window"}).status_code == 201
    add_job(cluster, cluster.ids[0], "flaky", cron=NEVER, max_attempts=1,
            target={"shell": "exit 4"}, notify=[{"channel": "quiet"}])
    for _ in range(3):
        trigger(cluster, "flaky")
    wait_until(lambda: len([o for o in cluster.occurrences(cluster.ids[0], "flaky")
                            if o["status"] == "failed"]) == 3, 20,
               message="three failed runs")
    # The calendar a channel mutes with cannot be deleted while it does.
    gone = cluster.http.delete(cluster.urls[cluster.ids[0]] + "/v1/calendars/deploy-window")
    assert gone.status_code == 409 and "mutes channels quiet" in gone.text, gone.text
    assert time.time() < end - 1, "the runs took the whole window: nothing was proved"
    assert slack_messages(slack, path) == [], "nothing goes out inside the window"

    [summary] = wait_until(lambda: slack_messages(slack, path), end - time.time() + 20,
                           message="the summary after the window")
    arrived = max(h["at"] for h in slack.hooks() if h["path"] == path)
    assert arrived >= end, "sent before the window ended"
    check_slack_shape(summary)
    text = summary["text"]
    assert text.startswith("3 messages held while quiet was muted"), text
    assert "calendar deploy-window" in text and f"until {iso(end)}" in text, text
    assert text.count("Job flaky failed") == 3, text

    trigger(cluster, "flaky")  # after the window: one message, as usual
    later = wait_until(lambda: slack_messages(slack, path)[1:], 20,
                       message="the next failure on its own")
    assert len(later) == 1 and later[0]["text"].startswith("Job flaky failed"), later
    time.sleep(1)
    assert len(slack_messages(slack, path)) == 2


def test_a_missed_instant_reaches_the_channel(cluster: LocalCluster,
                                              servers: dict[str, Any]) -> None:
    """A run no worker takes (its queue has none) misses its deadline: the channel says
    which instant was missed."""
    slack = servers["slack"]
    path = "/hook/missed"
    assert put(cluster, "missed-ops", {"slack": {"webhook_url": f"{slack.url}{path}"}}
               ).status_code == 201
    add_job(cluster, cluster.ids[0], "unserved", cron="*/5 * * * * *", queue="nobody-serves",
            deadline_s=1, notify=[{"channel": "missed-ops"}])
    [message] = wait_until(lambda: slack_messages(slack, path)[:1], 30,
                           message="the missed instant at Slack")
    check_slack_shape(message)
    text = message["text"]
    assert text.startswith("Job unserved missed an instant"), text
    assert "missed instant" in text and "Instant: " in text and "Tenant: default" in text
    instant = text.split("Instant: ", 1)[1].split("\n", 1)[0]
    assert datetime.fromisoformat(instant.replace("Z", "+00:00")).second % 5 == 0, text
    cluster.http.delete(cluster.urls[cluster.ids[0]] + "/v1/jobs/unserved")


def test_a_url_whose_port_does_not_parse_fails_alone(cluster: LocalCluster,
                                                     servers: dict[str, Any]) -> None:
    """A channel and a notify URL with port 99999 (digits, so taken as URLs): their
    deliveries fail and back off; the leader's duties and the other channel go on."""
    slack = servers["slack"]
    path = "/hook/beside-bad-port"
    assert put(cluster, "bad-port", {"slack": {"webhook_url": "http://127.0.0.1:99999/h"}}
               ).status_code == 201
    assert put(cluster, "beside", {"slack": {"webhook_url": f"{slack.url}{path}"}}
               ).status_code == 201
    add_job(cluster, cluster.ids[0], "port-fail", cron=NEVER, max_attempts=1,
            target={"shell": "exit 2"},
            notify=["http://127.0.0.1:99999/raw", {"channel": "bad-port"},
                    {"channel": "beside"}])
    for n in (1, 2):  # the second run proves the leader still leases, completes, routes
        trigger(cluster, "port-fail")
        wait_until(lambda n=n: len(slack_messages(slack, path)) >= n, 30,
                   message=f"message {n} beside the bad port")
    def failed_tries() -> list[dict[str, Any]]:
        rows = cluster.get(cluster.ids[0], "/v1/outbox",
                           params={"status": "pending", "limit": 500})["deliveries"]
        return [d for d in rows if d["receiver"] in ("channel:bad-port",
                                                     "http://127.0.0.1:99999/raw")
                and d["attempts"] >= 1 and d["last_error"]]
    # Both bad receivers were tried, failed, and wait in backoff (recorded, not stuck).
    tried = wait_until(lambda: {d["receiver"] for d in failed_tries()} == {
        "channel:bad-port", "http://127.0.0.1:99999/raw"} and failed_tries(), 30,
        message="the bad ports' failures recorded")
    assert all(d["status"] == "pending" for d in tried)
