"""Simulated Cluster API kubeadm bootstrap provider (CABPK), driven by the simulated CAPI.

Why this module exists: with ``bootstrapConfigTemplateRef`` the operator renders no join script;
it creates a ``KubeadmConfig`` per cell from the user's ``KubeadmConfigTemplate`` and Cluster
API's bootstrap provider turns it into the Machine's bootstrap data. The twin must do the same,
or such a cell never boots. What CABPK does, and this module plays:

* for a ``KubeadmConfig`` without ``status.dataSecretName``: create the data Secret named after
  the config (type ``cluster.x-k8s.io/secret``, keys ``value`` and ``format``, label
  ``cluster.x-k8s.io/cluster-name``, the config as controller owner) holding cloud-init that
  writes a kubeadm ``JoinConfiguration`` (node name from the datasource's ``local-hostname``,
  ``kubeletExtraArgs`` from the config's ``joinConfiguration.nodeRegistration``) and runs
  ``kubeadm join``; then set ``status.dataSecretName`` and
  ``status.initialization.dataSecretCreated`` (v1beta2);
* garbage collection of a data Secret whose owning config is gone (the harness runs no
  garbage collector, so the twin plays it, as the node agent does for Leases).

The join data carries none of the operator's per-cell labels: a Node booted from it registers
without the pool's identity labels, which is why the operator proves ownership by providerID.
Simplified: no token minting, no waiting for the control plane to be initialised.
"""

from __future__ import annotations

import base64
from typing import Any

import yaml

from provisioner.kube import JSON, KINDS, KubeApi, NotFound

SECRET_TYPE = "cluster.x-k8s.io/secret"
CLUSTER_LABEL = "cluster.x-k8s.io/cluster-name"
JOIN_CONFIG_PATH = "/run/kubeadm/kubeadm-join-config.yaml"


def join_user_data(config: JSON) -> str:
    """The cloud-config CABPK renders for a worker's join (kubeadm v1beta4 JoinConfiguration)."""
    spec: dict[str, Any] = config.get("spec") or {}
    registration = dict(((spec.get("joinConfiguration") or {}).get("nodeRegistration")) or {})
    registration.setdefault("name", "{{ ds.meta_data.local_hostname }}")
    join = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "JoinConfiguration",
        "discovery": {"bootstrapToken": {"apiServerEndpoint": "workload:6443", "token": "simul"}},
        "nodeRegistration": registration,
    }
    commands = [
        *(spec.get("preKubeadmCommands") or []),
        f"kubeadm join --config {JOIN_CONFIG_PATH}",
        *(spec.get("postKubeadmCommands") or []),
    ]
    cloud = {
        "write_files": [
            {
                "path": JOIN_CONFIG_PATH,
                "owner": "root:root",
                "permissions": "0640",
                "content": yaml.safe_dump(join, sort_keys=False),
            }
        ],
        "runcmd": commands,
    }
    return "## template: jinja\n#cloud-config\n" + yaml.safe_dump(cloud, sort_keys=False)


def _data_secret(config: JSON) -> JSON:
    meta = config["metadata"]
    labels = {}
    cluster = (meta.get("labels") or {}).get(CLUSTER_LABEL)
    if cluster:
        labels[CLUSTER_LABEL] = cluster
    value = base64.b64encode(join_user_data(config).encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": SECRET_TYPE,
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": config["apiVersion"],
                    "kind": config["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "data": {"value": value, "format": base64.b64encode(b"cloud-config").decode()},
    }


async def reconcile_configs(api: KubeApi, namespace: str) -> None:
    """One CABPK pass over the namespace's KubeadmConfigs, then the Secret GC. A cluster without
    the KubeadmConfig CRD has no bootstrap provider: nothing to do (CAPI itself still runs)."""
    kind = KINDS["KubeadmConfig"]
    try:
        configs = await api.list(kind, namespace)
    except NotFound:
        return
    for config in configs:
        meta = config["metadata"]
        if meta.get("deletionTimestamp") is not None:
            continue
        if (config.get("status") or {}).get("dataSecretName"):
            continue
        if await api.get(KINDS["Secret"], namespace, meta["name"]) is None:
            await api.create(_data_secret(config))
        status = {
            "dataSecretName": meta["name"],
            "initialization": {"dataSecretCreated": True},
        }
        await api.patch(kind, namespace, meta["name"], {"status": status}, status=True)
    await _collect(api, namespace, {str(c["metadata"]["uid"]) for c in configs})


async def _collect(api: KubeApi, namespace: str, live_uids: set[str]) -> None:
    """Delete data Secrets whose owning KubeadmConfig no longer exists (ownerReference GC)."""
    for secret in await api.list(KINDS["Secret"], namespace, label_selector=CLUSTER_LABEL):
        meta = secret["metadata"]
        if secret.get("type") != SECRET_TYPE or meta.get("deletionTimestamp") is not None:
            continue
        owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") == "KubeadmConfig"]
        if owners and not any(o.get("uid") in live_uids for o in owners):
            await api.delete(KINDS["Secret"], namespace, meta["name"])
