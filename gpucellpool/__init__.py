"""gpucellpool: pools of VM-isolated, HAMi-shared GPU worker nodes that size themselves."""

__version__ = "0.1.0.dev0"
