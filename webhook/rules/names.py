"""Rules on the pool's name: a DNS-1123 subdomain short enough for its cells' names.

Why this module exists: every cell is named ``<pool>-<index>`` and that name becomes a
SwiftGuest, a Machine, a guest hostname and a workload Node name. With up to five index digits
the pool name must stay at or below 57 characters for the cell name to fit a 63-character DNS
label (reference §1.5, rule 1).
"""

from __future__ import annotations

import re
from typing import Any

from gpucellpool.api.pool import MAX_POOL_NAME
from webhook.rules.paths import get
from webhook.rules.verdict import Findings

GENERATED_SUFFIX = 5  # the apiserver appends 5 random characters to metadata.generateName
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9.]*)?$")


def check_name(obj: Any, found: Findings) -> None:
    """metadata.name (or metadata.generateName when the name is still to be generated)."""
    metadata = get(obj, "metadata")
    if not isinstance(metadata, dict):
        found.error("metadata", "must be an object with a name; set metadata.name")
        return
    name = metadata.get("name")
    if name in (None, ""):
        _check_generate_name(metadata.get("generateName"), found)
        return
    if not isinstance(name, str):
        found.error("metadata.name", "must be a string; quote the name")
        return
    if len(name) > MAX_POOL_NAME:
        found.error(
            "metadata.name",
            f"is {len(name)} characters; use at most {MAX_POOL_NAME} so that cell names "
            "<pool>-<index> stay valid 63-character DNS labels",
        )
    if not DNS1123_SUBDOMAIN.fullmatch(name):
        found.error(
            "metadata.name",
            "must be a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit; rename the pool",
        )


def _check_generate_name(prefix: Any, found: Findings) -> None:
    if prefix in (None, ""):
        found.error("metadata.name", "is required; name the pool")
        return
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        found.error(
            "metadata.generateName",
            "must be a DNS-1123 subdomain prefix (lower-case letters, digits, '-', '.'); fix it",
        )
        return
    if len(prefix) + GENERATED_SUFFIX > MAX_POOL_NAME:
        found.error(
            "metadata.generateName",
            f"is too long: with the 5 generated characters the pool name must stay at most "
            f"{MAX_POOL_NAME} characters; use at most {MAX_POOL_NAME - GENERATED_SUFFIX}",
        )
