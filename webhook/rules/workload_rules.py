"""Rules on what a pool puts on its workload-cluster Nodes: labels, annotations, taints.

Why this module exists: a cell's Node labels reach two places where bad syntax hurts. They
are patched onto the Node (the apiserver refuses an invalid key, so every cell would stall in
Joining), and they are rendered as ``k=v,k=v`` into the join template that runs as root in the
guest (``{{ nodeLabels }}``), where a comma, quote or newline would change the kubelet command
line. Keys under ``cells.kubeswift.io/`` are the operator's identity labels (pool, pool-id,
cell, cell-index, instance): a user value there could make one pool's Nodes look like
another's, so they are refused.
"""

from __future__ import annotations

import re

from gpucellpool.api.spec import GPUCellPoolSpec
from webhook.rules.paths import join
from webhook.rules.verdict import Findings

BASE = "spec.workloadCluster.node"
OPERATOR_PREFIX = "cells.kubeswift.io/"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
QUALIFIED_NAME = re.compile(
    rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$"
)
LABEL_VALUE = re.compile(rf"^({_NAME})?$")
MAX_PREFIX = 253


def check_node_settings(spec: GPUCellPoolSpec, found: Findings) -> None:
    """Label, annotation and taint keys are valid and not the operator's; label values too."""
    node = spec.workload_cluster.node
    if node is None:
        return
    for key, value in (node.labels or {}).items():
        path = join(f"{BASE}.labels", key)
        _key(key, path, found)
        if not LABEL_VALUE.fullmatch(value):
            found.error(
                path,
                "label value must be at most 63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit; fix the value",
            )
    for key in node.annotations or {}:
        _key(key, join(f"{BASE}.annotations", key), found)
    for i, taint in enumerate(node.taints or []):
        path = f"{BASE}.taints[{i}]"
        _key(taint.key, f"{path}.key", found)
        if taint.value is not None and not LABEL_VALUE.fullmatch(taint.value):
            found.error(
                f"{path}.value", "must be at most 63 letters, digits, '-', '_' or '.'; fix it"
            )


def _key(key: str, path: str, found: Findings) -> None:
    if key.lower().startswith(OPERATOR_PREFIX):
        found.error(
            path,
            f"keys under {OPERATOR_PREFIX} are the operator's cell identity; use another prefix",
        )
        return
    prefix = key.rpartition("/")[0]
    if not QUALIFIED_NAME.fullmatch(key) or len(prefix) > MAX_PREFIX:
        found.error(
            path,
            "must be a qualified name: an optional DNS subdomain prefix and '/', "
            "then at most 63 letters, digits, '-', '_' or '.'; fix the key",
        )
