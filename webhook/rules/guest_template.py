"""The guestTemplate contract: top-level keys, required references, OS, and strict mode.

Why this module exists: ``spec.cell.guestTemplate`` is copied verbatim into a SwiftGuest whose
launcher pod is privileged, so this check is a security control, not a convenience. It keeps
the original operator's contract (reference §5 rule 5: operator-owned and denied keys,
required guestClassRef/imageRef, no windows, a JSON object; ClusterAPI allows only imageRef,
guestClassRef and interfaces) and closes what a top-level denylist misses: keys spelled in
another case (Go decodes JSON keys case-insensitively), dangerous fields nested in interfaces,
data disks and network (``guest_nested``), and, in strict mode, anything not on the known-safe
allowlist. It runs on the raw dict, independent of whether the rest of the spec parsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.rules import guest_fields as gf
from webhook.rules.guest_nested import check_data_disks, check_interfaces, check_network, deep_scan
from webhook.rules.paths import join, type_name
from webhook.rules.settings import RuleSettings
from webhook.rules.verdict import Findings

BASE = "spec.cell.guestTemplate"


@dataclass(frozen=True, slots=True)
class GuestContext:
    """What the guestTemplate checks need to know besides the template itself."""

    namespace: str
    settings: RuleSettings
    cluster_api: bool
    base: str = BASE


def check_guest_template(template: Any, ctx: GuestContext, found: Findings) -> None:
    """Every guestTemplate rule; problems land in ``found`` under ``ctx.base``."""
    if not isinstance(template, Mapping):
        found.error(
            ctx.base, f"must be a JSON object (a SwiftGuestSpec), not {type_name(template)}"
        )
        return
    _check_top_level(template, ctx, found)
    _check_required(template, ctx, found)
    _check_os_type(template, ctx, found)
    check_interfaces(template.get("interfaces"), ctx.base, ctx.namespace, ctx.settings, found)
    check_data_disks(template, ctx.base, ctx.settings, found)
    check_network(template.get("network"), ctx.base, found)
    deep_scan(template, ctx.base, found)
    if ctx.settings.strict_guest_template:
        check_allowlist(template, gf.SAFE_SCHEMA, ctx.base, found)


def _check_top_level(template: Mapping[str, Any], ctx: GuestContext, found: Findings) -> None:
    for raw_key in template:
        key = str(raw_key)
        path = join(ctx.base, key)
        canonical = gf.KNOWN_BY_FOLD.get(gf.fold(key))
        spelled = "" if canonical in (None, key) else f" (spelled {key!r}; KubeSwift reads it)"
        if canonical in gf.OPERATOR_OWNED:
            found.error(path, f"{canonical} {gf.OPERATOR_OWNED[canonical]}{spelled}")
        elif canonical in gf.DENIED:
            found.error(path, f"{canonical} {gf.DENIED[canonical]}{spelled}")
        elif canonical is not None and canonical != key:
            found.error(
                path,
                f"spell it exactly {canonical!r}: KubeSwift decodes keys "
                "case-insensitively, so a re-cased key slips past exact checks",
            )
        elif ctx.cluster_api and canonical not in gf.CLUSTER_API_ALLOWED:
            found.error(
                path,
                "is not allowed with provisioner ClusterAPI, which only carries "
                "imageRef, guestClassRef and interfaces; remove it",
            )
        elif canonical == "storage":
            _storage(template[raw_key], path, ctx, found)
        elif canonical in gf.DISCOURAGED:
            _discouraged(canonical, path, ctx, found)
        elif canonical is None:
            _unknown(key, path, ctx, found)


def _discouraged(key: str, path: str, ctx: GuestContext, found: Findings) -> None:
    if ctx.settings.strict_guest_template:
        found.error(path, f"{gf.DISCOURAGED[key]}; strict guestTemplate mode refuses it, remove it")
    else:
        found.warn(path, gf.DISCOURAGED[key])


def _storage(value: Any, path: str, ctx: GuestContext, found: Findings) -> None:
    """A root-disk override is admitted only onto a StorageClass the cluster admin allowlisted."""
    allowed = ctx.settings.allowed_storage_classes
    name = value.get("storageClassName") if isinstance(value, Mapping) else None
    if isinstance(name, str) and name in allowed:
        extra = sorted(str(k) for k in value if str(k) not in gf.STORAGE_KEYS)
        if extra:
            found.error(join(path, extra[0]), "is not a root-disk storage field; remove it")
        return
    if not allowed:
        why = "no StorageClass is allowlisted for it (cluster setting --allowed-storage-class)"
    elif not isinstance(name, str):
        why = f"it must name a storageClassName from the allowlist: {', '.join(sorted(allowed))}"
    else:
        why = (
            f"StorageClass {name!r} is not on the allowlist ({', '.join(sorted(allowed))}; "
            "cluster setting --allowed-storage-class)"
        )
    found.error(path, f"{gf.DISCOURAGED['storage']}; {why}; remove it or ask the cluster admin")


def _unknown(key: str, path: str, ctx: GuestContext, found: Findings) -> None:
    if ctx.settings.strict_guest_template:
        return  # the allowlist walk reports it
    folded = gf.fold(key)
    if (
        folded.startswith(gf.DENIED_KEY_PREFIXES)
        or folded in gf.DENIED_KEYS_EXACT
        or folded in gf.DEEP_DENIED
    ):
        return  # the deep scan refuses it
    found.warn(path, "is not a SwiftGuestSpec field; KubeSwift drops or rejects it, remove it")


def _check_required(template: Mapping[str, Any], ctx: GuestContext, found: Findings) -> None:
    for key in ("guestClassRef", "imageRef"):
        path = join(ctx.base, key)
        value = template.get(key)
        if value is None:
            if not any(str(k) != key and gf.fold(str(k)) == gf.fold(key) for k in template):
                found.error(path, f"is required; set {key}: {{name: ...}}")
            continue
        name = value.get("name") if isinstance(value, Mapping) else None
        if not isinstance(name, str) or not name:
            found.error(path, f"must be an object with a non-empty name; set {key}: {{name: ...}}")


def _check_os_type(template: Mapping[str, Any], ctx: GuestContext, found: Findings) -> None:
    if "osType" not in template:
        return
    path = join(ctx.base, "osType")
    value = template["osType"]
    if not isinstance(value, str):
        found.error(path, f"must be a string (got {type_name(value)}); use linux or omit it")
    elif gf.fold(value) == "WINDOWS":
        found.error(path, "windows guests cannot have a GPU in KubeSwift; use linux or omit it")
    elif value != "linux":
        found.error(path, "must be linux; use linux or omit it")


def check_allowlist(node: Any, schema: gf.Schema, path: str, found: Findings) -> None:
    """Strict mode: every key must be on the known-safe allowlist (``SAFE_SCHEMA``)."""
    if found.covers(path):
        return
    if isinstance(schema, dict):
        if not isinstance(node, Mapping):
            found.error(path, f"must be an object (got {type_name(node)}); fix it")
            return
        for raw_key, value in node.items():
            key = str(raw_key)
            child = join(path, key)
            if key not in schema:
                if not found.covers(child):
                    found.error(
                        child,
                        "is not on the strict guestTemplate allowlist "
                        "(cluster setting); remove it or ask the cluster admin",
                    )
                continue
            check_allowlist(value, schema[key], child, found)
    elif isinstance(schema, list):
        if not isinstance(node, list):
            found.error(path, f"must be a list (got {type_name(node)}); fix it")
            return
        for i, item in enumerate(node):
            check_allowlist(item, schema[0], join(path, i), found)
    elif isinstance(node, Mapping | list):
        found.error(path, f"must be a plain value (got {type_name(node)}); fix it")
