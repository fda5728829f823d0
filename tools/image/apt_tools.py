"""The Debian tools the image build and the image test need, installed with apt-get if missing.

Why this module exists: a fresh machine has none of mmdebstrap, buildah, umoci or runc, and no
container engine or base-image registry; the Debian archive is the one source for all of them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

# command -> Debian package
TOOLS = {"mmdebstrap": "mmdebstrap", "buildah": "buildah", "umoci": "umoci", "runc": "runc"}


class ToolError(RuntimeError):
    """A tool is missing and apt-get cannot install it here."""


def missing(commands: tuple[str, ...] = tuple(TOOLS)) -> list[str]:
    return [c for c in commands if shutil.which(c) is None]


def ensure(commands: tuple[str, ...] = tuple(TOOLS)) -> None:
    """Install the Debian packages of `commands` that are not on PATH (apt-get update first)."""
    absent = missing(commands)
    if not absent:
        return
    packages = sorted({TOOLS[c] for c in absent})
    if shutil.which("apt-get") is None:
        raise ToolError(f"{', '.join(absent)} missing and no apt-get to install {packages}")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    print(f"installing {' '.join(packages)} with apt-get", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(
            [*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
            check=True,
            env=env,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ToolError(f"apt-get could not install {packages}: {exc}") from exc
    if still := missing(commands):
        raise ToolError(f"{', '.join(still)} still missing after apt-get install")
