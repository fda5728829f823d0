"""Two real kube-apiservers over one etcd: the "infrastructure" and the "workload" cluster.

Everything live in the project (operator, webhook, provisioner tests, benchmarks, the demo)
runs against this. One etcd on loopback with random free ports and its data in a temporary
directory; two kube-apiservers with distinct `--etcd-prefix`, each with its own CA, serving
certificate, service-account key, an admin client certificate in `system:masters` (RBAC is
on, as in a real cluster) and an admin kubeconfig. Each cluster also runs a real
kube-controller-manager with only the controllers the project's behaviour depends on:
`disruption` (PodDisruptionBudget status, which the Eviction API enforces), `garbagecollector`
(ownerReferences) and `namespace` (a deleted namespace is emptied and goes away). No
scheduler runs, and no other controller (no Deployments, no service-account tokens).

`Harness.start(tmp_dir)` returns once both `/readyz` answer, the CRDs are Established and both
controller-managers answer `/healthz`; `stop()` (also run at interpreter exit and on garbage
collection) kills every process group it started and waits for each exit. Each server's flags
are built in ``simulations.harness.flags``.
"""

from __future__ import annotations

import secrets
import ssl
import time
import urllib.request
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import TracebackType

from simulations.harness import binaries as bins
from simulations.harness.certs import ClusterPKI, KeyPair, cluster_pki
from simulations.harness.endpoint import ClusterEndpoint, write_kubeconfig
from simulations.harness.flags import (
    CONTROLLERS,
    ApiserverConfig,
    ControllerManagerConfig,
    apiserver_args,
    audit_log_path,
    controller_manager_args,
    etcd_args,
    write_audit_policy,
)
from simulations.harness.procs import HarnessTimeout, ManagedProcess, free_port, wait_for
from simulations.harness.versions import KUBE_BINARIES

THIRD_PARTY_CRDS = Path(__file__).resolve().parent / "crds"
WORKLOAD_CRDS = THIRD_PARTY_CRDS / "workload"  # ProvisioningRequest (where the pods are)
PROJECT_CRDS = bins.REPO_ROOT / "crds"
CLUSTERS = ("infrastructure", "workload")
ADMIN_USER = "admin"
START_ATTEMPTS = 3


class HarnessError(RuntimeError):
    """A server of the harness failed to start; the message carries its log tail."""


