"""The join template renderer: the user's cloud-init in, one cell's bootstrap objects out.

Why this module exists: a cell joins the workload cluster by running the cloud-init the user
put in the join Secret. The template language is deliberately tiny - a CLOSED set of five
tokens (reference §2.3) - so a typo can never silently ship a half-rendered join script:

* ``{{ cellName }}``        the cell name, ``<pool>-<index>``
* ``{{ poolName }}``        the pool name
* ``{{ nodeLabels }}``      sorted ``k=v,k=v`` of the user's node labels plus the identity
                             labels (pool, pool-id, cell, cell-index)
* ``{{ nodeIPInterface }}`` the KubeSwift interface name named by ``cell.nodeIPFrom``
* ``{{ expectedGPUs }}``    devices HAMi must advertise on the Node

Spaces or tabs inside the braces are optional (``{{cellName}}``, ``{{  cellName }}``). Any other
``{{ ... }}`` is an error value naming the token (and its line), never a silent pass-through;
the pool gets a clear condition and no cell is created. Errors never quote the template: it
holds join credentials. The outputs are plain manifest dicts (no client): the
``<cell>-bootstrap`` Secret (same bytes under ``user-data`` for KubeSwift and ``value`` for the
Cluster API ``dataSecretName`` contract) and the ``<cell>-seed`` SwiftSeedProfile.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from provisioner.fsm.identity import (
    PoolIdentity,
    bootstrap_secret_name,
    cell_name,
    seed_profile_name,
)

TOKENS = frozenset({"cellName", "poolName", "nodeLabels", "nodeIPInterface", "expectedGPUs"})
SECRET_KEYS = ("user-data", "value")
SEED_API_VERSION = "seed.kubeswift.io/v1alpha1"
_ANY_TOKEN = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_IDENTIFIER = re.compile(r"[ \t]*([A-Za-z_][A-Za-z0-9_]{0,63})[ \t]*")


@dataclass(frozen=True, slots=True)
class RenderError:
    """Why a template cannot be rendered. Never contains template content beyond a token name.

    ``code``: ``UnknownToken`` | ``MalformedToken`` | ``TemplateNotText`` | ``TemplateMissing``.
    """

    code: str
    message: str
    token: str = ""
    line: int = 0


@dataclass(frozen=True, slots=True)
class RenderInputs:
    """Everything a template may mention about one cell."""

    pool: PoolIdentity
    index: int
    node_labels: Mapping[str, str]
    node_ip_interface: str = ""
    expected_gpus: int = 1


def node_labels_value(pool: PoolIdentity, index: int, user_labels: Mapping[str, str]) -> str:
    """Sorted ``k=v,...`` of the user's labels plus identity labels (identity wins on clash)."""
    labels = {**dict(user_labels), **pool.cell_labels(index)}
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))


def token_values(inputs: RenderInputs) -> dict[str, str]:
    return {
        "cellName": cell_name(inputs.pool.name, inputs.index),
        "poolName": inputs.pool.name,
        "nodeLabels": node_labels_value(inputs.pool, inputs.index, inputs.node_labels),
        "nodeIPInterface": inputs.node_ip_interface,
        "expectedGPUs": str(inputs.expected_gpus),
    }


def find_template_errors(template: str) -> RenderError | None:
    """The first token outside the closed set, or None. Useful to validate before any cell."""
    for match in _ANY_TOKEN.finditer(template):
        line = template.count("\n", 0, match.start()) + 1
        ident = _IDENTIFIER.fullmatch(match.group(1))
        if ident is None:
            return RenderError(
                "MalformedToken", f"malformed template token at line {line}", line=line
            )
        name = ident.group(1)
        if name not in TOKENS:
            allowed = ", ".join(sorted(TOKENS))
            msg = f"unknown template token {{{{ {name} }}}} at line {line}; allowed: {allowed}"
            return RenderError("UnknownToken", msg, token=name, line=line)
    return None


def render_template(template: str, inputs: RenderInputs) -> str | RenderError:
    """Substitute the five tokens, or return the first error. No escaping mechanism exists."""
    error = find_template_errors(template)
    if error is not None:
        return error
    values = token_values(inputs)

    def substitute(match: re.Match[str]) -> str:
        ident = _IDENTIFIER.fullmatch(match.group(1))
        assert ident is not None  # checked by find_template_errors
        return values[ident.group(1)]

    return _ANY_TOKEN.sub(substitute, template)


def decode_template(raw: bytes | None, secret_name: str, key: str) -> str | RenderError:
    """Join Secret bytes -> text; errors name the Secret and key, never the content."""
    if raw is None:
        return RenderError("TemplateMissing", f"join Secret {secret_name} has no key {key!r}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return RenderError("TemplateNotText", f"join Secret {secret_name} key {key!r} is not UTF-8")


def bootstrap_secret(
    rendered: str, pool: PoolIdentity, index: int, owner_refs: list[dict[str, Any]]
) -> dict[str, Any]:
    """The ``<cell>-bootstrap`` Secret manifest; same bytes under ``user-data`` and ``value``."""
    name = cell_name(pool.name, index)
    encoded = base64.b64encode(rendered.encode("utf-8")).decode("ascii")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": bootstrap_secret_name(name),
            "namespace": pool.namespace,
            "labels": pool.cell_labels(index),
            "ownerReferences": owner_refs,
        },
        "data": dict.fromkeys(SECRET_KEYS, encoded),
    }


def seed_profile(
    pool: PoolIdentity, index: int, set_hostname: bool, owner_refs: list[dict[str, Any]]
) -> dict[str, Any]:
    """The ``<cell>-seed`` SwiftSeedProfile: NoCloud, user-data only by Secret reference.

    ``userData`` is "" because the CRD requires it; the join credentials stay in the Secret
    (never inline, where anyone allowed to read SwiftSeedProfiles would see them).
    """
    name = cell_name(pool.name, index)
    spec: dict[str, Any] = {
        "datasource": "NoCloud",
        "userData": "",
        "userDataFrom": {"secretKeyRef": {"name": bootstrap_secret_name(name), "key": "user-data"}},
    }
    if set_hostname:
        spec["metaData"] = f"instance-id: {name}\nlocal-hostname: {name}\n"
    return {
        "apiVersion": SEED_API_VERSION,
        "kind": "SwiftSeedProfile",
        "metadata": {
            "name": seed_profile_name(name),
            "namespace": pool.namespace,
            "labels": pool.cell_labels(index),
            "ownerReferences": owner_refs,
        },
        "spec": spec,
    }
