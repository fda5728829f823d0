"""One test cluster as seen by a test: URL, credentials, kubectl and a tiny JSON client.

Kept separate from process management so tests, the twin and benchmarks can pass endpoints
around (and build them from a kubeconfig of a cluster started elsewhere) without the harness.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

JSON = dict[str, Any]


class KubectlError(subprocess.CalledProcessError):
    """kubectl exited non-zero; its message ends with the tail of kubectl's stderr."""

    def __str__(self) -> str:
        verb = " ".join(str(a) for a in self.cmd[1:3])
        tail = " | ".join(str(self.stderr or "").strip().splitlines()[-3:]) or "no stderr"
        return f"kubectl {verb} failed (exit {self.returncode}): {tail}"


class ApiError(RuntimeError):
    """The apiserver answered a request with an error status."""

    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        super().__init__(f"{method} {path} -> HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


@dataclass(frozen=True)
class ClusterEndpoint:
    """A running kube-apiserver and an admin identity (`system:masters`) for it."""

    name: str
    url: str
    kubeconfig_path: Path
    ca_path: Path
    client_cert_path: Path
    client_key_path: Path
    token: str
    etcd_prefix: str
    kubectl_path: Path
    kubectl_cache_dir: Path

    @property
    def port(self) -> int:
        """The apiserver's secure port on 127.0.0.1."""
        return int(self.url.rsplit(":", 1)[1])

    def kubectl(
        self,
        *args: str,
        input: str | None = None,  # same name as subprocess.run
        check: bool = True,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; with `check`, a non-zero exit raises with stderr."""
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig_path),
            "KUBECACHEDIR": str(self.kubectl_cache_dir),
        }
        proc = subprocess.run(
            [str(self.kubectl_path), *args],
            input=input,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, proc.args, output=proc.stdout, stderr=proc.stderr)
        return proc

    def apply_file(self, path: Path | str) -> subprocess.CompletedProcess[str]:
        """Server-side apply a manifest file or directory (no size limit from annotations)."""
        return self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))

    def apply_objects(self, *objects: JSON) -> subprocess.CompletedProcess[str]:
        """Server-side apply in-memory manifests.

        Each object goes as a JSON document (JSON is YAML): PyYAML leaves a string such as
        ``252e03`` or ``1e5`` unquoted, and kubectl's YAML 1.2 reader takes it for a number, so
        a random hex label value turned into a float one run in a few thousand."""
        text = "\n---\n".join(json.dumps(obj) for obj in objects)
        return self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=text)

    def ssl_context(self) -> ssl.SSLContext:
        """TLS context trusting this cluster's CA and presenting the admin client cert."""
        ctx = ssl.create_default_context(cafile=str(self.ca_path))
        ctx.load_cert_chain(str(self.client_cert_path), str(self.client_key_path))
        return ctx

    def request(
        self, method: str, path: str, body: JSON | None = None, *, timeout: float = 10.0
    ) -> JSON:
        """One JSON request to the apiserver as admin; raises ApiError on an error status."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, method, path, exc.read().decode(errors="replace")) from exc
        parsed = json.loads(raw) if raw else {}
        return parsed if isinstance(parsed, dict) else {"value": parsed}

    def ready(self) -> bool:
        """True when `/readyz` answers ok."""
        try:
            req = urllib.request.Request(self.url + "/readyz")
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=2) as resp:
                return bool(resp.status == 200)
        except (OSError, ssl.SSLError):
            return False

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> JSON:
        """Create a namespace (fails if it exists)."""
        meta: JSON = {"name": name, "labels": labels or {}}
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
        return self.request("POST", "/api/v1/namespaces", body)

    def delete_namespace(self, name: str) -> None:
        """Request deletion of a namespace; does not wait (the controller-manager's namespace
        controller empties it and removes it; objects with finalizers nobody releases keep
        it Terminating)."""
        try:
            self.request("DELETE", f"/api/v1/namespaces/{name}")
        except ApiError as exc:
            if exc.status != 404:
                raise


def write_kubeconfig(
    path: Path, *, context: str, url: str, ca: Path, cert: Path, key: Path
) -> Path:
    """An admin kubeconfig with absolute file references (kubectl resolves relative ones from
    the kubeconfig's own folder; usable by kubectl and kubernetes-asyncio)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {"server": url, "certificate-authority": str(ca.resolve())},
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate": str(cert.resolve()),
                    "client-key": str(key.resolve()),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": "admin"}}],
        "current-context": context,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
