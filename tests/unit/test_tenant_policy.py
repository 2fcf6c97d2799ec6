"""Tenant policy: host patterns, private addresses in every spelling, job fields."""

from __future__ import annotations

import ipaddress

import pytest

from raftcron.core.errors import ValidationError
from raftcron.core.tenant_policy import (
    NO_POLICY,
    TenantPolicy,
    host_allowed,
    job_violation,
    parse_policy,
    url_violation,
)

QUEUES_ONLY = TenantPolicy(queues=("qa",))

PRIVATE_URLS = [
    "http://169.254.169.254/latest/meta-data/",
    "http://127.0.0.1/",
    "http://127.0.0.1:8700/v1/jobs",
    "http://2130706433/",            # decimal
    "http://0x7f.1/",                # hex, short form
    "http://017700000001/",          # octal
    "http://0x7f000001/",
    "http://127.1/",
    "http://0/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",    # IPv4-mapped IPv6
    "http://[::ffff:a9fe:a9fe]/",    # mapped 169.254.169.254, hex
    "http://[2002:7f00:1::]/",       # 6to4 of 127.0.0.1
    "http://[fe80::1]/",
    "http://[fd00::1]/",
    "http://10.1.2.3/", "http://192.168.1.1/", "http://172.16.0.1/", "http://100.64.0.1/",
    "http://localhost/", "http://LOCALHOST./", "http://api.localhost/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://user:pw@127.0.0.1/",
]


@pytest.mark.parametrize("url", PRIVATE_URLS)
def test_private_addresses_are_refused_for_a_tenant_with_a_policy(url: str) -> None:
    why = url_violation(QUEUES_ONLY, url)
    assert why is not None and "private" in why


@pytest.mark.parametrize("url", PRIVATE_URLS)
def test_a_tenant_without_a_policy_is_unrestricted_as_before(url: str) -> None:
    assert url_violation(NO_POLICY, url) is None


@pytest.mark.parametrize("url", ["http://127.0.0.1\\@api.example.com/",
                                 "http://api.example.com%2f@127.0.0.1/",
                                 "http://1.2.3.4.5/", "http://evil.0x7f/"])
def test_ambiguous_hosts_are_refused(url: str) -> None:
    assert url_violation(QUEUES_ONLY, url) is not None


def test_public_hosts_pass_when_http_hosts_is_null() -> None:
    assert url_violation(QUEUES_ONLY, "https://api.example.com/x") is None
    assert url_violation(QUEUES_ONLY, "http://8.8.8.8/") is None


def test_host_patterns_exact_wildcard_and_ip() -> None:
    p = parse_policy({"http_hosts": ["API.example.com.", "*.svc.example.com", "10.0.0.5"]})
    assert p.http_hosts == ("api.example.com", "*.svc.example.com", "10.0.0.5")
    assert url_violation(p, "https://api.example.com/") is None
    assert url_violation(p, "https://a.svc.example.com/") is None
    assert "not in" in (url_violation(p, "https://svc.example.com/") or "")
    assert "not in" in (url_violation(p, "https://other.example.com/") or "")
    # A listed private address is allowed in any spelling; its neighbour is not.
    assert url_violation(p, "http://10.0.0.5/") is None
    assert url_violation(p, "http://0xa.0.0.5/") is None
    assert "private" in (url_violation(p, "http://10.0.0.6/") or "")


def test_resolved_private_addresses_are_refused_unless_listed() -> None:
    p = TenantPolicy(http_hosts=("*.example.com", "10.0.0.5"))
    private = ipaddress.ip_address("127.0.0.1")
    assert "resolves to" in (host_allowed(p, "a.example.com", [private]) or "")
    assert host_allowed(p, "a.example.com", [ipaddress.ip_address("10.0.0.5")]) is None
    assert host_allowed(p, "a.example.com", [ipaddress.ip_address("93.184.216.34")]) is None
    assert host_allowed(NO_POLICY, "a.example.com", [private]) is None
    exact = TenantPolicy(http_hosts=("db.example.com",))
    assert host_allowed(exact, "db.example.com", [ipaddress.ip_address("10.9.9.9")]) is None


def test_job_violation_names_the_field() -> None:
    p = TenantPolicy(queues=("qa",), targets=("http",), http_hosts=("api.example.com",))
    ok_target = {"http": {"url": "https://api.example.com/"}}
    assert job_violation(p, "qa", ok_target, []) is None
    assert job_violation(p, "billing-prod", ok_target, []).field == "queue"
    assert job_violation(p, "qa", {"shell": "id"}, []).field == "target"
    bad = {"http": {"url": "http://169.254.169.254/"}}
    assert job_violation(p, "qa", bad, []).field == "target.http.url"
    v = job_violation(p, "qa", ok_target, ["https://api.example.com/hook", "http://127.0.0.1/"])
    assert v is not None and v.field == "notify[1]"


@pytest.mark.parametrize("body,field", [
    ({"queues": "qa"}, "queues"), ({"queues": ["no spaces"]}, "queues[0]"),
    ({"targets": ["ftp"]}, "targets[0]"), ({"http_hosts": ["http://x/"]}, "http_hosts[0]"),
    ({"http_hosts": ["*"]}, "http_hosts[0]"), ({"http_hosts": [5]}, "http_hosts[0]"),
])
def test_bad_policy_fields_are_named(body: dict, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_policy(body)
    assert e.value.field == field


def test_omitted_fields_are_null_and_empty_lists_allow_nothing() -> None:
    assert parse_policy({}) == NO_POLICY and not NO_POLICY.is_set
    nothing = parse_policy({"queues": []})
    assert nothing.is_set and job_violation(nothing, "default", {"shell": "x"}, []).field == "queue"
