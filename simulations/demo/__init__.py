"""``gpucellpool demo`` and the twin run behind it (the fidelity test and benchmark share it).

``run_twin(spec)`` replays a compressed trace slice through the real operator on the twin and
records cells and pod waits; ``build_report`` puts it next to ``simulate`` on the same inputs.
See docs/simulation.md, "The twin and ``make demo``".
"""

from simulations.demo.config import DemoSpec, compressed_pods, sim_config, sim_policy
from simulations.demo.report import DemoReport, build_report, write_report
from simulations.demo.twin_run import TwinResult, run_twin

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
