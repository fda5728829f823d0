"""How each server of the harness is invoked: etcd, kube-apiserver, kube-controller-manager.

Why this module exists: the flags are the harness's knowledge of the binaries (what makes two
apiservers over one etcd distinct, what a test cluster needs switched on or off, which
controllers run and why), while ``simulations.harness.cluster`` starts, waits for and stops the
processes. Pure functions from configuration to argv (and the audit policy file), testable
without starting anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from simulations.harness.certs import ClusterPKI, KeyPair

CONTROLLERS = ("disruption-controller", "garbage-collector-controller", "namespace-controller")
"""kube-controller-manager `--controllers`: only what the project relies on (see module doc)."""


@dataclass(frozen=True)
class ApiserverConfig:
    """What makes one apiserver distinct: its name, port, etcd prefix and credentials."""

    name: str
    port: int
    etcd_url: str
    etcd_prefix: str
    pki: ClusterPKI
    token_file: Path
    service_cidr: str
    audit_policy: Path | None = None
    """With a policy: a JSON audit log at `audit_log_path(root, name)` (see `Harness.start`)."""


def etcd_args(exe: Path, data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    """A single-member, loopback-only, no-fsync etcd (test data only)."""
    client, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    return [
        str(exe),
        "--name=default",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def apiserver_args(exe: Path, cfg: ApiserverConfig) -> list[str]:
    """kube-apiserver flags for a test cluster (envtest-like, but with RBAC on)."""
    pki = cfg.pki
    return [
        str(exe),
        f"--etcd-servers={cfg.etcd_url}",
        f"--etcd-prefix={cfg.etcd_prefix}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={cfg.port}",
        f"--tls-cert-file={pki.serving.cert}",
        f"--tls-private-key-file={pki.serving.key}",
        f"--client-ca-file={pki.ca.cert}",
        f"--token-auth-file={cfg.token_file}",
        f"--service-account-key-file={pki.service_account.cert}",
        f"--service-account-signing-key-file={pki.service_account.key}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-cluster-ip-range={cfg.service_cidr}",
        "--authorization-mode=RBAC",
        "--allow-privileged=true",
        # No controller-manager creates "default" ServiceAccounts, so pods would be refused.
        "--disable-admission-plugins=ServiceAccount",
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        "-v=1",
        *_audit_args(cfg),
    ]


def audit_log_path(root: Path, cluster: str) -> Path:
    """Where an apiserver started with an audit policy writes its JSON audit events."""
    return root / "logs" / f"audit-{cluster}.log"


def _audit_args(cfg: ApiserverConfig) -> list[str]:
    if cfg.audit_policy is None:
        return []
    log = audit_log_path(cfg.audit_policy.parent.parent, cfg.name)
    return [
        f"--audit-policy-file={cfg.audit_policy}",
        f"--audit-log-path={log}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",  # written before the response: a count after is complete
        "--audit-log-maxbackup=1",
        "--audit-log-maxsize=100",
    ]


def write_audit_policy(root: Path, user_groups: Sequence[str]) -> Path:
    """An audit policy logging (at Metadata level: who, what, the answer's code) requests of
    `user_groups` only, so the log stays small and costs the other requests nothing."""
    path = root / "logs" / "audit-policy.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    groups = ", ".join(f'"{g}"' for g in user_groups)
    path.write_text(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n"
        f"  - level: Metadata\n    userGroups: [{groups}]\n  - level: None\n"
    )
    return path


@dataclass(frozen=True)
class ControllerManagerConfig:
    """One kube-controller-manager: the cluster it serves and its own /healthz port."""

    name: str
    port: int
    kubeconfig: Path
    serving: KeyPair
    controllers: tuple[str, ...] = CONTROLLERS


def controller_manager_args(exe: Path, cfg: ControllerManagerConfig) -> list[str]:
    """kube-controller-manager flags: `cfg.controllers` only, one process per cluster, small.

    Admin credentials for every controller (`--use-service-account-credentials=false`: no
    token controller runs to mint per-controller tokens); no leader election (one instance);
    /healthz on a loopback port, served with the apiserver's certificate so the harness CA
    verifies it; low worker counts (test clusters hold a few hundred objects), a client rate
    limit that does not throttle namespace deletion.
    """
    return [
        str(exe),
        f"--kubeconfig={cfg.kubeconfig}",
        f"--controllers={','.join(cfg.controllers)}",
        "--leader-elect=false",
        "--use-service-account-credentials=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={cfg.port}",
        f"--tls-cert-file={cfg.serving.cert}",
        f"--tls-private-key-file={cfg.serving.key}",
        "--concurrent-disruption-syncs=2",
        "--concurrent-gc-syncs=2",
        "--concurrent-namespace-syncs=2",
        # Each controller has its own client; namespace deletion sends a delete-collection and
        # a list per resource type (more on the infrastructure cluster, with the CRDs), which
        # the default 20 QPS / 30 burst throttled: 6.3-7.2 s for an empty namespace there,
        # 5.4-6.0 s with these (the namespace controller's own fixed wait is most of it).
        "--kube-api-qps=100",
        "--kube-api-burst=200",
        "--profiling=false",
        "-v=1",
    ]
