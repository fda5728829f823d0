"""Which changed observations ``decide`` would answer exactly as before.

Why this module exists: a pod landing on a cell, or leaving one, gives a new observation, yet
most of the time ``decide`` answers exactly as before. With nothing pending to pack, a decision
reads the cells only through counts and each cell's facts (its state, whether it is empty,
below the utilisation threshold, a draining cell still busy; ``cell_index.fact_key``), unless it
chose victims with some disruption budget left (then it re-packed their pods, reading other
cells' usage). ``reads`` says which (``Steady.reads``); ``holds_after`` says whether a new
observation differs only in what the decision did not read, so a caller may repeat it instead
of calling ``decide`` (the simulator: most of a month's calls were such). The memory those
skipped calls would have written is ``next_change.advance``'s, as for a skip in time: with the
same facts, the same raw recommendation, demand sample and idle set.

Exact by construction, and conservative: whatever is not shown to be unread counts as read.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import fields

from autoscaler.policy.cell_index import fact_key, index_of
from autoscaler.policy.decision import Reads, Reason, Steady
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellView, Observation

# Outcomes of the victim choice (``decide_paths.scale_down``'s last stage). DisruptionBudget
# is given only with no budget left and no victim (``scale_down.choose_victims``): then no
# pod was re-packed and every candidate was visited, so the answer is "an eligible cell holds
# pods, and no empty one may go": facts. The others may have re-packed pods.
_REPACKED = frozenset({Reason.NO_IDLE_CELL, Reason.SCALED_DOWN})
# Every field of an observation but its cells: all must be equal for a repeat.
_OTHER_FIELDS = tuple(f.name for f in fields(Observation) if f.name != "cells")


def reads(
    observation: Observation,
    config: PolicyConfig,
    reason: Reason,
    scale_down_path: bool,
    packed: bool,
    hedged: bool,
) -> Reads:
    """What of the cells a decision with ``reason`` read.

    ``scale_down_path``: it took ``decide``'s scale-down path (raw below current);
    ``packed``: pending (or displaced) pods were packed, which reads every cell's usage;
    ``hedged``: spare boots were weighed (``policy.hedge`` reads the booting cells)."""
    if packed or hedged or (scale_down_path and reason in _REPACKED):
        return Reads.CELLS
    if not index_of(observation.cells, config.shape, config.utilization_threshold).exact:
        return Reads.CELLS  # names repeat: facts are looked up by name, not per cell
    return Reads.FACTS


def _same_cell(before: CellView, after: CellView, config: PolicyConfig) -> bool:
    """``after`` is ``before`` changed only in what a decision reading facts ignores."""
    if (before.name, before.index, before.state, before.created_at, before.ready_at) != (
        after.name,
        after.index,
        after.state,
        after.created_at,
        after.ready_at,
    ):
        return False
    shape, threshold = config.shape, config.utilization_threshold
    return fact_key(before, shape, threshold) == fact_key(after, shape, threshold)


def holds_after(
    steady: Steady, before: Observation, after: Observation, config: PolicyConfig
) -> bool:
    """Whether ``decide`` on ``after`` gives the decision it gave on ``before`` (which it
    made with ``steady``, before ``steady.until``), recording the same in memory.

    True when the decision read only facts and ``after`` differs from ``before`` only in cell
    views with the same identity and facts: same other fields, nothing pending in either,
    the same cells in the same places."""
    if steady.reads is not Reads.FACTS or before.pending or after.pending:
        return False
    for name in _OTHER_FIELDS:  # the same object (the simulator's metrics) is equal
        value = getattr(before, name)
        if value is not getattr(after, name) and value != getattr(after, name):
            return False
    old, new = before.cells, after.cells
    if len(old) != len(new):
        return False
    moved = itertools.compress(range(len(new)), map(operator.is_not, old, new))
    return all(_same_cell(old[i], new[i], config) for i in moved)
