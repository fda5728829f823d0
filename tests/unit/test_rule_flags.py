"""The admission rule settings are operator flags (a deployed operator can be made strict).

Why this test exists: finding 6 of issue 12 was that strict mode and the allowlists existed
only as Python defaults. These flags are the contract the chart renders ``webhook.rules.*``
into, so their names and meanings are pinned here, through the operator's own parser.
"""

from __future__ import annotations

import argparse

from gpucellpool.operator import run
from webhook import rule_flags
from webhook.rules import DEFAULT_SETTINGS, RuleSettings, validate_create
from webhook.rules.settings import RuleSettings as SettingsClass

STRICT_PROFILE = [
    "--strict-guest-template",
    "--allowed-storage-class",
    "fast, standard",
    "--allowed-storage-class=archive",
    "--allowed-sriov-resource",
    "intel.com/sriov_netdevice",
    "--allowed-prometheus-host",
    "prometheus.monitoring.svc",
]


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    rule_flags.add_arguments(parser)
    return parser.parse_args(argv)


def test_no_flags_are_the_safe_defaults() -> None:
    assert rule_flags.settings_from(_parse([])) == DEFAULT_SETTINGS
    assert DEFAULT_SETTINGS.allowed_storage_classes == frozenset()


def test_the_strict_profile_parses_into_rule_settings() -> None:
    settings = rule_flags.settings_from(_parse(STRICT_PROFILE))
    assert settings == SettingsClass(
        strict_guest_template=True,
        allowed_sriov_resources=frozenset({"intel.com/sriov_netdevice"}),
        allow_blank_data_disks=False,
        allowed_prometheus_hosts=frozenset({"prometheus.monitoring.svc"}),
        allowed_storage_classes=frozenset({"fast", "standard", "archive"}),
    )


def test_the_operator_parser_carries_them_into_settings_rules() -> None:
    parser = argparse.ArgumentParser()
    run.add_arguments(parser)
    args = parser.parse_args(STRICT_PROFILE)
    rules = run.settings_from(args).rules
    assert isinstance(rules, RuleSettings)
    assert rules.strict_guest_template is True
    assert rules.allowed_storage_classes == frozenset({"fast", "standard", "archive"})


def _pool_with(**template: object) -> dict[str, object]:
    guest = {"guestClassRef": {"name": "c"}, "imageRef": {"name": "i"}, **template}
    return {
        "apiVersion": "cells.kubeswift.io/v1alpha1",
        "kind": "GPUCellPool",
        "metadata": {"name": "p", "namespace": "cells"},
        "spec": {
            "replicas": 1,
            "cell": {"guestTemplate": guest, "gpu": {"backend": "DRA", "dra": {
                "resourceClaimTemplateName": "t"}}},
            "bootstrap": {"joinSecretRef": {"name": "j"}},
            "workloadCluster": {"kubeconfigSecretRef": {"name": "k"}},
        },
    }  # fmt: skip


def test_storage_needs_an_allowlisted_class_and_strict_refuses_placement() -> None:
    storage = _pool_with(storage={"storageClassName": "fast"})
    spread = _pool_with(topologySpreadConstraints=[{"maxSkew": 1}])
    assert not validate_create(storage).allowed, "no StorageClass is allowlisted by default"
    strict = rule_flags.settings_from(_parse(STRICT_PROFILE))
    assert validate_create(storage, strict).allowed, validate_create(storage, strict).message()
    slow = _pool_with(storage={"storageClassName": "slow"})
    assert "'slow' is not on the allowlist" in validate_create(slow, strict).message()
    assert validate_create(spread).allowed and validate_create(spread).warnings
    refused = validate_create(spread, strict)
    assert not refused.allowed
    assert "strict guestTemplate mode refuses it" in refused.message()
