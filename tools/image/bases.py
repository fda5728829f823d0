"""Debian bookworm base images made with mmdebstrap, and buildah on a private vfs store.

Why this module exists: no registry here serves base images, so the Containerfile's two
`FROM`s are satisfied by local images whose root filesystems mmdebstrap builds from the
Debian archive: the builder's (python3, python3-venv) and the runtime's (python3 only: no
compiler, no pip). Each base is a tarball in the cache, keyed on what it holds, and is imported
into buildah's store (vfs driver, under the cache) as `localhost/gpucellpool/base-NAME:KEY`.
Those packages are already installed, so the Containerfile's apt-get steps are skipped here.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SUITE = "bookworm"
# Like debian:bookworm-slim: no documentation, manual pages or translations.
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Base:
    """One base image: its role in the Containerfile and the Debian packages it holds."""

    name: str
    packages: tuple[str, ...]

    @property
    def key(self) -> str:
        text = "\n".join([SUITE, "apt", *self.packages, *DPKG_EXCLUDES])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def reference(self) -> str:
        return f"localhost/gpucellpool/base-{self.name}:{self.key}"


BUILDER = Base("builder", ("python3", "python3-venv"))
RUNTIME = Base("runtime", ("python3",))


class Buildah:
    """buildah on a store of its own (vfs: works without overlay or fuse in a sandbox)."""

    def __init__(self, cache: Path) -> None:
        # buildah keeps RUN --mount=type=cache directories (pip's downloads) under $TMPDIR.
        self.tmpdir = cache / "tmp"
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "TMPDIR": str(self.tmpdir)}
        self.argv = [
            "buildah",
            "--root",
            str(cache / "storage"),
            "--runroot",
            str(cache / "run"),
            "--storage-driver",
            "vfs",
        ]

    def run(self, *args: str, capture: bool = False) -> str:
        proc = subprocess.run(
            [*nice(), *self.argv, *args],
            check=False,
            stdout=subprocess.PIPE if capture else sys.stderr,
            stderr=subprocess.PIPE if capture else None,
            text=True,
            env=self.env,
        )
        if proc.returncode != 0:
            detail = (proc.stderr or "").strip().splitlines()[-3:] if capture else []
            raise RuntimeError(f"buildah {args[0]} failed (exit {proc.returncode}) {detail}")
        return (proc.stdout or "").strip()

    def has_image(self, reference: str) -> bool:
        proc = subprocess.run(
            [*self.argv, "inspect", "--type", "image", reference],
            capture_output=True,
            check=False,
            env=self.env,
        )
        return proc.returncode == 0


def nice() -> list[str]:
    """`nice -n 10`: the build shares two cores with test runs."""
    found = shutil.which("nice")
    return [found, "-n", "10"] if found else []


def rootfs_tarball(base: Base, cache: Path) -> Path:
    """The base's root filesystem as a tarball in the cache, made by mmdebstrap if absent."""
    target = cache / "bases" / f"{base.name}-{base.key}.tar"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial.tar")
    started = time.monotonic()
    print(f"mmdebstrap {SUITE} + {' '.join(base.packages)} (about a minute)", file=sys.stderr)
    argv = [
        *nice(),
        "mmdebstrap",
        "--quiet",
        "--variant=apt",
        f"--include={','.join(base.packages)}",
        *(f"--dpkgopt={rule}" for rule in DPKG_EXCLUDES),
        SUITE,
        str(partial),
    ]
    env = {**os.environ, "SOURCE_DATE_EPOCH": os.environ.get("SOURCE_DATE_EPOCH", "0")}
    subprocess.run(argv, check=True, env=env)
    os.replace(partial, target)
    print(f"  {base.name} base: {time.monotonic() - started:.0f} s", file=sys.stderr)
    return target


def ensure_base(base: Base, cache: Path, buildah: Buildah) -> str:
    """The base's image reference in buildah's store, built and imported when missing."""
    if buildah.has_image(base.reference):
        return base.reference
    tarball = rootfs_tarball(base, cache)
    container = buildah.run("from", "--pull=never", "scratch", capture=True)
    try:
        buildah.run("add", "--quiet", container, str(tarball), "/", capture=True)
        buildah.run("config", "--env", PATH_ENV, "--cmd", "/bin/sh", container, capture=True)
        buildah.run("commit", "--quiet", "--rm", container, base.reference, capture=True)
    except RuntimeError:
        subprocess.run([*buildah.argv, "rm", container], capture_output=True, check=False)
        raise
    return base.reference
