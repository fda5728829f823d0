"""The simulated kubeadm bootstrap provider's join data: a worker join, no per-cell labels."""

from __future__ import annotations

import yaml

from simulations.twin.capi_bootstrap import JOIN_CONFIG_PATH, join_user_data


def _config(extra_args: list[dict[str, str]]) -> dict[str, object]:
    registration = {"kubeletExtraArgs": extra_args}
    return {
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta2",
        "kind": "KubeadmConfig",
        "metadata": {"name": "gpu-0", "namespace": "ns", "uid": "u"},
        "spec": {
            "joinConfiguration": {"nodeRegistration": registration},
            "preKubeadmCommands": ["modprobe vfio-pci"],
        },
    }


def test_join_data_is_a_kubeadm_worker_join_from_the_config() -> None:
    text = join_user_data(_config([{"name": "max-pods", "value": "64"}]))
    assert text.startswith("## template: jinja\n#cloud-config\n")
    cloud = yaml.safe_load(text)
    assert cloud["runcmd"] == ["modprobe vfio-pci", f"kubeadm join --config {JOIN_CONFIG_PATH}"]
    join = yaml.safe_load(cloud["write_files"][0]["content"])
    assert join["kind"] == "JoinConfiguration"
    registration = join["nodeRegistration"]
    assert registration["name"] == "{{ ds.meta_data.local_hostname }}"  # = the KSM name
    assert registration["kubeletExtraArgs"] == [{"name": "max-pods", "value": "64"}]


def test_join_data_carries_no_cell_identity() -> None:
    # The template is shared by every cell of the pool: nothing in it names a cell, so the
    # Node registers without the pool's identity labels (ownership is proven by providerID).
    text = join_user_data(_config([]))
    assert "cells.kubeswift.io" not in text and "gpu-0" not in text
