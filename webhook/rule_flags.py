"""Command-line flags for the admission rule settings (``RuleSettings``).

Why this module exists: the rule settings are cluster-admin choices (never pool fields), so they
come from the operator's flags, which the chart renders from its ``webhook.rules`` values. The
same settings serve the webhook and the provisioner's re-check before it launches anything, so
they are parsed once, here, and carried in ``gpucellpool.operator.settings.Settings.rules``.
"""

from __future__ import annotations

import argparse

from webhook.rules.settings import RuleSettings


def _names(values: list[str]) -> frozenset[str]:
    return frozenset(v.strip() for value in values for v in value.split(",") if v.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the rule-setting flags (all default to the safe, compatible ``RuleSettings()``)."""
    group = parser.add_argument_group("admission rules (webhook and provisioner re-check)")
    group.add_argument(
        "--strict-guest-template",
        action="store_true",
        help="admit only the known-safe guestTemplate keys (default: the denylist)",
    )
    group.add_argument(
        "--allowed-sriov-resource",
        action="append",
        default=[],
        metavar="NAME",
        help="an SR-IOV resource a guest interface may request; repeat or comma-separate "
        "(default: none)",
    )
    group.add_argument(
        "--allowed-prometheus-host",
        action="append",
        default=[],
        metavar="HOST",
        help="a host spec.autoscaling.prometheus.url may name (then only listed hosts are; a "
        "listed host may be loopback); repeat or comma-separate. Default: none listed, any host "
        "except loopback, unspecified, multicast and reserved addresses and localhost; link-local "
        "addresses and cloud metadata addresses and names are refused even when listed",
    )
    group.add_argument(
        "--allowed-storage-class",
        action="append",
        default=[],
        metavar="NAME",
        help="a StorageClass a guestTemplate storage (root-disk) override may name; repeat or "
        "comma-separate (default: none, so every storage override is refused)",
    )
    group.add_argument(
        "--allow-blank-data-disks",
        action="store_true",
        help="let guests create blank data-disk PVCs of any size and StorageClass",
    )


def settings_from(args: argparse.Namespace) -> RuleSettings:
    """The ``RuleSettings`` the parsed flags describe."""
    return RuleSettings(
        strict_guest_template=bool(args.strict_guest_template),
        allowed_sriov_resources=_names(args.allowed_sriov_resource),
        allow_blank_data_disks=bool(args.allow_blank_data_disks),
        allowed_prometheus_hosts=_names(args.allowed_prometheus_host),
        allowed_storage_classes=_names(args.allowed_storage_class),
    )
