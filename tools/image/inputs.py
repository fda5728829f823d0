"""The image's inputs: staged into one directory and hashed, so the cache key is what is built.

Why this module exists: eight people edit the working tree at once. Hashing the tree and then
letting buildah read it later could build something other than what the key names, so the
files that go into the wheel (and the Containerfile) are copied once into a private build
context, the key is the hash of that copy (plus the builder scripts), and buildah builds it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# What the Containerfile copies (keep in step with it and with .containerignore).
CONTEXT_FILES = ("Containerfile", ".containerignore", "pyproject.toml", "README.md", "LICENSE")
PACKAGES = ("gpucellpool", "autoscaler", "provisioner", "webhook", "simulations")
SKIPPED_DIRS = {"__pycache__"}
SKIPPED_SUFFIXES = (".pyc", ".pyo")


def project_version(root: Path = REPO_ROOT) -> str:
    """`[project].version` of pyproject.toml: the image tag and its version label."""
    with (root / "pyproject.toml").open("rb") as handle:
        return str(tomllib.load(handle)["project"]["version"])


def _package_files(root: Path) -> list[Path]:
    found: list[Path] = []
    for package in PACKAGES:
        for directory, dirs, files in os.walk(root / package):
            dirs[:] = sorted(
                d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")
            )
            for name in sorted(files):
                if not name.endswith(SKIPPED_SUFFIXES):
                    found.append(Path(directory, name).relative_to(root))
    return found


def stage(context: Path, root: Path = REPO_ROOT) -> list[Path]:
    """Copy the build context's files from `root` into `context`; returns their relative paths."""
    files = [Path(name) for name in CONTEXT_FILES] + _package_files(root)
    for relative in files:
        target = context / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / relative, target)
    return files


def builder_files() -> list[Path]:
    """The scripts that shape the image (a change to them is a new image)."""
    return sorted(p for p in HERE.iterdir() if p.suffix in (".py", ".sh") and p.is_file())


def digest_of(context: Path, files: list[Path], extra: dict[str, str]) -> str:
    """sha256 over every staged file (path and bytes), the builder scripts and `extra`."""
    hasher = hashlib.sha256()
    for relative in sorted(files):
        hasher.update(f"file {relative.as_posix()}\0".encode())
        hasher.update(hashlib.sha256((context / relative).read_bytes()).digest())
    for script in builder_files():
        hasher.update(f"builder {script.name}\0".encode())
        hasher.update(hashlib.sha256(script.read_bytes()).digest())
    for key in sorted(extra):
        hasher.update(f"extra {key}={extra[key]}\0".encode())
    return hasher.hexdigest()


def revision(root: Path = REPO_ROOT) -> str:
    """The commit checked out, `-dirty` when an input differs from it; `unknown` without git."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        changes = subprocess.run(
            ["git", "status", "--porcelain", "--", *CONTEXT_FILES, *PACKAGES],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}-dirty" if changes else head
