"""Webhook delivery rules (core.delivery): backoff, give-up, alert ids, redaction, keys."""

from __future__ import annotations

import pytest

from raftcron.core import delivery

DAY_MS = 86_400_000


def test_backoff_doubles_up_to_five_minutes() -> None:
    assert [delivery.backoff_ms(n) for n in (-1, 0, 1, 2, 3, 9, 10, 1000)] == [
        0, 0, 1_000, 2_000, 4_000, 256_000, 300_000, 300_000]


@pytest.mark.parametrize(("attempts", "first", "now", "max_attempts", "dead"), [
    (1, 0, DAY_MS - 1, None, False),
    (1, 0, DAY_MS, None, True),
    (300, 0, 1, None, False),
    (2, 0, 1, 3, False),
    (3, 0, 1, 3, True),
])
def test_gives_up_on_time_or_attempts(attempts: int, first: int, now: int,
                                      max_attempts: int | None, dead: bool) -> None:
    assert delivery.gives_up(attempts, first, now, DAY_MS, max_attempts) is dead


def test_dead_alert_id_is_per_receiver_and_stable() -> None:
    a = delivery.dead_alert_id("https://a.example/hook")
    assert a == delivery.dead_alert_id("https://a.example/hook")
    assert a.startswith("webhook_dead:") and len(a) == len("webhook_dead:") + 16
    assert a != delivery.dead_alert_id("https://b.example/hook")


@pytest.mark.parametrize(("url", "shown"), [
    ("https://user:pw@h.example:8443/p/q?token=x#f", "https://h.example:8443/p/q"),
    ("http://[::1]:9/x?k=v", "http://[::1]:9/x"),
    ("http://h/", "http://h/"),
    ("http://h:99999/", "<unparsable url>"),
])
def test_redact_url_drops_credentials_query_and_fragment(url: str, shown: str) -> None:
    assert delivery.redact_url(url) == shown


def test_derived_tenant_keys_differ_per_tenant_and_per_cluster_key() -> None:
    k = delivery.derive_tenant_key("root-key", "acme")
    assert k == delivery.derive_tenant_key("root-key", "acme") and len(k) == 64
    assert k != delivery.derive_tenant_key("root-key", "acme2")
    assert k != delivery.derive_tenant_key("other-root", "acme")
    assert "root-key" not in k
