"""The one Prometheus URL policy: hostile URLs refused at admission, addresses at connect time.

Each hostile URL below was admitted by the link-local guard that preceded
``gpucellpool.api.url_policy`` (or, for the DNS names, could only be caught by a look at the
resolved address). The admission half runs them through ``validate_create`` as the webhook does;
the connect-time half judges resolved addresses with ``judge_peer``.
"""

from __future__ import annotations

import copy

import httpx
import pytest

from gpucellpool.api import url_policy as up
from tests.unit.test_webhook_rules import POOL
from webhook.rules import RuleSettings, validate_create

HOSTILE_URLS = [
    "http://169.254.169.254/latest/meta-data",
    "http://169\u3002254\u3002169\u3002254/",  # ideographic full stop
    "http://169\uff0e254\uff0e169\uff0e254/",  # full-width full stop
    "http://169\uff61254\uff61169\uff61254/",  # half-width ideographic full stop
    "http://169.254.169.254./",  # trailing dot
    "http://2852039166/",  # integer form
    "http://0xa9.0xfe.0xa9.0xfe/",  # hex parts
    "http://0251.0376.0251.0376/",  # octal parts
    "http://169.254.43518/",  # short form
    "http://[fd00:ec2::254]/",  # AWS IMDS over IPv6
    "http://[fd20:ce::254]/",  # GCP metadata over IPv6
    "http://[::a9fe:a9fe]/",  # IPv4-compatible
    "http://[::ffff:169.254.169.254]/",  # IPv4-mapped
    "http://[::ffff:a9fe:a9fe]/",
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64
    "http://[2002:a9fe:a9fe::1]/",  # 6to4
    "http://[fe80::1]/",
    "http://metadata.google.internal/computeMetadata/v1",
    "http://METADATA.google.internal./",
    "http://metadata/",
    "http://instance-data.ec2.internal/",
    "http://100.100.100.200/",  # Alibaba Cloud
    "http://168.63.129.16/",  # Azure WireServer
    "http://192.0.0.192/",  # Oracle Cloud
    "http://127.0.0.1:9090/",
    "http://127.1:9090/",
    "http://[::1]:9090/",
    "http://[::ffff:127.0.0.1]:9090/",
    "http://localhost:9090/",
    "http://prometheus.localhost/",
    "http://0.0.0.0:9090/",
    "http://224.0.0.1/",
    "http://169.254.169.254.nip.io/",  # wildcard DNS: resolves to the address it spells
    "http://169-254-169-254.sslip.io/",
    "http://a9fea9fe.nip.io/",
    "http://127-0-0-1.sslip.io:9090/",
    "http://app.localtest.me/",
    "http://169%2e254%2e169%2e254/",
]


def _prometheus_reason(url: str, settings: RuleSettings | None = None) -> str | None:
    obj = copy.deepcopy(POOL)
    obj["spec"]["autoscaling"] = {"prometheus": {"url": url}}
    verdict = validate_create(obj, settings or RuleSettings())
    found = {r.path: r.message for r in verdict.reasons}
    return found.get("spec.autoscaling.prometheus.url")


@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_hostile_prometheus_url_is_refused_at_admission(url: str) -> None:
    reason = _prometheus_reason(url)
    assert reason is not None, f"{url!r} was admitted"
    host = url.split("/")[2]
    assert url not in reason and ("." not in host or host not in reason)  # never echoed


@pytest.mark.parametrize(
    "url",
    [
        "https://prometheus.monitoring.svc:9090",
        "http://prometheus-0.prometheus.monitoring.svc.cluster.local:9090/prom",
        "http://10.96.0.20:9090",
        "http://[fd12:3456::20]:9090",
        "https://prometheus.example.com",
        "https://b\u00fccher.example/",
    ],
)
def test_ordinary_prometheus_urls_are_admitted(url: str) -> None:
    assert _prometheus_reason(url) is None


def test_loopback_is_admitted_only_when_allowlisted_and_metadata_never() -> None:
    listed = RuleSettings(allowed_prometheus_hosts=frozenset({"127.0.0.1", "localhost"}))
    assert _prometheus_reason("http://127.0.0.1:9090", listed) is None
    assert _prometheus_reason("http://localhost:9090", listed) is None
    assert "allowedPrometheusHosts" in str(_prometheus_reason("http://10.0.0.1:9090", listed))
    metadata = RuleSettings(allowed_prometheus_hosts=frozenset({"169.254.169.254"}))
    assert "link-local" in str(_prometheus_reason("http://169.254.169.254/", metadata))


@pytest.mark.parametrize(
    "url",
    [u for u in HOSTILE_URLS if "%" not in u and "0251." not in u],
)
def test_policy_normalises_hosts_as_httpx_does(url: str) -> None:
    """Whatever httpx will connect to, the policy judged the same host (no spelling gap)."""
    host = httpx.URL(url).raw_host.decode("ascii")
    assert not up.judge_host(host).allowed


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("2852039166", "169.254.169.254"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("169.254.43518", "169.254.169.254"),
        ("127.1", "127.0.0.1"),
        ("10.0.0.1", "10.0.0.1"),
        ("prometheus", None),
        ("256.1.1.1", None),
        ("1.2.3.4.5", None),
    ],
)
def test_numeric_ipv4_reads_what_inet_aton_reads(host: str, expected: str | None) -> None:
    address = up.numeric_ipv4(host)
    assert (str(address) if address else None) == expected


@pytest.mark.parametrize(
    ("addresses", "allowed_hosts", "allowed", "reason"),
    [
        (["10.96.0.20"], (), True, ""),
        (["127.0.0.1"], (), False, "loopback"),
        (["::1"], (), False, "loopback"),
        (["169.254.169.254"], (), False, "link-local"),
        (["fd00:ec2::254"], (), False, "metadata"),
        (["64:ff9b::a9fe:a9fe"], (), False, "link-local"),
        (["10.96.0.20", "169.254.169.254"], (), False, "link-local"),  # every answer counts
        ([], (), False, "no address"),
        (["127.0.0.1"], ("prom.example",), True, ""),
        (["169.254.169.254"], ("prom.example",), False, "link-local"),  # never allowlisted
    ],
)
def test_judge_peer_checks_every_resolved_address(
    addresses: list[str], allowed_hosts: tuple[str, ...], allowed: bool, reason: str
) -> None:
    verdict = up.judge_peer("prom.example", addresses, allowed_hosts)
    assert verdict.allowed is allowed
    assert reason in verdict.reason


def test_allowlist_entries_are_normalised_like_hosts() -> None:
    assert up.allowlist(["Prom.Example.", "127\u30020\u30020\u30021", "bad host"]) == {
        "prom.example",
        "127.0.0.1",
    }
