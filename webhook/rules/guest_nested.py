"""The dangerous guestTemplate fields that sit below the top level, and the deep scan.

Why this module exists: a top-level denylist (the original operator's) lets through the worst
KubeSwift fields because they are nested: an interface of type vhost-user or sriov, a network
attachment in another namespace, a data disk backed by an existing PVC, a port exposed through
a NodePort or LoadBalancer Service (kubeswift-facts §5). This module checks those places by
shape, then scans the whole tree for keys that have no business anywhere in a guestTemplate
(hostPath, seed and Secret references, operator-owned fields hidden in lists, KubeSwift control
annotations) and for field names spelled in another case, which Go's JSON decoding would accept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from webhook.rules import guest_fields as gf
from webhook.rules.paths import join, type_name
from webhook.rules.settings import RuleSettings
from webhook.rules.verdict import Findings

MAC = re.compile(r"^([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}$")
INTERFACE_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
"""No quotes, spaces, slashes or newlines: the name reaches the Multus annotation and, through
nodeIPFrom, the rendered cloud-init template."""
OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
"""A NAD name: a DNS-1123 subdomain, so no ``namespace/name`` or ``name@ifname`` smuggling."""
MAX_DATA_DISKS = 8
MAX_NODES = 10000
"""A guestTemplate with more values than this is refused rather than partly checked."""


def check_interfaces(
    value: Any, base: str, namespace: str, settings: RuleSettings, found: Findings
) -> None:
    """interfaces[]: named, unique, bridge only (unless a vetted SR-IOV resource), own NADs."""
    if value is None:
        return
    path = join(base, "interfaces")
    if not isinstance(value, list):
        found.error(path, f"must be a list of interfaces (got {type_name(value)}); fix it")
        return
    seen: set[str] = set()
    primaries = 0
    for i, item in enumerate(value):
        item_path = join(path, i)
        if not isinstance(item, Mapping):
            found.error(item_path, f"must be an object (got {type_name(item)}); fix it")
            continue
        name = item.get("name")
        if not isinstance(name, str) or not name:
            found.error(join(item_path, "name"), "is required; name the interface")
        elif not INTERFACE_NAME.fullmatch(name):
            found.error(
                join(item_path, "name"),
                "must be letters, digits, '-', '_' or '.' (at "
                "most 63, no spaces, quotes or slashes); rename the interface",
            )
        elif name in seen:
            found.error(join(item_path, "name"), f"duplicates interface {name!r}; rename one")
        else:
            seen.add(name)
        primaries += item.get("primary") is True
        _interface_type(item, item_path, settings, found)
        _network_ref(item.get("networkRef"), join(item_path, "networkRef"), namespace, found)
        mac = item.get("mac")
        if mac is not None and (not isinstance(mac, str) or not MAC.fullmatch(mac)):
            found.error(join(item_path, "mac"), "must be a MAC like 02:00:00:00:00:01; fix it")
    if primaries > 1:
        found.error(path, "at most one interface may set primary: true; keep one")


def _interface_type(
    item: Mapping[str, Any], path: str, settings: RuleSettings, f: Findings
) -> None:
    kind = item.get("type")
    resource = item.get("resourceName")
    type_path = join(path, "type")
    if kind is None or kind == "bridge":
        pass
    elif not isinstance(kind, str):
        f.error(type_path, f"must be a string (got {type_name(kind)}); use bridge or omit it")
    elif gf.fold(kind) == "SRIOV":
        allowed = isinstance(resource, str) and resource in settings.allowed_sriov_resources
        if kind != "sriov" or not allowed:
            f.error(
                type_path,
                "sriov requests an extended resource and mounts /dev/vfio into the "
                "privileged launcher pod; only resources the cluster admin allowed "
                "(allowedSriovResources) may be used; use bridge",
            )
        return
    elif gf.fold(kind).replace("-", "").replace("_", "") == "VHOSTUSER":
        f.error(
            type_path,
            "vhost-user hostPath-mounts a socket directory into the privileged "
            "launcher pod; use bridge",
        )
    else:
        f.error(type_path, "must be bridge (sriov and vhost-user are not allowed); use bridge")
    if resource is not None:
        f.error(join(path, "resourceName"), "is only meaningful for sriov interfaces; remove it")


def _network_ref(ref: Any, path: str, namespace: str, found: Findings) -> None:
    if ref is None:
        return
    if not isinstance(ref, Mapping):
        found.error(path, f"must be an object {{name: ...}} (got {type_name(ref)}); fix it")
        return
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        found.error(join(path, "name"), "is required; name the NetworkAttachmentDefinition")
    elif not OBJECT_NAME.fullmatch(name):
        found.error(
            join(path, "name"),
            "must be a plain object name (a DNS-1123 subdomain, no "
            "'/' or '@'); name a NetworkAttachmentDefinition in the pool's namespace",
        )
    other = ref.get("namespace")
    if other not in (None, "") and other != namespace:
        where = f"the pool's namespace {namespace!r}" if namespace else "the pool's namespace"
        found.error(
            join(path, "namespace"),
            "attaches the privileged launcher pod to another "
            f"namespace's network; omit it or set it to {where}",
        )
    if "kind" in ref:
        found.error(
            join(path, "kind"),
            "networkRef has no kind field (KubeSwift's strict decoding rejects it); remove it",
        )


def check_data_disks(template: Mapping[str, Any], base: str, s: RuleSettings, f: Findings) -> None:
    """dataDiskRef / dataDiskRefs[]: image-backed disks only (no PVCs, blank only if allowed)."""
    single = template.get("dataDiskRef")
    if single is not None and not (isinstance(single, Mapping) and single.get("name")):
        f.error(join(base, "dataDiskRef"), "must be an object with a name (a SwiftImage); fix it")
    disks = template.get("dataDiskRefs")
    if disks is None:
        return
    path = join(base, "dataDiskRefs")
    if not isinstance(disks, list):
        f.error(path, f"must be a list (got {type_name(disks)}); fix it")
        return
    if len(disks) > MAX_DATA_DISKS:
        f.error(path, f"has {len(disks)} disks; use at most {MAX_DATA_DISKS}")
    for i, disk in enumerate(disks):
        _data_disk(disk, join(path, i), s, f)


def _data_disk(disk: Any, path: str, settings: RuleSettings, found: Findings) -> None:
    if not isinstance(disk, Mapping):
        found.error(path, f"must be an object (got {type_name(disk)}); fix it")
        return
    if not isinstance(disk.get("name"), str) or not disk.get("name"):
        found.error(join(path, "name"), "is required; name the disk")
    sources = [k for k in ("imageRef", "pvcRef", "blank") if k in disk]
    if len(sources) != 1:
        found.error(path, "needs exactly one of imageRef, pvcRef or blank; use imageRef")
    if "blank" in disk and not settings.allow_blank_data_disks:
        found.error(
            join(path, "blank"),
            "creates a PVC of any size and StorageClass; use an "
            "image-backed disk (imageRef) or ask the cluster admin",
        )


def check_network(network: Any, base: str, found: Findings) -> None:
    """network: NAT or bridge binding, ports only inside the pod or as a ClusterIP Service."""
    if network is None:
        return
    path = join(base, "network")
    if not isinstance(network, Mapping):
        found.error(path, f"must be an object (got {type_name(network)}); fix it")
        return
    binding = network.get("binding")
    if binding is not None and binding not in ("nat", "bridge"):
        found.error(join(path, "binding"), "must be nat or bridge; fix it")
    for key in ("serviceAnnotations", "loadBalancerClass"):
        if network.get(key) not in (None, "", {}):
            found.error(
                join(path, key),
                "exposes the guest outside the cluster (load balancers, external DNS); remove it",
            )
    ports = network.get("ports")
    if ports is None:
        return
    if not isinstance(ports, list):
        found.error(join(path, "ports"), f"must be a list (got {type_name(ports)}); fix it")
        return
    for i, port in enumerate(ports):
        expose = port.get("expose") if isinstance(port, Mapping) else None
        expose_path = join(join(join(path, "ports"), i), "expose")
        if expose in (None, ""):
            continue
        if expose == "ClusterIP":
            found.warn(
                expose_path,
                "creates a ClusterIP Service selecting the guest; remove "
                "it if in-cluster access is not needed",
            )
        else:
            found.error(
                expose_path,
                "exposes the guest outside the cluster (NodePort or "
                "LoadBalancer); remove expose or use ClusterIP",
            )


def deep_scan(template: Mapping[str, Any], base: str, found: Findings) -> None:
    """Refuse forbidden keys at any depth, control annotations, and re-cased field names."""
    stack: list[tuple[str, Any, int, bool]] = [(base, template, 0, False)]
    visited = 0
    while stack:
        path, node, depth, in_map = stack.pop()
        visited += 1
        if visited > MAX_NODES:
            found.error(base, f"is too large to check (over {MAX_NODES} values); simplify it")
            return
        if isinstance(node, list):
            stack.extend((join(path, i), v, depth, in_map) for i, v in enumerate(node))
        elif isinstance(node, Mapping):
            for raw_key, value in node.items():
                key = str(raw_key)
                child = join(path, key)
                if found.covers(child) or _refused(key, child, depth, in_map, found):
                    continue
                map_child = gf.fold(key) in gf.MAP_FIELDS
                stack.append((child, value, depth + 1, map_child))


def _refused(key: str, path: str, depth: int, in_map: bool, found: Findings) -> bool:
    folded = gf.fold(key)
    if folded.startswith(gf.DENIED_KEY_PREFIXES) or folded in gf.DENIED_KEYS_EXACT:
        found.error(path, gf.ANNOTATION_REASON)
        return True
    if in_map:
        return False
    if folded in gf.DEEP_DENIED and (depth > 0 or folded not in gf.KNOWN_BY_FOLD):
        found.error(path, f"{key} {gf.DEEP_DENIED[folded]}")
        return True
    canonical = gf.NESTED_BY_FOLD.get(folded)
    if depth > 0 and canonical is not None and canonical != key:
        found.error(
            path,
            f"spell it exactly {canonical!r}: KubeSwift decodes keys "
            "case-insensitively, so a re-cased key slips past exact checks",
        )
        return True
    return False
