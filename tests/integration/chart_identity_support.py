"""The operator as the chart installs it: its release, its ServiceAccount's token, its process.

Why this module exists: "the chart's RBAC is enough" is only proven by running the real
operator with the identity the chart creates and nothing else - not the harness's admin
certificate. This module ``helm install``s the chart into the harness's infrastructure cluster,
mints a token for the chart's ServiceAccount through the TokenRequest API, writes a kubeconfig
holding only that token, and starts ``gpucellpool run`` with the Deployment's own rendered
arguments and environment (ports moved to free loopback ones). The apiserver has no Service
network, so the chart's ValidatingWebhookConfiguration is pointed at the process's loopback
webhook port once the operator has injected its caBundle. What the identity was answered is
read from the apiserver's audit log (the harness audits ServiceAccounts' requests).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from simulations.harness import ApiError, ClusterEndpoint
from tests.integration.chart_support import CHART, Doc, one, run_helm

WEBHOOK_PATH = "/validate-cells-kubeswift-io-v1alpha1-gpucellpool"
HTTP_TOO_MANY_REQUESTS = 429


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Release:
    """An installed release: its name, namespace and the manifests Helm applied."""

    name: str
    namespace: str
    docs: list[Doc]

    @property
    def service_account(self) -> str:
        return str(one(self.docs, "ServiceAccount")["metadata"]["name"])

    @property
    def username(self) -> str:
        """How the apiserver names the ServiceAccount in audit events and reviews."""
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    @property
    def container(self) -> Doc:
        spec = one(self.docs, "Deployment")["spec"]["template"]["spec"]
        return dict(spec["containers"][0])


@contextmanager
def installed(
    helm: Path, infra: ClusterEndpoint, name: str, namespace: str, values: Doc, tmp: Path
) -> Iterator[Release]:
    """``helm install`` (CRDs skipped: the harness installed them), then ``helm uninstall``."""
    kube = ("--kubeconfig", str(infra.kubeconfig_path))
    run_helm(helm, "install", name, str(CHART), "-n", namespace, "--skip-crds", *kube,
             values=values, tmp=tmp)  # fmt: skip
    try:
        yield release_of(helm, infra, name, namespace, tmp)
    finally:
        run_helm(helm, "uninstall", name, "-n", namespace, "--wait", *kube, tmp=tmp)


def release_of(helm: Path, infra: ClusterEndpoint, name: str, namespace: str, tmp: Path) -> Release:
    """An installed release, as ``helm get manifest`` reports it."""
    kube = ("--kubeconfig", str(infra.kubeconfig_path))
    manifest = run_helm(helm, "get", "manifest", name, "-n", namespace, *kube, tmp=tmp)
    return Release(name, namespace, [d for d in yaml.safe_load_all(manifest.stdout) if d])


def token_kubeconfig(infra: ClusterEndpoint, release: Release, path: Path) -> Path:
    """A kubeconfig whose only credential is a TokenRequest token of the chart's SA."""
    token = infra.kubectl(
        "-n", release.namespace, "create", "token", release.service_account, "--duration=1h"
    ).stdout.strip()
    cluster = {"server": infra.url, "certificate-authority": str(infra.ca_path)}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "infra", "cluster": cluster}],
        "users": [{"name": "chart-sa", "user": {"token": token}}],
        "contexts": [{"name": "chart", "context": {"cluster": "infra", "user": "chart-sa"}}],
        "current-context": "chart",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@dataclass
class OperatorProcess:
    """``gpucellpool run`` started with the chart Deployment's arguments and environment."""

    proc: subprocess.Popen[bytes]
    health_port: int
    webhook_port: int
    log: Path

    def ready(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.health_port}/readyz"
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return int(self.proc.returncode)


def chart_command(release: Release, identity: str) -> tuple[list[str], dict[str, str]]:
    """The container's args and literal env, with the downward API resolved as a pod would."""
    fields = {"POD_NAME": identity, "POD_NAMESPACE": release.namespace}
    container = release.container
    args = [str(a) for a in container["args"]]
    for key, value in fields.items():
        args = [a.replace(f"$({key})", value) for a in args]
    env = {e["name"]: str(e["value"]) for e in container.get("env") or () if "value" in e}
    return args, {**env, **fields}


