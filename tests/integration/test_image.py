"""The operator's container image, built by `make image`'s builder and run with a real OCI runtime.

What these prove: the image `tools/image/build.py` makes from the Containerfile (cached on its
inputs) unpacks to an OCI bundle (umoci) that runc runs as UID 65532 on a read-only root with
only a tmpfs /tmp writable, host network and the sandbox-refused rlimits removed: it answers
`--version` with pyproject.toml's version; it carries the OCI labels and no compiler or pip;
and `gpucellpool run` inside it, pointed at the harness's infrastructure apiserver (a
kubeconfig with the certificates inlined, mounted read-only, readable by UID 65532 only; the
pool's workload-cluster Secret inlined the same way), answers /readyz 200 on its health port
and raises a GPUCellPool's status.desiredReplicas for a HAMi-pending pod.
With CI=true a failed build or run is a failure; elsewhere the tests need root (runc,
mmdebstrap), and only a non-root run is skipped.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from simulations.harness import ClusterEndpoint
from simulations.twin.scenario import kubeconfig_secret
from tests.integration.binary_support import unavailable
from tests.integration.test_loop_helpers import (
    autoscaled_pool,
    client_for,
    create_pending,
    create_pool,
    decision,
    watch_pool,
)

REPO = Path(__file__).resolve().parents[2]
BUILDER = REPO / "tools" / "image" / "build.py"
VENV_PYTHON = "/opt/gpucellpool/bin/python"
COMPILERS = ("gcc", "cc", "c++", "g++", "clang", "x86_64-linux-gnu-gcc-12")
pytestmark = pytest.mark.timeout(1800)  # a cold image build on a busy machine takes minutes


@dataclass(frozen=True)
class Built:
    meta: dict[str, Any]
    bundle: Path
    runc_root: Path


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """The cached image (built if its inputs changed), unpacked to an OCI bundle (removed after:
    it is ~375 MB, and pytest keeps its last three temporary directories)."""
    if os.geteuid() != 0:
        unavailable("building and running the image needs root (mmdebstrap, runc)")
    proc = subprocess.run(
        [sys.executable, str(BUILDER), "--json"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"image build failed: {proc.stderr.strip()[-2000:]}")
    meta = json.loads(proc.stdout)
    root = tmp_path_factory.mktemp("image")
    layout = root / "layout"
    with tarfile.open(meta["archive"]) as tar:
        tar.extractall(layout, filter="tar")
    bundle = root / "bundle"
    unpack = ["umoci", "unpack", "--image", f"{layout}:{meta['image']}", str(bundle)]
    done = subprocess.run(unpack, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    yield Built(meta, bundle, root / "runc")
    shutil.rmtree(root, ignore_errors=True)


def _config(built: Built, args: list[str], mounts: list[dict[str, Any]]) -> None:
    """The bundle's config.json for one run: read-only root, host network, no rlimits."""
    path = built.bundle / "config.json"
    original = path.with_suffix(".orig")
    if not original.exists():
        original.write_text(path.read_text())
    config = json.loads(original.read_text())
    process = config["process"]
    process.pop("rlimits", None)  # the sandbox refuses setrlimit (the reason podman fails here)
    process["terminal"] = False
    if args:
        process["args"] = args
    config["root"]["readonly"] = True
    linux = config["linux"]
    linux["namespaces"] = [ns for ns in linux["namespaces"] if ns["type"] != "network"]
    tmp: dict[str, Any] = {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"}
    tmp["options"] = ["nosuid", "nodev", "mode=1777", "size=64m"]
    config["mounts"] = [*config["mounts"], tmp, *mounts]
    path.write_text(json.dumps(config))


def _read_only(path: Path) -> dict[str, Any]:
    return {
        "destination": str(path),
        "type": "bind",
        "source": str(path),
        "options": ["rbind", "ro"],
    }


@contextlib.contextmanager
def _container(built: Built, logs: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`runc run` in the foreground; the container is killed and deleted even on failure."""
    name = f"gpucellpool-image-{secrets.token_hex(4)}"
    argv = ["runc", "--root", str(built.runc_root), "run", "--bundle", str(built.bundle), name]
    with logs.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc, name
        finally:
            runc = ["runc", "--root", str(built.runc_root)]
            subprocess.run([*runc, "kill", name, "KILL"], capture_output=True, check=False)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            subprocess.run([*runc, "delete", "--force", name], capture_output=True, check=False)


def _run_to_end(built: Built, args: list[str], tmp_path: Path) -> tuple[int, str]:
    _config(built, args, [])
    logs = tmp_path / "container.log"
    with _container(built, logs) as (proc, _):
        code = proc.wait(timeout=120)
    return code, logs.read_text()


def test_version_as_uid_65532_on_a_read_only_root(image: Built, tmp_path: Path) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert image.meta["image"] == f"localhost/gpucellpool/operator:{version}"
    assert image.meta["digest"].startswith("sha256:") and len(image.meta["digest"]) == 71
    code, out = _run_to_end(image, ["/opt/gpucellpool/bin/gpucellpool", "--version"], tmp_path)
    assert (code, out.strip()) == (0, f"gpucellpool {version}"), out
    probe = (
        "import os, errno\n"
        "print(os.getuid(), os.getgid())\n"
        "for where in ('/opt/gpucellpool/x', '/x', '/tmp/x'):\n"
        "    try:\n"
        "        open(where, 'w').close(); print(where, 'writable')\n"
        "    except OSError as e:\n"
        "        print(where, errno.errorcode[e.errno])\n"
    )
    code, out = _run_to_end(image, [VENV_PYTHON, "-c", probe], tmp_path)
    assert code == 0, out
    assert out.split("\n")[:4] == [
        "65532 65532",
        "/opt/gpucellpool/x EROFS",
        "/x EROFS",
        "/tmp/x writable",
    ], out


def test_labels_and_no_compiler_or_pip(image: Built) -> None:
    config = json.loads((image.bundle / "config.json").read_text())
    labels = config["annotations"]
    assert labels["org.opencontainers.image.version"] == image.meta["version"]
    assert labels["org.opencontainers.image.revision"] == image.meta["revision"]
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"].startswith("https://github.com/")
    assert labels["org.opencontainers.image.title"] == "gpucellpool"
    assert labels["org.opencontainers.image.description"]
    rootfs = image.bundle / "rootfs"
    assert (rootfs / "usr/bin/python3.11").exists()
    present = [c for c in COMPILERS if (rootfs / "usr/bin" / c).exists()]
    assert present == [], present
    pips = [
        path
        for top in ("opt/gpucellpool", "usr")
        for path in (rootfs / top).rglob("pip*")
        if path.name in ("pip", "pip3", "pip3.11") or path.name.startswith("pip-")
    ]
    assert pips == [], pips
    assert not list((rootfs / "usr/share").glob("python-wheels/*.whl"))


def _tail(logs: Path, chars: int = 3000) -> str:
    return logs.read_text(errors="replace")[-chars:]


FILE_KEYS = {
    "certificate-authority": "certificate-authority-data",
    "client-certificate": "client-certificate-data",
    "client-key": "client-key-data",
}


def embedded_kubeconfig(endpoint: ClusterEndpoint) -> str:
    """The endpoint's admin kubeconfig with its certificate files inlined as *-data fields.

    The harness's files are root's (mode 0600, in a 0700 directory); UID 65532 reads only what
    it is given, as a pod reads a mounted Secret.
    """
    config = yaml.safe_load(endpoint.kubeconfig_path.read_text())
    for entry in [*config["clusters"], *config["users"]]:
        body = entry.get("cluster") or entry.get("user") or {}
        for key, data_key in FILE_KEYS.items():
            if key in body:
                body[data_key] = base64.b64encode(Path(body.pop(key)).read_bytes()).decode()
    return yaml.safe_dump(config)


def _secret_file(path: Path, text: str) -> Path:
    """`text` in a file only UID 65532 (and root) can read: the container's view of a Secret."""
    path.write_text(text)
    path.chmod(0o600)
    os.chown(path, 65532, 65532)
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _until_ready(port: int, proc: subprocess.Popen[bytes], logs: Path) -> float:
    """Poll /readyz (every 100 ms) until 200; fail if the container exits or after 60 s."""
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=2) as http:
        while time.monotonic() - started < 60:
            assert proc.poll() is None, f"operator exited {proc.returncode}: {_tail(logs)}"
            with contextlib.suppress(httpx.TransportError):
                if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                    return time.monotonic() - started
            await asyncio.sleep(0.1)  # polling with a deadline
    raise AssertionError(f"/readyz not 200 within 60 s: {_tail(logs)}")


async def test_run_against_the_harness_sets_desired_replicas(
    image: Built, infra: ClusterEndpoint, workload: ClusterEndpoint, namespace: str, tmp_path: Path
) -> None:
    kubeconfig = _secret_file(tmp_path / "kubeconfig", embedded_kubeconfig(infra))
    in_container = "/var/run/gpucellpool/kubeconfig"
    port = _free_port()
    args = [
        "/opt/gpucellpool/bin/gpucellpool",
        "run",
        f"--kubeconfig={in_container}",
        "--identity=image-test",
        f"--lease-namespace={namespace}",
        f"--namespace={namespace}",
        "--health-host=127.0.0.1",
        f"--health-port={port}",
        "--no-provision",
    ]
    mount = {**_read_only(kubeconfig), "destination": in_container}
    _config(image, args, [mount])
    infra_api, workload_api = await client_for(infra), await client_for(workload)
    logs = tmp_path / "operator.log"
    watch, task = await watch_pool(infra_api, namespace, "img")
    try:
        with _container(image, logs) as (proc, _):
            ready_s = await _until_ready(port, proc, logs)
            # The pool's workload-cluster Secret, inlined too (create_pool keeps an existing one).
            secret = kubeconfig_secret(namespace, embedded_kubeconfig(workload))
            await infra_api.create(f"/api/v1/namespaces/{namespace}/secrets", secret)
            await create_pool(infra_api, workload, autoscaled_pool("img", namespace, "img"))
            await watch.until(lambda s: decision(s).get("reason") == "Idle", 60)
            await create_pending(workload_api, namespace, "img-1", "img")
            _, status = await watch.until(lambda s: s.get("desiredReplicas") == 1, 60)
            assert decision(status)["reason"] == "ScaledUp", status
            assert proc.poll() is None, _tail(logs)
        print(f"\nimage operator /readyz 200 after {ready_s:.1f} s")
        assert "Traceback" not in _tail(logs)
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await infra_api.close()
        await workload_api.close()
