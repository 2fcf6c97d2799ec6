"""Channels: parsing (errors name the field), redaction, notify references, and the
messages each event renders to (plain text, Slack payload, e-mail)."""

from __future__ import annotations

from typing import Any

import pytest

from raftcron.core.channel_messages import Facts, email_message, render, slack_payload
from raftcron.core.channels import Channel, parse_channel
from raftcron.core.errors import ValidationError
from raftcron.core.model import NAME_RE, parse_job
from raftcron.core.notify_refs import CHANNEL_NAME_RE, channel_refs, notify_urls

T = 1_790_000_000_000
MAIL = {"host": "smtp.example.com", "from": "cron@example.com", "to": ["ops@example.com"],
        "username": "cron", "password": {"secret": "pw"}}


def test_channel_names_follow_every_other_name() -> None:
    assert CHANNEL_NAME_RE.pattern == NAME_RE.pattern


def test_email_defaults_and_the_password_is_never_shown() -> None:
    ch = parse_channel({"email": MAIL}, "mail")
    assert ch.config["port"] == 587 and ch.config["starttls"] is True
    for admin in (True, False):
        shown = ch.to_api(admin)
        assert shown["email"]["password"] == {"secret": "***"}
        assert "pw" not in repr(shown)
    assert Channel.from_spec(ch.to_spec()) == ch


def test_a_redacted_password_keeps_the_stored_one_only_for_the_same_host_and_user() -> None:
    stored = parse_channel({"email": MAIL}, "mail")
    again = parse_channel({"email": {**MAIL, "password": {"secret": "***"}}}, "mail", stored)
    assert again.config["password"] == {"secret": "pw"}
    with pytest.raises(ValidationError) as e:
        parse_channel({"email": {**MAIL, "host": "evil.example.com",
                                 "password": {"secret": "***"}}}, "mail", stored)
    assert e.value.field == "email.password.secret"
    with pytest.raises(ValidationError):
        parse_channel({"email": {**MAIL, "password": {"secret": "***"}}}, "mail")


def test_a_slack_url_is_shown_to_admins_only_and_kept_when_sent_back_redacted() -> None:
    stored = parse_channel({"slack": {"webhook_url": "https://hooks.example/T/B/tok"}}, "s")
    shown = stored.to_api(False)["slack"]["webhook_url"]
    assert shown == "https://hooks.example/***"
    assert stored.to_api(True)["slack"]["webhook_url"].endswith("/tok")
    back = parse_channel({"slack": {"webhook_url": shown}}, "s", stored)
    assert back.config == stored.config


