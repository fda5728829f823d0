"""The vocabulary of the guestTemplate contract: which SwiftGuestSpec keys are what, and why.

Why this module exists: a cell's guestTemplate is copied verbatim into a SwiftGuest, and every
SwiftGuest runs in a privileged launcher pod (kubeswift-facts §5). Which keys are operator-owned,
which are denied because they reach the host, which are merely discouraged, and which form the
known-safe allowlist is a security decision; keeping the whole table (with the reason each
message gives) in one place makes it reviewable next to docs/security.md.
"""

from __future__ import annotations

from typing import Union

_SPECIAL_LOWER = {"\u0130": "i"}  # Go's simple lower-case of U+0130 (Python's is two chars)


def fold(text: str) -> str:
    """Fold a key the way Go's encoding/json matches field names: upper(lower(rune)).

    So U+017F (long s) and s, U+212A (Kelvin sign) and k, U+0131 (dotless i) and i all fold
    alike: a key that Go would decode into a field is recognised however it is spelled.
    """
    out = []
    for char in text:
        if char.isascii():
            out.append(char.upper())
            continue
        lower = char.lower()
        lower = lower if len(lower) == 1 else _SPECIAL_LOWER.get(char, char)
        upper = lower.upper()
        out.append(upper if len(upper) == 1 else lower)
    return "".join(out)


OPERATOR_OWNED: dict[str, str] = {
    "seedProfileRef": "is operator-owned: the operator renders each cell's cloud-init seed "
    "itself (a user seed profile can pull any Secret or ConfigMap of the namespace into the VM); "
    "remove it and put the join template in spec.bootstrap.joinSecretRef",
    "gpuProfileRef": "is operator-owned; remove it and set spec.cell.gpu.native.gpuProfileRef",
    "gpuResourceClaim": "is operator-owned; remove it and set spec.cell.gpu.dra",
    "nodeName": "is operator-owned: it binds the privileged launcher pod to a node past the "
    "scheduler; remove it (spec.cell.spreadPolicy controls placement)",
    "schedulerName": "is operator-owned: another scheduler could place the privileged launcher "
    "pod on any node; remove it",
    "migration": "is operator-owned: a VFIO GPU guest cannot migrate; remove it",
    "runPolicy": "is operator-owned (the operator sets runPolicy: Always); remove it",
}

DENIED: dict[str, str] = {
    "kernelRef": "is not allowed: cells boot from a disk image; remove it and use imageRef",
    "kernelCmdline": "is not allowed: cells boot from a disk image; remove it",
    "cloneFromSnapshot": "is not allowed: it boots another VM's captured memory and VFIO GPU "
    "state cannot be restored; remove it and use imageRef",
    "vhostUserDevices": "is not allowed: it hostPath-mounts a socket directory into the "
    "privileged launcher pod; remove it",
    "filesystems": "is not allowed: virtiofs shares can mount any node directory (hostPath) "
    "into the privileged launcher pod, and KubeSwift rejects them with a GPU; remove it",
}

DISCOURAGED: dict[str, str] = {
    "topologySpreadConstraints": "is ignored by KubeSwift on the GPU path; use "
    "spec.cell.spreadPolicy instead",
    "storage": "overrides the root disk's StorageClass and access mode (cost and placement); "
    "prefer the guest class defaults",
}

STORAGE_KEYS: frozenset[str] = frozenset({"storageClassName", "accessMode", "volumeMode"})
"""What a root-disk ``storage`` override may carry once its StorageClass is allowlisted."""

ALLOWED: frozenset[str] = frozenset(
    {
        "guestClassRef",
        "imageRef",
        "dataDiskRef",
        "dataDiskRefs",
        "interfaces",
        "network",
        "osType",
        "guestAgent",
    }
)

KNOWN: frozenset[str] = (
    ALLOWED | frozenset(OPERATOR_OWNED) | frozenset(DENIED) | frozenset(DISCOURAGED)
)
KNOWN_BY_FOLD: dict[str, str] = {fold(k): k for k in KNOWN}
"""Go's encoding/json matches keys case-insensitively (with Unicode folding), so lookups fold."""

CLUSTER_API_ALLOWED: frozenset[str] = frozenset({"imageRef", "guestClassRef", "interfaces"})
"""Under ClusterAPI the KubeSwiftMachine carries only these (reference §5 rule 2)."""

