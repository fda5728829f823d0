"""A trace replayed against a pool in HAMi's DRA mode: every ask goes through a ResourceClaim.

Why this module exists: the engine is mode-agnostic (it packs ``GPUAsk`` values), but in DRA
mode the live operator never sees a pod's ``nvidia.com/*`` resources: it reads the claim HAMi's
webhook made (hami-facts §5) through ``autoscaler.policy.hami_dra.claim_asks``. To replay the
same demand as a DRA pool sees it, each trace pod's ask is rendered as that claim
(``webhook_claim``) and read back through the same reader. What the claim cannot say is lost as
it is live: a memory percentage becomes MiB of the declared card (the webhook converts
``gpumem`` MiB to bytes; a whole-card ask leaves memory to the device's default), and the
``slots`` HAMi counts are one per claimed device.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from autoscaler.policy.hami_dra import DEVICE_CLASS, DEVICE_TYPE, DRIVER, claim_asks
from autoscaler.policy.types import GPUAsk
from simulations.simulator.traces.model import TracePod

MODES = ("DevicePlugin", "DRA")


def webhook_claim(
    ask: GPUAsk, card_memory_mib: int, namespace: str = "default", name: str = "claim"
) -> dict[str, Any]:
    """The ResourceClaim HAMi-DRA's webhook creates for one container asking ``ask``."""
    memory_mib = ask.memory_mib
    if memory_mib is None and ask.memory_percent is not None and ask.memory_percent < 100:
        memory_mib = card_memory_mib * max(ask.memory_percent, 0) // 100
    requests = {"cores": str(ask.cores_percent)}
    if memory_mib is not None:
        requests["memory"] = f"{memory_mib}Mi"
    selector = f'device.attributes["{DRIVER}"].type == "{DEVICE_TYPE}"'
    exactly = {
        "deviceClassName": DEVICE_CLASS,
        "allocationMode": "ExactCount",
        "count": ask.gpu_count,
        "selectors": [{"cel": {"expression": selector}}],
        "capacity": {"requests": requests},
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def claim_ask(ask: GPUAsk, card_memory_mib: int) -> GPUAsk:
    """``ask`` as a DRA pool reads it: rendered as the webhook's claim, read back."""
    read = claim_asks(webhook_claim(ask, card_memory_mib), DEVICE_CLASS)
    if not isinstance(read, tuple) or len(read) != 1:
        raise ValueError(f"the webhook's claim for {ask} does not read back as one request")
    return GPUAsk(read[0].count, read[0].memory_mib, None, read[0].cores)


def in_mode(pods: Iterable[TracePod], mode: str, card_memory_mib: int) -> tuple[TracePod, ...]:
    """The trace as a pool in ``mode`` sees its asks (DevicePlugin: unchanged)."""
    if mode == "DevicePlugin":
        return tuple(pods)
    if mode != "DRA":
        raise ValueError(f"unknown HAMi mode {mode!r}; one of {', '.join(MODES)}")
    memo: dict[GPUAsk, GPUAsk] = {}
    out = []
    for pod in pods:
        if pod.ask not in memo:
            memo[pod.ask] = claim_ask(pod.ask, card_memory_mib)
        out.append(replace(pod, ask=memo[pod.ask]))
    return tuple(out)
