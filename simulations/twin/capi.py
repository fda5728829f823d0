"""Simulated Cluster API Machine controller + CAPKS (KubeSwiftMachine) controller.

Why this module exists: in ClusterAPI mode the operator creates only a Machine and a
KubeSwiftMachine; the SwiftGuest comes from CAPKS. This twin does what kubeswift-facts.md §6
describes, in the same order:

* Machine controller: takes the controller owner slot on the KubeSwiftMachine and on the
  bootstrap config (``spec.bootstrap.configRef``), whose ``status.dataSecretName`` it copies to
  ``spec.bootstrap.dataSecretName``; copies the KubeSwiftMachine's ``spec.providerID`` to
  ``Machine.spec.providerID``; phase ``Pending`` -> ``Provisioning`` (bootstrap data present)
  -> ``Provisioned`` (infrastructure ready) -> ``Running`` (``status.nodeRef`` = the workload
  Node whose ``spec.providerID`` equals the Machine's, found by providerID, not by name); a
  deleted Machine's KubeSwiftMachine and bootstrap config are deleted too;
* the kubeadm bootstrap provider (``capi_bootstrap``): KubeadmConfig -> data Secret;
* CAPKS: finalizer on the KubeSwiftMachine; once ``spec.bootstrap.dataSecretName`` is readable
  (key ``value``) creates SwiftSeedProfile ``<ksm>-seed`` (userData verbatim, instance-id and
  local-hostname = ksm name) and SwiftGuest ``<ksm>`` (image, class, seed, GPU, labels, no
  owner references); mirrors the guest into ``initialization.provisioned``, ``addresses``,
  ``Ready`` (``VMProvisioning`` / ``VMProvisioned`` / ``VMFailed``) and ``spec.providerID``,
  and patches that providerID onto the workload Node of the same name; on deletion deletes the
  guest, then the seed profile, then drops its finalizer.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from functools import partial
from typing import Any

from gpucellpool.api.clock import Clock
from provisioner.kube import JSON, KINDS, Kind, KubeApi, kind_of
from simulations.twin.capi_bootstrap import reconcile_configs
from simulations.twin.common import (
    PollingController,
    condition,
    each_bounded,
    raise_first,
    same_conditions,
)

KSM_FINALIZER = "kubeswiftmachine.infrastructure.cluster.x-k8s.io/finalizer"
KSM_LABEL = "infrastructure.cluster.x-k8s.io/kubeswiftmachine"
CLUSTER_LABEL = "cluster.x-k8s.io/cluster-name"
BOOTSTRAP_VERSION = "v1beta2"


def provider_id(namespace: str, name: str) -> str:
    return f"kubeswift://{namespace}/{name}"


def _config_ref(machine: JSON) -> tuple[Kind, str] | None:
    ref = ((machine.get("spec") or {}).get("bootstrap") or {}).get("configRef")
    if not ref:
        return None
    return kind_of(ref["kind"], f"{ref['apiGroup']}/{BOOTSTRAP_VERSION}"), str(ref["name"])


@dataclass
class SimulatedClusterAPI(PollingController):
    infra: KubeApi
    workload: KubeApi
    clock: Clock
    namespace: str
    poll_s: float = 0.1
    concurrency: int = 16

    async def step(self) -> None:
        """One pass: the bootstrap provider, then CAPKS over every KubeSwiftMachine, then the
        Machine controller over every Machine (in this order, so a pass carries a new cell as
        far as the sequence allows). Within each controller the objects are reconciled
        concurrently, as CAPI's workers do: a pass costs about one object's requests, not one
        object's times their number, and one object's failure does not hold up the others."""
        await reconcile_configs(self.infra, self.namespace)
        ksms = await self.infra.list(KINDS["KubeSwiftMachine"], self.namespace)
        errors = await each_bounded([partial(self._ksm, k) for k in ksms], self.concurrency)
        machines = await self.infra.list(KINDS["Machine"], self.namespace)
        passes = [partial(self._machine, m) for m in machines]
        raise_first([*errors, *await each_bounded(passes, self.concurrency)])

    # --- Machine controller -------------------------------------------------------------
    async def _machine(self, machine: JSON) -> None:
        meta, ns = machine["metadata"], self.namespace
        ksm_name = ((machine.get("spec") or {}).get("infrastructureRef") or {}).get(
            "name", meta["name"]
        )
        ksm = await self.infra.get(KINDS["KubeSwiftMachine"], ns, ksm_name)
        config_ref = _config_ref(machine)
        if meta.get("deletionTimestamp") is not None:
            if ksm is not None and ksm["metadata"].get("deletionTimestamp") is None:
                await self.infra.delete(KINDS["KubeSwiftMachine"], ns, ksm_name)
            if config_ref is not None:
                await self.infra.delete(config_ref[0], ns, config_ref[1])
            return
        if ksm is not None:
            await self._own(machine, ksm, KINDS["KubeSwiftMachine"])
        if config_ref is not None:
            machine = await self._bootstrap(machine, *config_ref)
        machine = await self._copy_provider_id(machine, ksm)
        await self._machine_status(machine, ksm)

    async def _bootstrap(self, machine: JSON, kind: Kind, name: str) -> JSON:
        """Own the bootstrap config; copy its data Secret's name into the Machine's spec."""
        config = await self.infra.get(kind, self.namespace, name)
        if config is None:
            return machine
        await self._own(machine, config, kind)
        secret = (config.get("status") or {}).get("dataSecretName")
        bootstrap = (machine.get("spec") or {}).get("bootstrap") or {}
        if not secret or bootstrap.get("dataSecretName") == secret:
            return machine
        patch = {"spec": {"bootstrap": {"dataSecretName": secret}}}
        return await self.infra.patch(
            KINDS["Machine"], self.namespace, machine["metadata"]["name"], patch
        )

    async def _copy_provider_id(self, machine: JSON, ksm: JSON | None) -> JSON:
        pid = ((ksm or {}).get("spec") or {}).get("providerID")
        if not pid or (machine.get("spec") or {}).get("providerID") == pid:
            return machine
        patch = {"spec": {"providerID": pid}}
        return await self.infra.patch(
            KINDS["Machine"], self.namespace, machine["metadata"]["name"], patch
        )

    async def _own(self, machine: JSON, obj: JSON, kind: Kind) -> None:
        owners: list[dict[str, Any]] = list(obj["metadata"].get("ownerReferences") or [])
        if any(o.get("controller") for o in owners):
            return
        m = machine["metadata"]
        owners.append(
            {
                "apiVersion": machine["apiVersion"],
                "kind": "Machine",
                "name": m["name"],
                "uid": m["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        )
        patch = {
            "metadata": {
                "resourceVersion": obj["metadata"]["resourceVersion"],
                "ownerReferences": owners,
            }
        }
        await self.infra.patch(kind, self.namespace, obj["metadata"]["name"], patch)

    async def _machine_status(self, machine: JSON, ksm: JSON | None) -> None:
        spec = machine.get("spec") or {}
        secret_name = (spec.get("bootstrap") or {}).get("dataSecretName")
        provisioned = bool(
            ((ksm or {}).get("status") or {}).get("initialization", {}).get("provisioned")
        )
        status: dict[str, Any] = {"phase": "Pending"}
        if secret_name:
            status["phase"] = "Provisioning"
        if provisioned:
            status["phase"] = "Provisioned"
            node = await self._node_by_provider_id(machine, spec.get("providerID"))
            if node is not None:
                status["phase"] = "Running"
                status["nodeRef"] = {"name": node["metadata"]["name"]}
        current = machine.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        m = machine["metadata"]
        await self.infra.patch(
            KINDS["Machine"], self.namespace, m["name"], {"status": status}, status=True
        )

    async def _node_by_provider_id(self, machine: JSON, pid: str | None) -> JSON | None:
        """The Node whose spec.providerID is the Machine's (CAPI indexes Nodes by providerID;
        the twin tries the Machine's name first, then every Node)."""
        if not pid:
            return None
        named = await self.workload.get(KINDS["Node"], None, machine["metadata"]["name"])
        if named is not None and (named.get("spec") or {}).get("providerID") == pid:
            return named
        nodes = await self.workload.list(KINDS["Node"])
        return next((n for n in nodes if (n.get("spec") or {}).get("providerID") == pid), None)

    # --- CAPKS ----------------------------------------------------------------------------
    async def _ksm(self, ksm: JSON) -> None:
        meta, ns = ksm["metadata"], self.namespace
        name = meta["name"]
        if meta.get("deletionTimestamp") is not None:
            await self._ksm_delete(ksm)
            return
        if KSM_FINALIZER not in (meta.get("finalizers") or []):
            patch = {
                "metadata": {
                    "resourceVersion": meta["resourceVersion"],
                    "finalizers": [*(meta.get("finalizers") or []), KSM_FINALIZER],
                }
            }
            ksm = await self.infra.patch(KINDS["KubeSwiftMachine"], ns, name, patch)
        machine = await self.infra.get(KINDS["Machine"], ns, name)
        data = await self._bootstrap_data(machine)
        if data is None:
            await self._ksm_status(ksm, False, "WaitingForBootstrapData", None)
            return
        guest = await self.infra.get(KINDS["SwiftGuest"], ns, name)
        if guest is None:
            await self._create_guest(ksm, data)
            await self._ksm_status(ksm, False, "VMProvisioning", None)
            return
        await self._mirror(ksm, guest)

    async def _bootstrap_data(self, machine: JSON | None) -> str | None:
        secret_name = (((machine or {}).get("spec") or {}).get("bootstrap") or {}).get(
            "dataSecretName"
        )
        if not secret_name:
            return None
        secret = await self.infra.get(KINDS["Secret"], self.namespace, secret_name)
        raw = ((secret or {}).get("data") or {}).get("value")
        return base64.b64decode(raw).decode() if raw else None

    async def _create_guest(self, ksm: JSON, user_data: str) -> None:
        ns, name = self.namespace, ksm["metadata"]["name"]
        backend = (((ksm.get("spec") or {}).get("backend") or {}).get("swiftGuest")) or {}
        labels = {KSM_LABEL: name}
        cluster = (ksm["metadata"].get("labels") or {}).get(CLUSTER_LABEL)
        if cluster:
            labels[CLUSTER_LABEL] = cluster
        seed = {
            "apiVersion": "seed.kubeswift.io/v1alpha1",
            "kind": "SwiftSeedProfile",
            "metadata": {"name": f"{name}-seed", "namespace": ns, "labels": labels},
            "spec": {
                "datasource": "NoCloud",
                "userData": user_data,
                "metaData": f"instance-id: {name}\nlocal-hostname: {name}\n",
            },
        }
        await self.infra.apply(seed)
        spec: dict[str, Any] = {
            "guestClassRef": {"name": backend.get("guestClassRef", "")},
            "imageRef": {"name": backend.get("imageRef", "")},
            "seedProfileRef": {"name": f"{name}-seed"},
            "runPolicy": "Always",
        }
        gpu = backend.get("gpu") or {}
        if "gpuProfileRef" in gpu:
            spec["gpuProfileRef"] = {"name": gpu["gpuProfileRef"]}
        elif gpu:
            spec["gpuResourceClaim"] = gpu
        guest = {
            "apiVersion": "swift.kubeswift.io/v1alpha1",
            "kind": "SwiftGuest",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": spec,
        }
        await self.infra.apply(guest)

    async def _mirror(self, ksm: JSON, guest: JSON) -> None:
        status = guest.get("status") or {}
        ip = (status.get("network") or {}).get("primaryIP")
        name = ksm["metadata"]["name"]
        if status.get("phase") == "Failed":
            await self._ksm_status(ksm, False, "VMFailed", None)
            return
        if status.get("phase") != "Running" or not ip:
            await self._ksm_status(ksm, False, "VMProvisioning", None)
            return
        pid = provider_id(self.namespace, name)
        if (ksm.get("spec") or {}).get("providerID") != pid:
            ksm = await self.infra.patch(
                KINDS["KubeSwiftMachine"], self.namespace, name, {"spec": {"providerID": pid}}
            )
        await self._ksm_status(ksm, True, "VMProvisioned", ip)
        node = await self.workload.get(KINDS["Node"], None, name)
        if node is not None and not (node.get("spec") or {}).get("providerID"):
            await self.workload.patch(KINDS["Node"], None, name, {"spec": {"providerID": pid}})

    async def _ksm_status(self, ksm: JSON, ready: bool, reason: str, ip: str | None) -> None:
        now = self.clock.now()
        status: dict[str, Any] = {
            "initialization": {"provisioned": ready},
            "conditions": [condition("Ready", ready, reason, reason, now)],
        }
        if ip:
            status["addresses"] = [{"type": "InternalIP", "address": ip}]
        current = ksm.get("status") or {}
        same = (
            current.get("initialization") == status["initialization"]
            and same_conditions(current.get("conditions") or [], status["conditions"])
            and current.get("addresses") == status.get("addresses")
        )
        if not same:
            await self.infra.patch(
                KINDS["KubeSwiftMachine"],
                self.namespace,
                ksm["metadata"]["name"],
                {"status": status},
                status=True,
            )

    async def _ksm_delete(self, ksm: JSON) -> None:
        meta, ns = ksm["metadata"], self.namespace
        name = meta["name"]
        if await self.infra.get(KINDS["SwiftGuest"], ns, name) is not None:
            await self.infra.delete(KINDS["SwiftGuest"], ns, name)
            return  # requeue until the guest is gone
        await self.infra.delete(KINDS["SwiftSeedProfile"], ns, f"{name}-seed")
        finalizers = [f for f in meta.get("finalizers") or [] if f != KSM_FINALIZER]
        if finalizers != list(meta.get("finalizers") or []):
            patch = {
                "metadata": {"resourceVersion": meta["resourceVersion"], "finalizers": finalizers}
            }
            await self.infra.patch(KINDS["KubeSwiftMachine"], ns, name, patch)
