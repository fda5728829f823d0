"""Pinned versions of every external binary the live tests use, in one place.

The harness finds, builds or downloads exactly these versions; `docs/development.md` and the
Go tools modules under `tools/` must agree with them (a unit test checks the go.mod files).
"""

from __future__ import annotations

from typing import Final

KUBERNETES_VERSION: Final = "v1.37.2"
"""k8s.io/kubernetes release for kube-apiserver, kube-controller-manager and kubectl
(tools/k8s/go.mod)."""

ETCD_VERSION: Final = "v3.7.0"
"""go.etcd.io/etcd/server/v3 release (tools/k8s/go.mod)."""

HELM_VERSION: Final = "v3.22.0"
"""helm.sh/helm/v3 release (tools/helm/go.mod)."""

PROMETHEUS_DEB_VERSION: Final = "2.42.0+ds-5+deb12u1"
"""Debian bookworm `prometheus` package (ships prometheus and promtool 2.42.0)."""

PROMETHEUS_VERSION: Final = "2.42.0"

GO_PACKAGES: Final[dict[str, tuple[str, str]]] = {
    # binary name -> (tools module directory under tools/, Go package path)
    "etcd": ("k8s", "go.etcd.io/etcd/server/v3"),
    "kube-apiserver": ("k8s", "k8s.io/kubernetes/cmd/kube-apiserver"),
    "kube-controller-manager": ("k8s", "k8s.io/kubernetes/cmd/kube-controller-manager"),
    "kubectl": ("k8s", "k8s.io/kubernetes/cmd/kubectl"),
    "helm": ("helm", "helm.sh/helm/v3/cmd/helm"),
}

BINARY_VERSIONS: Final[dict[str, str]] = {
    "etcd": ETCD_VERSION,
    "kube-apiserver": KUBERNETES_VERSION,
    "kube-controller-manager": KUBERNETES_VERSION,
    "kubectl": KUBERNETES_VERSION,
    "helm": HELM_VERSION,
    "prometheus": PROMETHEUS_VERSION,
    "promtool": PROMETHEUS_VERSION,
}

ENVTEST_BINARIES: Final = ("etcd", "kube-apiserver", "kubectl")
"""What an envtest `KUBEBUILDER_ASSETS` directory holds (it has no controller-manager)."""

KUBE_BINARIES: Final = (*ENVTEST_BINARIES, "kube-controller-manager")
"""Everything the harness runs: the envtest three plus kube-controller-manager."""
ALL_BINARIES: Final = (*KUBE_BINARIES, "helm", "prometheus", "promtool")
