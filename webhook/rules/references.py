"""The Secrets a pool makes the operator read, for the server's access check.

Why this module exists: the operator reads every Secret a pool names with its own privileges.
The join template ends up inside a VM the pool author controls, and the Prometheus token is
sent to a URL the pool author chooses. Without a check, anyone allowed to write pools could
read any Secret in the namespace through the operator (a confused deputy). The rules cannot
see RBAC, so this pure function lists the references, and the server asks the apiserver
(SubjectAccessReview) whether the requesting user may ``get`` each of them, denying when not.
"""

from __future__ import annotations

from typing import Any

from webhook.rules.paths import get

SECRET_REFERENCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("spec.bootstrap.joinSecretRef.name", ("spec", "bootstrap", "joinSecretRef", "name")),
    (
        "spec.workloadCluster.kubeconfigSecretRef.name",
        ("spec", "workloadCluster", "kubeconfigSecretRef", "name"),
    ),
    (
        "spec.autoscaling.prometheus.authSecretRef.name",
        ("spec", "autoscaling", "prometheus", "authSecretRef", "name"),
    ),
    (
        "spec.autoscaling.prometheus.tlsSecretRef.name",
        ("spec", "autoscaling", "prometheus", "tlsSecretRef", "name"),
    ),
)


def referenced_secrets(obj: Any) -> tuple[tuple[str, str], ...]:
    """(field path, Secret name) for every Secret the pool names, in the pool's namespace."""
    found = []
    for path, keys in SECRET_REFERENCES:
        name = get(obj, *keys)
        if isinstance(name, str) and name:
            found.append((path, name))
    return tuple(found)


def new_secret_references(old: Any, new: Any) -> tuple[tuple[str, str], ...]:
    """The references of ``new`` that ``old`` did not already have (checked on update)."""
    before = set(referenced_secrets(old))
    return tuple(ref for ref in referenced_secrets(new) if ref not in before)
