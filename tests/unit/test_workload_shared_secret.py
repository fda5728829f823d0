"""``shares_kubeconfig``: whether a deleted pool's workload client is still another pool's."""

from __future__ import annotations

from provisioner.kube import JSON
from provisioner.workload import shares_kubeconfig


def _pool(name: str, secret: str | None) -> JSON:
    spec: JSON = {"workloadCluster": {"kubeconfigSecretRef": {"name": secret}}} if secret else {}
    return {"metadata": {"name": name}, "spec": spec}


def test_another_pool_naming_the_secret_shares_it() -> None:
    pools = [_pool("a", "kc"), _pool("b", "kc")]
    assert shares_kubeconfig(pools, "a", "kc")


def test_the_pool_itself_and_other_secrets_do_not_count() -> None:
    pools = [_pool("a", "kc"), _pool("b", "other"), _pool("c", None)]
    assert not shares_kubeconfig(pools, "a", "kc")
    assert not shares_kubeconfig([], "a", "kc")