@contextmanager
def operator(release: Release, kubeconfig: Path, log: Path) -> Iterator[OperatorProcess]:
    """The operator as the chart runs it, authenticated only by ``kubeconfig``."""
    args, env = chart_command(release, "chart-identity-0")
    health, metrics, webhook = free_port(), free_port(), free_port()
    argv = [
        str(Path(sys.executable).with_name("gpucellpool")), *args,
        "--kubeconfig", str(kubeconfig),
        "--health-host", "127.0.0.1", f"--health-port={health}", f"--metrics-port={metrics}",
    ]  # fmt: skip
    loopback = {
        "GPUCELLPOOL_WEBHOOK_HOST": "127.0.0.1",
        "GPUCELLPOOL_WEBHOOK_PORT": str(webhook),
        "GPUCELLPOOL_WEBHOOK_EXTRA_IPS": "127.0.0.1",
    }
    environ = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                env={**environ, **env, **loopback})  # fmt: skip
    running = OperatorProcess(proc, health, webhook, log)
    try:
        yield running
    finally:
        running.stop()


def wait(check: Any, timeout_s: float, what: str, log: Path | None = None) -> None:
    """Poll ``check`` every 0.1 s until true; fail naming ``what`` (and the log's tail)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            tail = "\n".join(log.read_text().splitlines()[-15:]) if log else ""
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n{tail}")
        time.sleep(0.1)  # polling a subprocess / the apiserver with a deadline


def route_webhook_to_loopback(infra: ClusterEndpoint, release: Release, port: int) -> None:
    """Point the chart's webhook at the process (no Service network in the harness), keeping
    the caBundle the operator injected with the chart identity's own permissions."""
    name = one(release.docs, "ValidatingWebhookConfiguration")["metadata"]["name"]
    path = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}"

    def injected() -> bool:
        hooks = infra.request("GET", path)["webhooks"]
        return bool(hooks[0]["clientConfig"].get("caBundle"))

    wait(injected, 60, "the operator to inject the webhook caBundle")
    config = infra.request("GET", path)
    for hook in config["webhooks"]:
        bundle = hook["clientConfig"]["caBundle"]
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{WEBHOOK_PATH}",
                                "caBundle": bundle}  # fmt: skip
    infra.request("PUT", path, config)


def audit_events(log: Path, username: str) -> list[dict[str, Any]]:
    """Every completed request of ``username`` in an apiserver audit log."""
    if not log.exists():
        return []
    events = []
    for line in log.read_text().splitlines():
        event = json.loads(line)
        mine = event.get("user", {}).get("username") == username
        if mine and event.get("stage") == "ResponseComplete":
            events.append(event)
    return events


def forbidden(events: list[dict[str, Any]], unserved: Iterable[str] = ()) -> list[str]:
    """``verb uri`` of each request answered 403, except Secret reads and Event posts in
    ``unserved`` namespaces (pools other tests left there: with default values the operator
    watches every namespace but may read Secrets and post Events only where it serves)."""
    skip = tuple(
        f"{prefix}/namespaces/{ns}/{kind}"
        for ns in unserved
        for prefix, kind in (("/api/v1", "secrets"), ("/apis/events.k8s.io/v1", "events"))
    )
    return [
        f"{e['verb']} {e['requestURI']}"
        for e in events
        if e.get("responseStatus", {}).get("code") == 403 and not e["requestURI"].startswith(skip)
    ]


def pool_namespaces(infra: ClusterEndpoint) -> set[str]:
    """Namespaces holding a GPUCellPool now (any test's). Right after the harness starts the
    apiserver may still answer 429 "storage is (re)initializing" for a CRD: retried."""
    deadline = time.monotonic() + 30
    while True:
        try:
            pools = infra.request("GET", "/apis/cells.kubeswift.io/v1alpha1/gpucellpools")
        except ApiError as exc:
            if exc.status != HTTP_TOO_MANY_REQUESTS or time.monotonic() > deadline:
                raise
            time.sleep(0.5)  # the apiserver's own Retry-After is 1 s
            continue
        return {p["metadata"]["namespace"] for p in pools["items"]}


def used(events: list[dict[str, Any]]) -> list[str]:
    """``verb group/resource[/subresource]`` of every request that was allowed, sorted."""
    seen = set()
    for e in events:
        ref = e.get("objectRef") or {}
        if e.get("responseStatus", {}).get("code") == 403 or not ref:
            continue
        sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
        seen.add(f"{e['verb']} {ref.get('apiGroup') or 'core'}/{ref.get('resource')}{sub}")
    return sorted(seen)
