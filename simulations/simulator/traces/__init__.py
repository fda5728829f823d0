"""Demand traces: what pods arrive, when, for how long, and what they ask of HAMi.

Loaders turn public traces (Alibaba GPU 2023 "openb") and a documented generic CSV/JSONL format
into one sorted tuple of frozen ``TracePod`` values; ``rescale`` reshapes a trace (window, time
compression, arrival multiplier, duration scale) so one trace can stress pools of any size.
"""

from simulations.simulator.traces.bundled import BUNDLED_OPENB_PATH
from simulations.simulator.traces.generic import load_generic, write_generic
from simulations.simulator.traces.model import LoadResult, Malformed, TracePod
from simulations.simulator.traces.openb import load_bundled, load_openb, openb_ask
from simulations.simulator.traces.rescale import RescaleSpec, rescale
from simulations.simulator.traces.synthetic import synthetic

__all__ = [
    "BUNDLED_OPENB_PATH",
    "LoadResult",
    "Malformed",
    "RescaleSpec",
    "TracePod",
    "load_bundled",
    "load_generic",
    "load_openb",
    "openb_ask",
    "rescale",
    "synthetic",
    "write_generic",
]
