"""`make image`: the Containerfile built here, into a cached OCI archive; prints its digest.

Why this script exists: this kind of machine has no container engine and no registry serving
base images. It installs what it lacks from Debian (mmdebstrap, buildah, umoci, runc), makes
the two base images from Debian packages (bases.py), and runs `buildah bud --isolation chroot`
on the repository's own Containerfile against them, so `make image` and a Docker/Podman build
elsewhere share one recipe. The result, `localhost/gpucellpool/operator:<version>`, is pushed
to an OCI archive in the cache named by a hash of every input (inputs.py), so a warm run only
hashes and costs seconds.

Usage: python tools/image/build.py [--json] [--force]
Cache: $GPUCELLPOOL_IMAGE_CACHE, else `image/` beside the directory $GPUCELLPOOL_CACHE names
(the harness binaries' cache), else ~/.cache/gpucellpool/image.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import apt_tools
import bases
import inputs

IMAGE_NAME = "localhost/gpucellpool/operator"
KEEP_ARCHIVES = 3
HOST_CA = "/run/gpucellpool-build-ca.crt"


def cache_dir() -> Path:
    """Where bases, buildah's store and the image archives live."""
    if explicit := os.environ.get("GPUCELLPOOL_IMAGE_CACHE"):
        return Path(explicit).expanduser()
    if binaries := os.environ.get("GPUCELLPOOL_CACHE"):
        return Path(binaries).expanduser().parent / "image"
    return Path.home() / ".cache" / "gpucellpool" / "image"


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """One builder at a time (make image and a test fixture may race)."""
    with (directory / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def manifest_digest(archive: Path) -> str:
    """The image manifest's digest, from the archive's index.json (what a registry would name)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise RuntimeError(f"{archive} has no index.json")
        index = json.load(member)
    return str(index["manifests"][0]["digest"])


def pip_settings() -> list[str]:
    """This machine's CA bundle (and index) for the builder stage's pip, mounted for the build only.

    Where PyPI is reached through a TLS-intercepting proxy, pip's own certifi bundle fails; the
    host's bundle (`$PIP_CERT`, else the system one) is what the host's pip trusts.
    """
    args: list[str] = []
    bundle = Path(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")
    if bundle.is_file():
        args += [f"--volume={bundle.resolve()}:{HOST_CA}:ro", f"--build-arg=PIP_CERT={HOST_CA}"]
    if index := os.environ.get("PIP_INDEX_URL"):
        args.append(f"--build-arg=PIP_INDEX_URL={index}")
    return args


def build(cache: Path, context: Path, labels: dict[str, str], archive: Path) -> None:
    """buildah bud the staged context, then push it to `archive` (written beside, renamed)."""
    buildah = bases.Buildah(cache)
    builder_ref = bases.ensure_base(bases.BUILDER, cache, buildah)
    runtime_ref = bases.ensure_base(bases.RUNTIME, cache, buildah)
    reference = f"{IMAGE_NAME}:{labels['version']}"
    buildah.run(
        "bud",
        "--isolation",
        "chroot",
        "--pull=never",
        "--layers=false",
        "--quiet",
        f"--build-arg=BUILDER_IMAGE={builder_ref}",
        f"--build-arg=RUNTIME_IMAGE={runtime_ref}",
        f"--build-arg=VERSION={labels['version']}",
        f"--build-arg=REVISION={labels['revision']}",
        *pip_settings(),
        "--tag",
        reference,
        "--file",
        str(context / "Containerfile"),
        str(context),
    )
    partial = archive.with_name(f".{archive.name}.partial")
    partial.unlink(missing_ok=True)
    try:
        buildah.run("push", "--quiet", reference, f"oci-archive:{partial}:{reference}")
        os.replace(partial, archive)
    finally:
        partial.unlink(missing_ok=True)
        # The archive is the product; drop the image and its stage leftovers from the store.
        buildah.run("rmi", "--force", reference, capture=True)
        buildah.run("rmi", "--prune", capture=True)


def prune(cache: Path, keep: Path) -> None:
    """Keep the newest few image archives (others were built from older inputs)."""
    archives = sorted(cache.glob("operator-*.oci.tar"), key=lambda p: p.stat().st_mtime)
    for old in archives[:-KEEP_ARCHIVES]:
        if old != keep:
            old.unlink(missing_ok=True)
            old.with_suffix(".json").unlink(missing_ok=True)


def ensure_image(force: bool = False) -> dict[str, object]:
    """The cached image archive for the current inputs, built if absent; its description."""
    started = time.monotonic()
    apt_tools.ensure()
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    with locked(cache), tempfile.TemporaryDirectory(prefix=".context-", dir=cache) as tmp:
        context = Path(tmp)
        files = inputs.stage(context)
        version = inputs.project_version(context)
        bases_keys = {"builder": bases.BUILDER.key, "runtime": bases.RUNTIME.key}
        key = inputs.digest_of(context, files, {"version": version, **bases_keys})[:16]
        archive = cache / f"operator-{version}-{key}.oci.tar"
        meta_path = archive.with_suffix(".json")
        cached = archive.exists() and meta_path.exists() and not force
        if not cached:
            revision = inputs.revision()  # once: the label and the record must agree
            build(cache, context, {"version": version, "revision": revision}, archive)
            meta = {
                "image": f"{IMAGE_NAME}:{version}",
                "version": version,
                "revision": revision,
                "key": key,
                "archive": str(archive),
                "digest": manifest_digest(archive),
                "size_bytes": archive.stat().st_size,
                "build_seconds": round(time.monotonic() - started, 1),
            }
            meta_path.write_text(json.dumps(meta, indent=2) + "\n")
            prune(cache, archive)
    meta = json.loads(meta_path.read_text())
    return {**meta, "cached": cached, "seconds": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="build the operator image into an OCI archive")
    parser.add_argument("--json", action="store_true", help="print the description as JSON")
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    try:
        meta = ensure_image(force=args.force)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(f"make image: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(meta))
        return 0
    how = "cached" if meta["cached"] else f"built in {meta['build_seconds']} s"
    print(f"{meta['image']} ({how}, {float(str(meta['size_bytes'])) / 1e6:.0f} MB compressed)")
    print(f"archive: {meta['archive']}")
    print(f"revision: {meta['revision']}")
    print(f"digest: {meta['digest']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
