"""One look at the cluster before ``gpucellpool run`` starts its loops.

Why this module exists: once running, every watch and the leader election retry forever, which
is right for an apiserver that blinks but wrong for a newcomer's mistake: an apiserver that is
not there at all, a cluster without the GPUCellPool CRD, or an identity without RBAC would
fill the log with warnings and never say so plainly. At start-up these are certain mistakes,
so each becomes one ``UserError`` line naming what is missing and how to add it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from gpucellpool.kube.errors import (
    HTTP_FORBIDDEN,
    HTTP_NOT_FOUND,
    HTTP_UNAUTHORIZED,
    KubeError,
    Unreachable,
)
from gpucellpool.kube.rest import RestClient
from gpucellpool.runtime.errors import UserError

POOLS_PATH = "/apis/cells.kubeswift.io/v1alpha1/gpucellpools"
"""``gpucellpool.operator.adapters.POOLS_PATH``, spelled out: that module loads the API models."""


def pool_paths(namespaces: Sequence[str]) -> list[str]:
    """The GPUCellPool collections the operator will watch (all namespaces when none given)."""
    head, _, plural = POOLS_PATH.rpartition("/")
    unique = dict.fromkeys(ns for ns in namespaces if ns)
    return [f"{head}/namespaces/{ns}/{plural}" for ns in unique] or [POOLS_PATH]


def lease_path(namespace: str, name: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"


CRD_HINT = "install it: kubectl apply -f crds/cells.kubeswift.io_gpucellpools.yaml (or the chart)"


# The closing quote is optional: KubeError keeps only the body's first 300 characters.
_MESSAGE = re.compile(r'"message":\s*"((?:[^"\\]|\\.)*)"?')


def _status_message(error: KubeError) -> str | None:
    """The apiserver's own ``Status.message`` when the error's body carries one."""
    text = str(error)
    if ": b'" in text:  # a bytes body's repr doubles the JSON escapes
        text = text.replace("\\\\", "\\")
    found = _MESSAGE.search(text)
    if found is None:  # the door's own form: "VERB path: HTTP nnn: the Status.message"
        return text.partition(f"HTTP {error.status}: ")[2] or None
    try:
        return str(json.loads(f'"{found.group(1)}"'))
    except ValueError:
        return found.group(1)


def explain(error: KubeError, what: str) -> str:
    """One line for an HTTP error met while reading ``what`` at start-up."""
    message = _status_message(error)
    if error.status == HTTP_UNAUTHORIZED:
        return f"the apiserver refused the credentials (401) while reading {what}"
    if error.status == HTTP_FORBIDDEN:
        return f"forbidden: {message or error} (grant it with RBAC, e.g. the chart's roles)"
    if message is None:
        return f"reading {what}: {error}"
    return f"reading {what}: HTTP {error.status}: {message}"


async def check_cluster(
    client: RestClient, pool_paths: Sequence[str], lease_path: str, server: str
) -> None:
    """Raise ``UserError`` unless the pools can be listed and the Lease read (or absent)."""
    try:
        for path in pool_paths:
            try:
                await client.call("GET", path, [("limit", "1")])
            except Unreachable:
                raise
            except KubeError as exc:
                if exc.status == HTTP_NOT_FOUND:
                    raise UserError(
                        f"the GPUCellPool CRD is not installed on {server}; {CRD_HINT}"
                    ) from exc
                raise UserError(explain(exc, "GPUCellPools")) from exc
        try:
            await client.get(lease_path)
        except Unreachable:
            raise
        except KubeError as exc:
            raise UserError(explain(exc, "the leader-election Lease")) from exc
    except (TimeoutError, OSError, Unreachable) as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise UserError(f"cannot reach the apiserver at {server}: {detail}") from exc