@pytest.mark.parametrize(("body", "field"), [
    ("x", "body"), ({}, "slack"), ({"sms": {}}, "body.sms"),
    ({"slack": {"webhook_url": "https://a/"}, "email": MAIL}, "email"),
    ({"slack": {"webhook_url": "mailto:x"}}, "slack.webhook_url"),
    ({"slack": {"url": "https://a/"}}, "slack.url"),
    ({"email": {**MAIL, "to": ["a@b.c"] * 21}}, "email.to"),
    ({"email": {**MAIL, "to": ["a@b.c", "x y@b.c"]}}, "email.to.1"),
    ({"email": {**MAIL, "from": "A <a@b.c>"}}, "email.from"),
    ({"email": {**MAIL, "port": 0}}, "email.port"),
    ({"email": {**MAIL, "port": True}}, "email.port"),
    ({"email": {**MAIL, "host": "a b"}}, "email.host"),
    ({"email": {**MAIL, "starttls": "yes"}}, "email.starttls"),
    ({"email": {**MAIL, "password": {"secret": ""}}}, "email.password.secret"),
    ({"email": {**MAIL, "password": "pw"}}, "email.password"),
])
def test_bad_channels_name_the_field(body: object, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_channel(body, "x")
    assert e.value.field == field


def test_notify_takes_urls_and_channel_references() -> None:
    job = parse_job({"id": "j", "schedule": "* * * * *", "target": {"shell": "true"},
                     "notify": ["https://a.example/h", {"channel": "ops"}]})
    spec = job.to_spec()
    assert spec["notify"] == ["https://a.example/h", {"channel": "ops"}]
    assert notify_urls(spec["notify"]) == ("https://a.example/h",)
    assert channel_refs(spec["notify"]) == [(1, "ops")]
    for bad, field in [([{"channel": ""}], "notify.0.channel"),
                       ([{"channel": "a", "x": 1}], "notify.0.x"), ([5], "notify.0"),
                       ("https://a/", "notify")]:
        with pytest.raises(ValidationError) as e:
            parse_job({"id": "j", "schedule": "* * * * *", "target": {"shell": "true"},
                       "notify": bad})
        assert e.value.field == field


def facts(event: str, **payload: object) -> Facts:
    return Facts(event, {"job_id": "nightly", "occurrence_id": "occ-1", **payload}, T,
                 "billing", T - 60_000)


@pytest.mark.parametrize(("f", "title", "what"), [
    (facts("occurrence.failed", attempts=3, reason="exit code 1"), "Job nightly failed",
     "run failed after its last attempt (3): exit code 1"),
    (facts("alert.raised", kind="deadline", reason="missed"), "Job nightly missed an instant",
     "missed instant"),
    (facts("alert.raised", kind="too_slow", reason="too_slow"),
     "Job nightly is running too long", "run-bound alert"),
    (facts("alert.raised", kind="failures", reason="consecutive_failures", message="3 in a row"),
     "Job nightly keeps failing", "3 in a row"),
    (facts("job.recovered", after="occurrence.failed", after_occurrence_id="occ-0"),
     "Job nightly recovered", "the first success after a failed run (occurrence occ-0)"),
    (facts("job.recovered", after="alert:not_started"), "Job nightly recovered",
     "after an alert (not_started)"),
])
def test_each_message_says_job_tenant_what_when_and_occurrence(f: Facts, title: str,
                                                               what: str) -> None:
    m = render(f)
    assert m.title == title
    text = m.text
    assert what in text
    for part in ("Job: nightly", "Tenant: billing", "When: 2026-", "Instant: 2026-",
                 "Occurrence: occ-1"):
        assert part in text, part
    assert "http" not in text
    assert render(f) == m  # the same row renders the same on every leader


def test_slack_payload_escapes_and_bounds_text() -> None:
    m = render(facts("occurrence.failed", attempts=1, reason="<!channel> & " + "x" * 5000))
    body = slack_payload(m)
    assert set(body) == {"text", "blocks"}
    section = body["blocks"][1]["text"]["text"]
    assert "<!channel>" not in section and "&lt;!channel&gt; &amp;" in section
    assert len(body["text"]) <= 3000 and len(section) <= 3000
    assert body["blocks"][0] == {"type": "header",
                                 "text": {"type": "plain_text", "text": m.title}}


def test_email_has_subject_recipients_and_a_stable_message_id() -> None:
    m = render(facts("occurrence.failed", attempts=1, reason="boom"))
    msg = email_message(m, "cron@example.com", ["a@example.com", "b@example.com"], "7-99", T)
    assert msg["Subject"] == "[raftcron] Job nightly failed"
    assert msg["To"] == "a@example.com, b@example.com"
    assert msg["Message-ID"] == "<7-99@raftcron>"
    assert "occ-1" in msg.get_content()


# --- mute ------------------------------------------------------------------------------------

def _cal(*exclude: dict) -> Any:
    from raftcron.core.calendar import parse_calendar
    return parse_calendar({"timezone": "UTC", "exclude": list(exclude)}, "quiet").compiled()


T = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def test_a_window_ends_at_its_end() -> None:
    from raftcron.core.calendar import window_end
    cal = _cal({"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:10:00Z"})
    assert window_end(cal, T + 5_500) == T + 600_000


def test_a_cron_exclusion_of_some_seconds_ends_at_the_next_free_second() -> None:
    from raftcron.core.calendar import window_end
    cal = _cal({"cron": "10-19 * * * * *"})
    assert window_end(cal, T + 12_000) == T + 20_000


def test_a_whole_day_ends_at_local_midnight_and_a_total_mute_at_the_bound() -> None:
    from raftcron.core.calendar import MAX_HOLD_MS, window_end
    assert window_end(_cal({"date": "2026-01-01"}), T + 3_600_000) == T + 86_400_000
    always = _cal({"cron": "* * * * * *"})
    assert window_end(always, T) == T + MAX_HOLD_MS


def test_a_summary_counts_lists_and_bounds_what_was_held() -> None:
    from raftcron.core.channel_messages import MAX_LISTED, Facts, held_summary
    held = [Facts("occurrence.failed", {"job_id": f"j{i}", "reason": "exit code 1",
                                        "attempts": 1}, T + i * 1000, "default")
            for i in range(25)]
    m = held_summary("ops", "deploy", T + 60_000, held)
    assert m.title == "25 messages held while ops was muted"
    assert ("Muted by", "calendar deploy") in m.lines
    assert ("Held", "from 2026-01-01T00:00:00Z until 2026-01-01T00:01:00Z") in m.lines
    listed = [v for k, v in m.lines if k.startswith("2026")]
    assert len(listed) == MAX_LISTED and listed[0] == "Job j0 failed"
    assert ("More", "5 more not listed") in m.lines


def test_mute_names_a_calendar_and_round_trips() -> None:
    from raftcron.core.channels import Channel, parse_channel
    ch = parse_channel({"webhook": {"url": "https://ex.test/h"}, "mute": "deploy"}, "ops")
    assert ch.mute == "deploy" and Channel.from_spec(ch.to_spec()) == ch
    plain = parse_channel({"webhook": {"url": "https://ex.test/h"}}, "ops")
    assert "mute" not in plain.to_spec() and plain.to_api(True)["mute"] is None
    for bad in ("a b", "", 5, "x" * 65):
        with pytest.raises(ValidationError) as e:
            parse_channel({"webhook": {"url": "https://ex.test/h"}, "mute": bad}, "ops")
        assert e.value.field == "mute"


def test_a_held_route_needs_protocol_level_2() -> None:
    from raftcron.core.commands import RouteOutbox
    from raftcron.core.protocol import unmet
    held = RouteOutbox(1, T, [[1, [["channel:ops", "tenant:default", T + 1000]]]])
    plain = RouteOutbox(1, T, [[1, [["channel:ops", "tenant:default"]]]])
    assert unmet(held, 1).feature == "muted channels" and unmet(plain, 1) is None


def test_a_bad_port_is_its_own_origin_and_never_raises() -> None:
    from raftcron.core.delivery import url_origin
    assert url_origin("https://h:abc/x") == "https://h:abc"
    assert url_origin("http://h:99999/a") == "http://h:99999"
    assert url_origin("https://hooks.test/T/B") == "https://hooks.test:443"
    ch = parse_channel({"slack": {"webhook_url": "https://hooks.test:abc/T"}}, "x")
    assert ch.origin() == "https://hooks.test:abc"


def test_a_webhook_channels_credentials_are_for_admins_only() -> None:
    ch = parse_channel({"webhook": {"url": "https://u:pw@h.test/hook?token=t"}}, "w")
    shown = ch.to_api(False)["webhook"]["url"]
    assert shown == "https://h.test/hook" and "pw" not in shown and "token" not in shown
    assert ch.to_api(True)["webhook"]["url"] == "https://u:pw@h.test/hook?token=t"
    back = parse_channel({"webhook": {"url": shown}}, "w", stored=ch)
    assert back.config["url"] == "https://u:pw@h.test/hook?token=t"


def test_slack_text_cannot_mention_or_link() -> None:
    m = render(Facts("occurrence.failed", {"job_id": "j", "reason": "<!channel> <http://x|y>",
                                           "attempts": 1}, T, "default"))
    body = slack_payload(m)
    assert "<!channel>" not in body["text"] and "&lt;!channel&gt;" in body["text"]