class Harness:
    """Running etcd, two apiservers and their controller-managers; `Harness.start()`, then
    `stop()` or `with`."""

    def __init__(
        self,
        root: Path,
        etcd_url: str,
        processes: list[ManagedProcess],
        endpoints: Mapping[str, ClusterEndpoint],
        timings: Mapping[str, float],
    ) -> None:
        self.root = root
        self.etcd_url = etcd_url
        self.processes = processes
        self.infra = endpoints["infrastructure"]
        self.workload = endpoints["workload"]
        self.timings = dict(timings)
        self._finalizer = weakref.finalize(self, _stop_all, list(processes))

    @property
    def endpoints(self) -> tuple[ClusterEndpoint, ClusterEndpoint]:
        """(infrastructure, workload)."""
        return (self.infra, self.workload)

    @property
    def pids(self) -> list[int]:
        """PIDs of etcd, both apiservers and both controller-managers."""
        return [p.pid for p in self.processes]

    @property
    def ports(self) -> list[int]:
        """Every TCP port the harness listens on."""
        etcd_ports = [int(u.rsplit(":", 1)[1]) for u in (self.etcd_url, self._etcd_peer_url)]
        kcm_ports = [
            int(a.split("=", 1)[1])
            for p in self.processes
            for a in p.argv
            if a.startswith("--secure-port=") and p.name.startswith("kube-controller-manager")
        ]
        return [*etcd_ports, self.infra.port, self.workload.port, *kcm_ports]

    @property
    def _etcd_peer_url(self) -> str:
        argv = self.processes[0].argv
        return next(a.split("=", 1)[1] for a in argv if a.startswith("--listen-peer-urls="))

    @property
    def alive(self) -> bool:
        """True while the finalizer has not run (i.e. before stop())."""
        return self._finalizer.alive

    @classmethod
    def start(
        cls,
        tmp_dir: Path,
        *,
        binaries: Mapping[str, Path] | None = None,
        crd_dirs: Sequence[Path] | None = None,
        timeout: float = 120.0,
        controllers: Sequence[str] = CONTROLLERS,
        audit_user_groups: Sequence[str] = (),
    ) -> Harness:
        """Start etcd and both apiservers under `tmp_dir`, install the CRDs, start both
        controller-managers (the infrastructure one after the CRDs, so its garbage collector
        sees them from the start) running `controllers`; none when it is empty (for a
        benchmark that must not pay for their informers, not for a test of behaviour).
        With `audit_user_groups`, both apiservers write an audit log of those groups' requests
        (`Harness.audit_log`), e.g. to count the 403s a ServiceAccount was answered."""
        paths = dict(binaries) if binaries is not None else bins.ensure(KUBE_BINARIES)
        if missing := [name for name in KUBE_BINARIES if name not in paths]:
            paths.update(bins.ensure(missing))  # e.g. a caller's map from before the KCM
        root = Path(tmp_dir).resolve()  # kubeconfigs hold these paths; kubectl would
        root.mkdir(parents=True, exist_ok=True)  # resolve relative ones from its own folder
        started: list[ManagedProcess] = []
        timings: dict[str, float] = {}
        t0 = time.monotonic()
        try:
            etcd_url = _start_etcd(paths["etcd"], root, started, timeout)
            timings["etcd"] = time.monotonic() - t0
            files = {name: _cluster_files(root, name) for name in CLUSTERS}
            policy = write_audit_policy(root, audit_user_groups) if audit_user_groups else None
            endpoints = _start_apiservers(paths, root, etcd_url, files, started, timeout, policy)
            timings["apiservers"] = time.monotonic() - t0
            exe, wanted = paths["kube-controller-manager"], tuple(controllers)
            kcm = [_ControllerManagerStart(exe, root, started, wanted) for _ in CLUSTERS]
            if wanted:
                kcm[1].launch(endpoints["workload"], files["workload"][0].serving)
            dirs = [THIRD_PARTY_CRDS, PROJECT_CRDS] if crd_dirs is None else list(crd_dirs)
            install_crds(endpoints["infrastructure"], dirs, timeout)
            if crd_dirs is None:
                install_crds(endpoints["workload"], [WORKLOAD_CRDS], timeout)
            timings["crds"] = time.monotonic() - t0
            if wanted:
                kcm[0].launch(endpoints["infrastructure"], files["infrastructure"][0].serving)
                for launched in kcm:
                    launched.wait(timeout)
            timings["controller-managers"] = time.monotonic() - t0
            timings["total"] = time.monotonic() - t0
        except BaseException:
            _stop_all(started)
            raise
        return cls(root, etcd_url, started, endpoints, timings)

    def audit_log(self, cluster: str) -> Path:
        """The JSON audit log of `cluster` ("infrastructure" or "workload"); it exists only when
        the harness was started with `audit_user_groups`."""
        return audit_log_path(self.root, cluster)

    def stop(self) -> None:
        """Kill every process group the harness started and wait for each to exit."""
        self._finalizer()

    def __enter__(self) -> Harness:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _stop_all(processes: list[ManagedProcess]) -> None:
    for proc in reversed(processes):  # controller-managers, then apiservers, etcd last
        proc.stop()


def _launch(name: str, argv: list[str], log: Path, started: list[ManagedProcess]) -> ManagedProcess:
    proc = ManagedProcess(name, argv, log)
    started.append(proc)
    return proc


def _fail(proc: ManagedProcess, why: str) -> HarnessError:
    return HarnessError(f"{proc.name} {why}; log {proc.log_path}:\n{proc.log_tail()}")


