"""Find, build or fetch the pinned external binaries the live tests run.

Lookup order for etcd, kube-apiserver and kubectl: `$KUBEBUILDER_ASSETS` (the envtest layout,
so `setup-envtest` users need nothing else), then the cache, else `go build` from the pinned
Go tools module in `tools/k8s`. kube-controller-manager is not part of the envtest assets, so
it always comes from the cache or that same build (a `KUBEBUILDER_ASSETS` user builds only it,
once). helm is built the same way from `tools/helm`. prometheus and
promtool come from PATH, else the cache, else the Debian package (`apt-get download` and
`dpkg-deb -x`; no service is installed or started). Builds land in a temporary directory
next to the cache and are renamed into place, so an interrupted build never leaves a broken
binary behind; `versions.json` in the cache records what each file is.

Go builds run under `nice` (they share the machine with test runs); set `GOFLAGS=-p=N` to
cap their parallelism further.

CLI: `python -m simulations.harness.binaries ensure [NAME ...]`, `... path NAME` and
`... adopt NAME FILE` (copy a binary of the pinned version into the cache, e.g. a
kube-controller-manager for a `KUBEBUILDER_ASSETS` user without Go).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from simulations.harness import versions

REPO_ROOT = Path(__file__).resolve().parents[2]
MANIFEST = "versions.json"
GO_BUILD_FLAGS = ("-trimpath",)


class BinaryError(RuntimeError):
    """A binary is missing and cannot be built or fetched here."""


def cache_dir() -> Path:
    """Where built and fetched binaries live: `$GPUCELLPOOL_CACHE` or the per-user cache."""
    override = os.environ.get("GPUCELLPOOL_CACHE")
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "gpucellpool" / f"k8s-{versions.KUBERNETES_VERSION}" / "bin"


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _manifest(directory: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads((directory / MANIFEST).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _record(directory: Path, entries: dict[str, dict[str, object]]) -> None:
    data = {**_manifest(directory), **entries}
    tmp = directory / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(directory / MANIFEST)


def find(name: str) -> Path | None:
    """The pinned binary `name` if it is already available, without building anything."""
    if name not in versions.BINARY_VERSIONS:
        raise BinaryError(f"unknown binary {name!r}; known: {', '.join(versions.ALL_BINARIES)}")
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and name in versions.ENVTEST_BINARIES and _executable(Path(assets) / name):
        return Path(assets) / name
    if name in ("prometheus", "promtool") and (on_path := shutil.which(name)):
        return Path(on_path)
    cached = cache_dir() / name
    entry = _manifest(cache_dir()).get(name, {})
    if _executable(cached) and entry.get("version") == versions.BINARY_VERSIONS[name]:
        return cached
    return None


def ensure(names: Iterable[str] = versions.ALL_BINARIES) -> dict[str, Path]:
    """Every binary in `names`, building or fetching the missing ones into the cache."""
    wanted = list(dict.fromkeys(names))
    found = {name: path for name in wanted if (path := find(name)) is not None}
    missing = [name for name in wanted if name not in found]
    if not missing:
        return found
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with _locked(directory):
        missing = [name for name in missing if find(name) is None]  # another process may have won
        go_names = [name for name in missing if name in versions.GO_PACKAGES]
        for module in sorted({versions.GO_PACKAGES[name][0] for name in go_names}):
            build_go(module, [name for name in go_names if versions.GO_PACKAGES[name][0] == module])
        if any(name in ("prometheus", "promtool") for name in missing):
            fetch_prometheus()
    for name in wanted:
        path = find(name)
        if path is None:
            raise BinaryError(f"{name} is still missing after building/fetching it")
        found[name] = path
    return found


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    with (directory / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def go_output_name(package: str) -> str:
    """The file name `go build -o DIR/` gives a main package (major-version suffix dropped)."""
    parts = package.rstrip("/").split("/")
    if len(parts) > 1 and re.fullmatch(r"v\d+", parts[-1]):
        return parts[-2]
    return parts[-1]


def go_ldflags(module: str) -> str:
    """Strip symbols and stamp the release version (a plain `go build` reports v0.0.0)."""
    flags = ["-s", "-w"]
    if module == "k8s":
        major, minor, _ = versions.KUBERNETES_VERSION.lstrip("v").split(".")
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [
                f"-X {pkg}.gitVersion={versions.KUBERNETES_VERSION}",
                f"-X {pkg}.gitMajor={major}",
                f"-X {pkg}.gitMinor={minor}",
                f"-X {pkg}.gitTreeState=clean",
            ]
    elif module == "helm":
        flags.append(f"-X helm.sh/helm/v3/internal/version.version={versions.HELM_VERSION}")
    return " ".join(flags)


def go_toolchain() -> str:
    """The `go` command, or BinaryError explaining how to get the binaries another way."""
    exe = shutil.which("go") or (
        "/usr/local/go/bin/go" if _executable(Path("/usr/local/go/bin/go")) else None
    )
    if exe is None:
        raise BinaryError(
            "no Go toolchain: install Go >= 1.26 or point KUBEBUILDER_ASSETS at a directory "
            "holding etcd, kube-apiserver and kubectl (setup-envtest layout) and put a "
            f"{versions.KUBERNETES_VERSION} kube-controller-manager into {cache_dir()} with "
            "`python -m simulations.harness.binaries adopt kube-controller-manager PATH`"
        )
    return exe


def build_go(module: str, names: Sequence[str]) -> float:
    """`go build` the binaries `names` from tools/`module` into the cache; returns seconds."""
    packages = {name: versions.GO_PACKAGES[name][1] for name in names}
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=".build-", dir=directory) as tmp:
        argv = [
            *_nice(),
            go_toolchain(),
            "build",
            *GO_BUILD_FLAGS,
            f"-ldflags={go_ldflags(module)}",
            "-o",
            f"{tmp}/",
            *packages.values(),
        ]
        print(
            f"building {', '.join(names)} (tools/{module}); cold builds take a while",
            file=sys.stderr,
        )
        proc = subprocess.run(argv, cwd=REPO_ROOT / "tools" / module, check=False)
        if proc.returncode != 0:
            raise BinaryError(f"go build in tools/{module} failed (exit {proc.returncode})")
        for name, package in packages.items():
            os.replace(Path(tmp) / go_output_name(package), directory / name)
    seconds = round(time.monotonic() - started, 1)
    _record(directory, {n: _entry(n, f"go build tools/{module}", seconds) for n in names})
    return seconds


def _nice() -> list[str]:
    """`nice -n 10` where available: a build must not starve tests running beside it."""
    nice = shutil.which("nice")
    return [nice, "-n", "10"] if nice else []


def _entry(name: str, source: str, seconds: float) -> dict[str, object]:
    return {"version": versions.BINARY_VERSIONS[name], "source": source, "seconds": seconds}


def fetch_prometheus() -> float:
    """Unpack prometheus and promtool from the pinned Debian package into the cache."""
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise BinaryError(
                f"prometheus/promtool not on PATH and no {tool} to fetch the Debian package; "
                f"install Prometheus {versions.PROMETHEUS_VERSION} on PATH"
            )
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    pin = f"prometheus={versions.PROMETHEUS_DEB_VERSION}"
    with tempfile.TemporaryDirectory(prefix=".deb-", dir=directory) as tmp:
        try:
            _unpack_deb(pin, Path(tmp), directory)
        except (subprocess.CalledProcessError, StopIteration, FileNotFoundError) as exc:
            raise BinaryError(f"could not fetch {pin} from apt: {exc}") from exc
    seconds = round(time.monotonic() - started, 1)
    source = f"apt-get download {pin}"
    _record(directory, {n: _entry(n, source, seconds) for n in ("prometheus", "promtool")})
    return seconds


def _unpack_deb(pin: str, tmp: Path, directory: Path) -> None:
    download = ["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", pin]
    if subprocess.run(download, cwd=tmp, check=False).returncode != 0:
        # A fresh machine may have empty package lists.
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(download, cwd=tmp, check=True)
    deb = next(tmp.glob("prometheus_*.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp / "root")], check=True)
    for name in ("prometheus", "promtool"):
        os.replace(tmp / "root" / "usr" / "bin" / name, directory / name)


def adopt(name: str, path: Path, source: str) -> Path:
    """Copy an already built binary of the pinned version into the cache (e.g. a probe build)."""
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.adopt"
    shutil.copy2(path, tmp)
    tmp.replace(directory / name)
    _record(directory, {name: _entry(name, source, 0.0)})
    return directory / name


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: `ensure [NAME ...]`, `path NAME` or `adopt NAME FILE`."""
    parser = argparse.ArgumentParser(prog="python -m simulations.harness.binaries")
    sub = parser.add_subparsers(dest="command", required=True)
    ens = sub.add_parser("ensure", help="find or build/fetch the pinned binaries")
    ens.add_argument("names", nargs="*", metavar="NAME", help="default: all")
    pth = sub.add_parser("path", help="print the path of one binary (building it if needed)")
    pth.add_argument("name", choices=versions.ALL_BINARIES)
    adp = sub.add_parser("adopt", help="copy a binary of the pinned version into the cache")
    adp.add_argument("name", choices=versions.ALL_BINARIES)
    adp.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "path":
            print(ensure([args.name])[args.name])
            return 0
        if args.command == "adopt":
            if not _executable(args.file):
                raise BinaryError(f"{args.file} is not an executable file")
            print(adopt(args.name, args.file, f"adopted from {args.file}"))
            return 0
        started = time.monotonic()
        paths = ensure(args.names or versions.ALL_BINARIES)
    except BinaryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{name:15} {versions.BINARY_VERSIONS[name]:10} {path}")
    print(f"ready in {time.monotonic() - started:.1f}s (cache: {cache_dir()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
