"""Cluster-admin settings that tune how strict the guestTemplate rules are.

Why this module exists: the default guestTemplate contract is a denylist (parity with the
original operator, plus the dangerous nested fields). Some clusters want more: only a known-safe
allowlist of keys, or one vetted SR-IOV resource. These are operator settings (flags or chart
values), never pool fields, because the pool author is the party the rules constrain.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RuleSettings:
    """How strict the admission rules are; the defaults are the safe, compatible choice."""

    strict_guest_template: bool = False
    """Admit only the known-safe guestTemplate keys (``guest_allowlist.SAFE_SCHEMA``)."""
    allowed_sriov_resources: frozenset[str] = frozenset()
    """SR-IOV extended resource names a guest interface may request (default: none)."""
    allow_blank_data_disks: bool = False
    """Let guests create blank data-disk PVCs of any size and StorageClass."""
    allowed_prometheus_hosts: frozenset[str] = frozenset()
    """Hosts spec.autoscaling.prometheus.url may name, loopback included (default: none listed,
    so any host that ``gpucellpool.api.url_policy`` does not refuse; link-local and metadata
    addresses are refused even when listed)."""
    allowed_storage_classes: frozenset[str] = frozenset()
    """StorageClasses a guestTemplate ``storage`` override may name (default: none, so every
    root-disk override is refused: it moves the disk to another class, with its cost and
    placement, which only the cluster admin should choose)."""


DEFAULT_SETTINGS = RuleSettings()