def _exited_or(proc: ManagedProcess, ready: Callable[[], bool]) -> Callable[[], bool]:
    """A wait condition that also ends (falsely ready) when the process dies."""
    return lambda: not proc.running() or ready()


def _await(proc: ManagedProcess, ready: Callable[[], bool], timeout: float, probe: str) -> None:
    """Wait until `ready` or the process exits; a timeout error carries the log tail."""
    try:
        wait_for(_exited_or(proc, ready), timeout=timeout, what=f"{proc.name} {probe}")
    except HarnessTimeout as exc:
        raise _fail(proc, f"did not answer {probe} within {timeout:.0f}s") from exc


def _etcd_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as resp:
            return b'"health":"true"' in resp.read()
    except OSError:
        return False


def _start_etcd(exe: Path, root: Path, started: list[ManagedProcess], timeout: float) -> str:
    for attempt in range(START_ATTEMPTS):
        client_port, peer_port = free_port(), free_port()
        data_dir = root / "etcd" / f"data-{attempt}"
        argv = etcd_args(exe, data_dir, client_port, peer_port)
        proc = _launch("etcd", argv, root / "logs" / "etcd.log", started)
        url = f"http://127.0.0.1:{client_port}"
        _await(proc, partial(_etcd_healthy, url), timeout, "/health")
        if proc.running():
            return url
        started.remove(proc)
        proc.stop()
        if "address already in use" not in proc.log_tail():
            raise _fail(proc, "exited during start")
    raise HarnessError(f"etcd could not get free ports in {START_ATTEMPTS} attempts")


