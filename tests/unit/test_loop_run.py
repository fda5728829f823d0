"""``gpucellpool run``'s flags, the webhook env contract, JSON logs and their scrubbing.

What these prove: the subcommand is registered and its flags map onto ``Settings``; the
webhook is configured from ``GPUCELLPOOL_WEBHOOK_<FIELD>`` only when enabled, with types
converted and bad values refused by name; log lines are JSON with ``extra`` fields, and tokens,
PEM blocks and credential-named fields never reach them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gpucellpool.cli import build_parser
from gpucellpool.operator.logs import JsonFormatter
from gpucellpool.operator.run import settings_from
from gpucellpool.operator.settings import watched_namespaces, webhook_options_from_env


def test_run_flags_map_to_settings() -> None:
    argv = ["run", "--identity", "pod-a", "--lease-namespace", "ops", "--namespace", "team",
            "--lease-duration", "20", "--debounce", "0.1", "--no-provision"]  # fmt: skip
    settings = settings_from(build_parser(argv).parse_args(argv))
    assert (settings.identity, settings.lease_namespace) == ("pod-a", "ops")
    assert watched_namespaces(settings) == ("team",)
    assert settings.lease_s == 20 and settings.debounce_s == 0.1 and not settings.provision


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], (None,)),
        (["--namespace", "a"], ("a",)),
        (["--namespace", "a,b", "--namespace", "c", "--namespace", "a"], ("a", "b", "c")),
        (["--namespace", " , "], (None,)),
    ],
)
def test_namespace_flag_repeats_and_splits(flags: list[str], expected: tuple[str, ...]) -> None:
    argv = ["run", *flags]
    settings = settings_from(build_parser(argv).parse_args(argv))
    assert watched_namespaces(settings) == expected


def test_webhook_options_from_env() -> None:
    assert webhook_options_from_env({}) is None
    assert webhook_options_from_env({"GPUCELLPOOL_WEBHOOK_ENABLED": "false"}) is None
    options = webhook_options_from_env(
        {
            "GPUCELLPOOL_WEBHOOK_ENABLED": "true",
            "GPUCELLPOOL_WEBHOOK_MODE": "cert-manager",
            "GPUCELLPOOL_WEBHOOK_PORT": "9444",
            "GPUCELLPOOL_WEBHOOK_CERT_DIR": "/certs",
            "GPUCELLPOOL_WEBHOOK_EXTRA_DNS": "a.example, b.example",
            "GPUCELLPOOL_WEBHOOK_UNKNOWN": "ignored",
        }
    )
    assert options is not None
    assert (options.mode, options.port, options.cert_dir) == ("cert-manager", 9444, Path("/certs"))
    assert options.extra_dns == ("a.example", "b.example")
    with pytest.raises(ValueError, match="GPUCELLPOOL_WEBHOOK_PORT"):
        webhook_options_from_env(
            {"GPUCELLPOOL_WEBHOOK_ENABLED": "true", "GPUCELLPOOL_WEBHOOK_PORT": "x"}
        )
    with pytest.raises(ValueError, match="MODE"):
        webhook_options_from_env(
            {"GPUCELLPOOL_WEBHOOK_ENABLED": "true", "GPUCELLPOOL_WEBHOOK_MODE": "x"}
        )


def _line(msg: str, *args: object, **extra: object) -> dict[str, object]:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, msg, args, None)
    for key, value in extra.items():
        setattr(record, key, value)
    return json.loads(JsonFormatter().format(record))  # type: ignore[no-any-return]


def test_json_logs_carry_extra_fields_and_never_secrets() -> None:
    line = _line("decided %s", "ScaledUp", pool="ns/a", desired=3)
    assert line["msg"] == "decided ScaledUp" and line["pool"] == "ns/a" and line["desired"] == 3
    pem = "-----BEGIN PRIVATE KEY-----\nMIIabc\n-----END PRIVATE KEY-----"
    leaked = _line(
        "auth header Bearer abc.def-ghi and token=s3cr3t and %s", pem,
        kubeconfig="apiVersion: v1 ...", password="hunter2", error="Bearer zzz",
    )  # fmt: skip
    text = json.dumps(leaked)
    for secret in ("abc.def-ghi", "s3cr3t", "MIIabc", "apiVersion: v1", "hunter2", "zzz"):
        assert secret not in text, secret
