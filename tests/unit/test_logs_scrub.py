"""The log scrubber masks every credential shape the operator can meet, wherever it sits.

Why this test exists: finding 7 of issue 12 listed shapes that reached the logs unmasked: a
bare bootstrap token, a kubeconfig's client-key-data, ``Authorization: Basic``, a URL with
userinfo and a PEM block cut short. The examples pin each shape; the property test embeds a
random secret of each shape in random text and asserts that the secret part never survives.
"""

from __future__ import annotations

import base64
import json
import logging

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpucellpool.operator.logs import JsonFormatter, scrub

EXAMPLES = [
    ("join with abcdef.0123456789abcdef now", "0123456789abcdef"),
    (
        "users:\n- user:\n    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVk=\n",
        "LS0tLS1CRUdJ",
    ),
    ("headers={'Authorization': 'Basic dXNlcjpodW50ZXIy'}", "dXNlcjpodW50ZXIy"),
    ("GET https://admin:hunter22@prom.example:9090/api/v1/query", "hunter22"),
    ("key: -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAsecretbody\n", "MIIEowIBAAKCAQEA"),
    ("Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.payload", "eyJhbGciOiJSUzI1NiJ9"),
    ('{"password": "s3cr3t-value"}', "s3cr3t-value"),
]


@pytest.mark.parametrize(("text", "secret"), EXAMPLES)
def test_each_shape_is_masked(text: str, secret: str) -> None:
    assert secret in text
    assert secret not in scrub(text)


@pytest.mark.parametrize(
    "text",
    [
        "pool cells/p1 scaled from 2 to 3 replicas (policy gpu-util, 82% > 80%)",
        "cell p1-0 joined as node gpu-p1-0; drain took 12.5s",
        "GET http://prometheus.monitoring.svc:9090/api/v1/query returned 200",
    ],
)
def test_ordinary_lines_pass_unchanged(text: str) -> None:
    assert scrub(text) == text


_B64 = st.binary(min_size=12, max_size=48).map(lambda b: base64.b64encode(b).decode())
_WORD = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", min_size=10,
                max_size=24)  # fmt: skip
_TOKEN_SECRET = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=16, max_size=16)


def _shapes() -> st.SearchStrategy[tuple[str, str]]:
    """(text that carries a secret, the secret part that must not survive)."""
    token = st.tuples(st.text("abcdef0123456789", min_size=6, max_size=6), _TOKEN_SECRET).map(
        lambda p: (f"{p[0]}.{p[1]}", p[1])
    )
    basic = _B64.map(lambda s: (f"Authorization: Basic {s}", s))
    bearer = _WORD.map(lambda s: (f"authorization=Bearer {s}", s))
    key_data = _B64.map(lambda s: (f"client-key-data: {s}", s))
    userinfo = _WORD.map(lambda s: (f"https://ops:{s}@metrics.example/api", s))
    pem_cut = _B64.map(lambda s: (f"-----BEGIN EC PRIVATE KEY-----\n{s}\n", s))
    pem = _B64.map(lambda s: (f"-----BEGIN CERTIFICATE-----\n{s}\n-----END CERTIFICATE-----", s))
    password = _WORD.map(lambda s: (f'"password": "{s}"', s))
    return st.one_of(token, basic, bearer, key_data, userinfo, pem_cut, pem, password)


_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


@settings(max_examples=400, deadline=None)
@given(before=_TEXT, shape=_shapes(), after=_TEXT)
def test_no_embedded_secret_survives(before: str, shape: tuple[str, str], after: str) -> None:
    carrier, secret = shape
    assume(secret not in before + after)  # the random text itself is not the secret
    assert secret not in scrub(f"{before}{carrier}{after}")
    assert secret not in scrub(f"{before} {carrier} {after}")


def test_the_formatter_scrubs_messages_and_extra_fields() -> None:
    record = logging.makeLogRecord(
        {
            "msg": "join token %s",
            "args": ("abcdef.0123456789abcdef",),
            "url": "https://u:pw123456@h/x",
            "client-key-data": "LS0t",
            "levelno": logging.INFO,
            "levelname": "INFO",
        }
    )
    line = json.loads(JsonFormatter().format(record))
    assert "0123456789abcdef" not in line["msg"]
    assert line["url"] == "https://<redacted>@h/x"
    assert line["client-key-data"] == "<redacted>"
