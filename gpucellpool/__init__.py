"""gpucellpool: pools of VM-isolated, HAMi-shared GPU worker nodes that size themselves."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gpucellpool")  # one source: pyproject.toml
except PackageNotFoundError:  # pragma: no cover - running from a tree that was never installed
    __version__ = "0.0.0+unknown"
