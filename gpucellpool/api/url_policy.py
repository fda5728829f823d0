"""Which hosts the operator may send a pool's Prometheus requests (and bearer token) to.

Why this module exists: the Prometheus URL is chosen by the pool author, but the requests, and
the token read from ``authSecretRef``, leave from inside the cluster with the operator's network
position. A URL must not reach a cloud metadata service, the node's loopback or any other address
only the operator can reach. The same verdict is needed twice: at admission, on the host as
written (no DNS), and at connect time, on every address the host resolves to (DNS can point a
harmless-looking name at 169.254.169.254, or change its answer later). One pure module serves
both, so the two checks cannot drift apart.

Hosts are normalised the way the HTTP client (httpx) normalises them before they are judged:
ideographic and full-width dots become dots, case is folded, IDNA labels are encoded, a trailing
dot is dropped; numeric IPv4 spellings that ``getaddrinfo`` accepts (``2852039166``,
``0xa9.0xfe.0xa9.0xfe``, octal parts) are decoded; IPv6 addresses that embed an IPv4 address
(IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo) are judged by that address too.

Two tiers: link-local addresses and cloud metadata addresses and names are refused always;
loopback, unspecified, multicast and reserved addresses (and ``localhost``) are refused unless
the cluster admin allowlisted the host (``allowedPrometheusHosts``), which the tests, the twin
and the demo need for a Prometheus on 127.0.0.1. A non-empty allowlist also refuses every host
not on it. Reasons never repeat the URL (it may be a credential pasted in the wrong place).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import idna

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

UNICODE_DOTS = re.compile("[\u3002\uff0e\uff61]")
"""Label separators IDNA (and so httpx) treats as dots: ideographic, full-width, half-width."""

METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",  # GCP
        "metadata.goog",  # GCP
        "metadata.azure.internal",
        "instance-data",  # AWS
        "instance-data.ec2.internal",  # AWS
        "metadata.tencentyun.com",  # Tencent Cloud
        "metadata.platformequinix.com",  # Equinix Metal
    }
)
"""Host names of cloud metadata services (most resolve to a link-local address)."""

METADATA_NETWORKS = tuple(
    ipaddress.ip_network(n)
    for n in (
        "169.254.0.0/16",  # AWS, Azure, GCP, OCI, OpenStack, DigitalOcean... (link-local)
        "100.100.100.200/32",  # Alibaba Cloud
        "168.63.129.16/32",  # Azure WireServer
        "192.0.0.192/32",  # Oracle Cloud (legacy metadata)
        "fd00:ec2::254/128",  # AWS IMDS over IPv6
        "fd20:ce::254/128",  # GCP metadata over IPv6
    )
)
"""Metadata service addresses that are not all link-local."""

LOOPBACK_DOMAINS = ("localhost", "localtest.me", "lvh.me", "vcap.me")
"""Names (and their subdomains) that resolve to the loopback address by design."""

_EMBEDDED_DOTTED = re.compile(
    r"(?<![0-9])([0-9]{1,3})[.-]([0-9]{1,3})[.-]([0-9]{1,3})[.-]([0-9]{1,3})(?![0-9])"
)
_EMBEDDED_HEX = re.compile(r"(?:^|[.-])([0-9a-f]{8})(?=$|[.-])")
"""An IPv4 address inside a name, as wildcard DNS services (nip.io, sslip.io) read it."""

NAT64_NETWORKS = tuple(ipaddress.ip_network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48"))
THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_IPV4_PART = re.compile(r"(0x[0-9a-f]*|0[0-7]*|[1-9][0-9]*)", re.IGNORECASE)
_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")


class HostError(ValueError):
    """The host cannot be normalised (the HTTP client would refuse it too)."""


@dataclass(frozen=True, slots=True)
class HostVerdict:
    """Whether requests may go to a host (or a resolved address), and why not."""

    allowed: bool
    reason: str = ""


ALLOWED = HostVerdict(True)


def normalise_host(host: str) -> str:
    """``host`` as the HTTP client will look it up: dots, case, IDNA, no trailing dot.

    Raises ``HostError`` for a host the client could not encode either.
    """
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = UNICODE_DOTS.sub(".", text).lower()
    if ":" in text:  # an IPv6 literal
        try:
            return str(ipaddress.IPv6Address(text))
        except ValueError:
            raise HostError("is not a valid IPv6 address") from None
    if not text.isascii():
        try:
            text = idna.encode(text).decode("ascii")
        except idna.IDNAError:
            raise HostError("is not a valid internationalised host name") from None
    text = text[:-1] if text.endswith(".") else text
    if not text or not _NAME.fullmatch(text):
        raise HostError("is not a valid host name")
    return text


def numeric_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address ``getaddrinfo`` (``inet_aton``) reads in ``host``, or None.

    Accepts one to four parts, each decimal, octal (leading 0) or hex (0x); the last part
    fills the remaining bytes, so ``2852039166`` and ``169.254.43518`` are 169.254.169.254.
    """
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_IPV4_PART.fullmatch(p) for p in parts):
        return None
    values = [_part_value(p) for p in parts]
    head, last = values[:-1], values[-1]
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (5 - len(parts))):
        return None
    number = last
    for i, value in enumerate(head):
        number |= value << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def _part_value(part: str) -> int:
    lowered = part.lower()
    if lowered.startswith("0x"):
        return int(lowered[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part, 8)
    return int(part)


def literal_address(host: str) -> Address | None:
    """The address a normalised host spells (any numeric form), or None for a name."""
    if ":" in host:
        return ipaddress.IPv6Address(host)
    return numeric_ipv4(host)


def embedded_ipv4(address: Address) -> Iterator[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    if isinstance(address, ipaddress.IPv4Address):
        return
    if address.ipv4_mapped is not None:
        yield address.ipv4_mapped
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if int(address) >> 32 == 0 and int(address) > 1:  # IPv4-compatible ::a.b.c.d
        yield low32
    if any(address in net for net in NAT64_NETWORKS):
        yield low32
    if address.sixtofour is not None:
        yield address.sixtofour
    if address.teredo is not None:
        yield from address.teredo


def _always_refused(address: Address) -> str:
    if address.is_link_local:
        return "a link-local address (where cloud metadata services live)"
    if any(address.version == net.version and address in net for net in METADATA_NETWORKS):
        return "a cloud metadata service address"
    return ""


def _refused_unless_allowed(address: Address) -> str:
    checks = (
        (address.is_loopback, "a loopback address"),
        (address.is_unspecified or address in THIS_NETWORK, "an unspecified address"),
        (address.is_multicast, "a multicast address"),
        (address.is_reserved, "a reserved address"),
    )
    return next((why for bad, why in checks if bad), "")


def judge_address(address: Address, allowlisted: bool = False) -> HostVerdict:
    """The verdict on one address (and every IPv4 address it embeds); the reason says what it is."""
    candidates = (*embedded_ipv4(address), address)
    tiers = (_always_refused,) if allowlisted else (_always_refused, _refused_unless_allowed)
    for tier in tiers:
        why = next((w for c in candidates if (w := tier(c))), "")
        if why:
            return HostVerdict(False, why)
    return ALLOWED


def allowlist(hosts: Iterable[str]) -> frozenset[str]:
    """The admin's allowed hosts, normalised like any host (bad entries are dropped)."""
    found = set()
    for host in hosts:
        try:
            found.add(normalise_host(host))
        except HostError:
            continue
    return frozenset(found)


def judge_host(host: str, allowed_hosts: Iterable[str] = ()) -> HostVerdict:
    """Admission: may a URL name ``host`` (as written, before DNS)?"""
    try:
        name = normalise_host(host)
    except HostError as exc:
        return HostVerdict(False, str(exc))
    allowed = allowlist(allowed_hosts)
    why = _name_problem(name, name in allowed)
    if not why and allowed and name not in allowed:
        why = "names a host outside the cluster admin's allowedPrometheusHosts"
    return HostVerdict(False, why) if why else ALLOWED


def _name_problem(name: str, listed: bool) -> str:
    if name in METADATA_NAMES or name.endswith(".metadata.google.internal"):
        return "names a cloud metadata service"
    address = literal_address(name)
    if address is None:
        return "" if listed else _embedded_problem(name)
    if ":" not in name and str(address) != name:
        return "spells an IP address in an odd numeric form; write it dotted"
    verdict = judge_address(address, listed)
    return "" if verdict.allowed else f"names {verdict.reason}"


def _embedded_problem(name: str) -> str:
    """A name that resolves to a refused address by design: loopback domains, or an address
    spelled inside the name for a wildcard DNS service (``169-254-169-254.sslip.io``)."""
    if any(name == d or name.endswith(f".{d}") for d in LOOPBACK_DOMAINS):
        return "names a host that resolves to the loopback address"
    found = [".".join(m) for m in _EMBEDDED_DOTTED.findall(name)]
    found += [str(ipaddress.IPv4Address(int(h, 16))) for h in _EMBEDDED_HEX.findall(name)]
    for text in found:
        try:
            address = ipaddress.IPv4Address(text)
        except ValueError:
            continue
        verdict = judge_address(address)
        if not verdict.allowed:
            return f"embeds {verdict.reason}; wildcard DNS services resolve such names to it"
    return ""


def judge_peer(
    host: str, addresses: Iterable[str], allowed_hosts: Iterable[str] = ()
) -> HostVerdict:
    """Connect time: may the client connect to every address ``host`` resolved to?

    All of them must pass (a resolver answer mixing a good and a bad address is refused), and
    the host itself must pass ``judge_host``.
    """
    verdict = judge_host(host, allowed_hosts)
    if not verdict.allowed:
        return verdict
    listed = normalise_host(host) in allowlist(allowed_hosts)
    found = False
    for text in addresses:
        found = True
        try:
            address = ipaddress.ip_address(text.split("%", 1)[0])
        except ValueError:
            return HostVerdict(False, "resolved to something that is not an IP address")
        verdict = judge_address(address, listed)
        if not verdict.allowed:
            return HostVerdict(False, f"resolves to {verdict.reason}")
    return ALLOWED if found else HostVerdict(False, "resolved to no address")
