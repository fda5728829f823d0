"""``gpucellpool demo`` and the twin run behind it (the fidelity test and benchmark share it).

``run_twin(spec)`` replays a compressed trace slice through the real operator on the twin and
records cells and pod waits; ``build_report`` puts it next to ``simulate`` on the same inputs.
See docs/simulation.md, "The twin and ``make demo``". Names load lazily so that a bad
``gpucellpool demo`` flag is refused in a second, before the twin's imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulations.demo.config import DemoSpec, compressed_pods, sim_config, sim_policy
    from simulations.demo.report import DemoReport, build_report, write_report
    from simulations.demo.twin_run import TwinResult, run_twin

_LAZY = {
    "DemoSpec": "config",
    "compressed_pods": "config",
    "sim_config": "config",
    "sim_policy": "config",
    "DemoReport": "report",
    "build_report": "report",
    "write_report": "report",
    "TwinResult": "twin_run",
    "run_twin": "twin_run",
}

__all__ = [
    "DemoReport",
    "DemoSpec",
    "TwinResult",
    "build_report",
    "compressed_pods",
    "run_twin",
    "sim_config",
    "sim_policy",
    "write_report",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