_HOST = "reaches the host from the privileged launcher pod"
_DEEP_DENIED: dict[str, str] = {
    **OPERATOR_OWNED,
    **DENIED,
    "hostpath": f"is not allowed anywhere in a guestTemplate: it {_HOST}; remove it",
    "socket": "is not allowed: vhost-user sockets are hostPath-mounted into the privileged "
    "launcher pod; remove it",
    "pvcref": "is not allowed: it mounts an existing PVC into the privileged launcher pod; "
    "remove it (use an image-backed data disk)",
    "attachasdisk": "is not allowed: it attaches a PVC as a raw disk; remove it",
    "snapshotref": "is not allowed: snapshot clones boot another VM's memory; remove it",
    "targetnode": "is not allowed: it pins a snapshot clone to a node; remove it",
    "userdata": "is not allowed: cloud-init user-data comes only from spec.bootstrap; remove it",
    "userdatafrom": "is not allowed: cloud-init user-data comes only from spec.bootstrap; "
    "remove it",
    "metadatafrom": "is not allowed: seed data comes only from the operator; remove it",
    "networkdatafrom": "is not allowed: seed data comes only from the operator; remove it",
    "secretkeyref": "is not allowed: a guestTemplate may not reference Secrets; remove it",
    "configmapkeyref": "is not allowed: a guestTemplate may not reference ConfigMaps; remove it",
    "privileged": "is not allowed: there is no launcher-pod override; remove it",
    "securitycontext": "is not allowed: there is no launcher-pod override; remove it",
    "hostnetwork": "is not allowed: there is no launcher-pod override; remove it",
    "hostpid": "is not allowed: there is no launcher-pod override; remove it",
    "hostipc": "is not allowed: there is no launcher-pod override; remove it",
}
DEEP_DENIED: dict[str, str] = {fold(k): v for k, v in _DEEP_DENIED.items()}
"""Keys refused at any depth below the top level (folded), whatever object they sit in."""

DENIED_KEY_PREFIXES: tuple[str, ...] = (fold("snapshot.kubeswift.io/"),)
DENIED_KEYS_EXACT: frozenset[str] = frozenset(
    fold(k)
    for k in (
        "kubeswift.io/hypervisor-override",
        "kubeswift.io/drain-requested",
        "swift.kubeswift.io/pool",
    )
)
ANNOTATION_REASON = (
    "is a KubeSwift control annotation or label (restore mode mounts a node directory, "
    "hypervisor override, drain, pool selection); remove it"
)

Schema = Union[dict[str, "Schema"], list["Schema"], None]  # noqa: UP007 (recursive alias)
"""A known-safe shape: an object's allowed keys, a list's item shape, or None for a scalar."""

_REF: Schema = {"name": None}
SAFE_SCHEMA: dict[str, Schema] = {
    "guestClassRef": _REF,
    "imageRef": _REF,
    "osType": None,
    "guestAgent": {"enabled": None},
    "dataDiskRef": _REF,
    "dataDiskRefs": [{"name": None, "imageRef": _REF}],
    "interfaces": [
        {
            "name": None,
            "type": None,
            "networkRef": {"name": None, "namespace": None},
            "primary": None,
            "mac": None,
        }
    ],
    "network": {
        "binding": None,
        "ports": [{"name": None, "port": None, "targetPort": None, "protocol": None}],
    },
    "storage": dict.fromkeys(STORAGE_KEYS),
}
"""The strict-mode allowlist: only these keys, at these places, are admitted (``storage`` only
when its StorageClass is on the cluster's allowlist: the top-level check refuses it otherwise)."""

NESTED_KNOWN: frozenset[str] = frozenset(
    {
        "name",
        "namespace",
        "type",
        "networkRef",
        "primary",
        "mac",
        "resourceName",
        "imageRef",
        "blank",
        "size",
        "storageClassName",
        "volumeMode",
        "accessMode",
        "binding",
        "ports",
        "port",
        "targetPort",
        "protocol",
        "expose",
        "serviceAnnotations",
        "loadBalancerClass",
        "enabled",
        "preferredMode",
        "drainPolicy",
        "maxSkew",
        "topologyKey",
        "whenUnsatisfiable",
        "labelSelector",
    }
)
NESTED_BY_FOLD: dict[str, str] = {fold(k): k for k in NESTED_KNOWN}
"""Field names inside SwiftGuestSpec objects; a re-cased spelling is refused like at the top."""

MAP_FIELDS: frozenset[str] = frozenset(
    fold(k) for k in ("matchLabels", "serviceAnnotations", "annotations", "labels")
)
"""Folded names of fields whose keys are user data (label keys), not field names."""