def _cluster_files(root: Path, name: str) -> tuple[ClusterPKI, Path, str]:
    directory = root / name
    pki = cluster_pki(directory / "pki", name, ADMIN_USER)
    token = secrets.token_hex(16)
    token_file = directory / "pki" / "tokens.csv"
    token_file.write_text(f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
    token_file.chmod(0o600)
    return pki, token_file, token


def _endpoint(root: Path, cfg: ApiserverConfig, token: str, kubectl: Path) -> ClusterEndpoint:
    url = f"https://127.0.0.1:{cfg.port}"
    pki = cfg.pki
    kubeconfig = write_kubeconfig(
        root / cfg.name / "kubeconfig",
        context=cfg.name,
        url=url,
        ca=pki.ca.cert,
        cert=pki.admin.cert,
        key=pki.admin.key,
    )
    return ClusterEndpoint(
        name=cfg.name,
        url=url,
        kubeconfig_path=kubeconfig,
        ca_path=pki.ca.cert,
        client_cert_path=pki.admin.cert,
        client_key_path=pki.admin.key,
        token=token,
        etcd_prefix=cfg.etcd_prefix,
        kubectl_path=kubectl,
        kubectl_cache_dir=root / cfg.name / "kubectl-cache",
    )


def _start_apiservers(
    paths: Mapping[str, Path],
    root: Path,
    etcd_url: str,
    files: Mapping[str, tuple[ClusterPKI, Path, str]],
    started: list[ManagedProcess],
    timeout: float,
    audit_policy: Path | None = None,
) -> dict[str, ClusterEndpoint]:
    endpoints: dict[str, ClusterEndpoint] = {}
    pending = list(CLUSTERS)
    for _attempt in range(START_ATTEMPTS):
        launched: dict[str, tuple[ManagedProcess, ClusterEndpoint]] = {}
        for name in pending:
            pki, token_file, token = files[name]
            cidr = f"10.{96 + CLUSTERS.index(name)}.0.0/16"
            cfg = ApiserverConfig(
                name, free_port(), etcd_url, f"/{name}", pki, token_file, cidr, audit_policy
            )
            log = root / "logs" / f"kube-apiserver-{name}.log"
            proc = _launch(
                f"kube-apiserver[{name}]",
                apiserver_args(paths["kube-apiserver"], cfg),
                log,
                started,
            )
            launched[name] = (proc, _endpoint(root, cfg, token, paths["kubectl"]))
        pending = _await_apiservers(launched, started, timeout)
        endpoints.update({n: ep for n, (_, ep) in launched.items() if n not in pending})
        if not pending:
            return endpoints
    raise HarnessError(f"kube-apiserver could not get a free port in {START_ATTEMPTS} attempts")


def _await_apiservers(
    launched: Mapping[str, tuple[ManagedProcess, ClusterEndpoint]],
    started: list[ManagedProcess],
    timeout: float,
) -> list[str]:
    """Wait for every launched apiserver; return the names to retry (lost their port)."""
    retry: list[str] = []
    for name, (proc, endpoint) in launched.items():
        _await(proc, endpoint.ready, timeout, "/readyz")
        if proc.running():
            continue
        started.remove(proc)
        proc.stop()
        if "address already in use" not in proc.log_tail(200):
            raise _fail(proc, "exited during start")
        retry.append(name)
    return retry


def install_crds(endpoint: ClusterEndpoint, dirs: Sequence[Path], timeout: float = 60.0) -> None:
    """Apply every `*.yaml` in `dirs` (missing/empty dirs are skipped); wait for Established."""
    files = sorted(f for d in dirs if d.is_dir() for f in d.glob("*.yaml"))
    if not files:
        return
    args = [arg for f in files for arg in ("-f", str(f))]
    endpoint.kubectl("apply", "--server-side", "--force-conflicts", *args, timeout=timeout)
    endpoint.kubectl(
        "wait", "--for=condition=Established", f"--timeout={int(timeout)}s", "crd", "--all",
        timeout=timeout + 10,
    )  # fmt: skip


def _controllers_healthy(url: str, ca: Path, controllers: Sequence[str]) -> bool:
    """True when the controller-manager's `/healthz?verbose` (TLS verified with the cluster CA)
    passes and lists every one of `controllers`: each adds its check once it has started."""
    try:
        ctx = ssl.create_default_context(cafile=str(ca))
        with urllib.request.urlopen(url + "/healthz?verbose", context=ctx, timeout=2) as resp:
            body = resp.read().decode(errors="replace")
    except (OSError, ssl.SSLError):
        return False
    return all(f"[+]{name} ok" in body for name in controllers)


@dataclass
class _ControllerManagerStart:
    """One kube-controller-manager being started: `launch`, later `wait` (relaunching it on a
    port lost to a race, like the apiservers)."""

    exe: Path
    root: Path
    started: list[ManagedProcess]
    controllers: tuple[str, ...]
    proc: ManagedProcess | None = None
    args: tuple[ClusterEndpoint, KeyPair] | None = None
    url: str = ""

    def launch(self, endpoint: ClusterEndpoint, serving: KeyPair) -> None:
        """Start it for `endpoint`'s cluster, serving /healthz with `serving`; no waiting."""
        self.args = (endpoint, serving)
        cfg = ControllerManagerConfig(
            endpoint.name, free_port(), endpoint.kubeconfig_path, serving, self.controllers
        )
        self.url = f"https://127.0.0.1:{cfg.port}"
        self.proc = _launch(
            f"kube-controller-manager[{cfg.name}]",
            controller_manager_args(self.exe, cfg),
            self.root / "logs" / f"kube-controller-manager-{cfg.name}.log",
            self.started,
        )

    def wait(self, timeout: float) -> None:
        """Until its controllers report healthy; HarnessError if it exits or times out."""
        for _attempt in range(START_ATTEMPTS):
            if self.proc is None or self.args is None:
                raise HarnessError("kube-controller-manager awaited before it was launched")
            proc, (endpoint, serving) = self.proc, self.args
            ready = partial(_controllers_healthy, self.url, endpoint.ca_path, self.controllers)
            _await(proc, ready, timeout, "/healthz")
            if proc.running():
                return
            self.started.remove(proc)
            proc.stop()
            if "address already in use" not in proc.log_tail(200):
                raise _fail(proc, "exited during start")
            self.launch(endpoint, serving)
        raise HarnessError(
            f"kube-controller-manager could not get a free port in {START_ATTEMPTS} attempts"
        )
