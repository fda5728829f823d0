"""Which pods of a trace a run can ever place: the ones a fresh cell of the pool could host.

Why this module exists: a pod no empty cell can hold (its ask, or placement constraints the
pool's Node template never meets) is left out of the run and counted as unschedulable. Judging
that is a HAMi GPU choice and a constraint check per pod, a visible share of a short replay's
set-up on a 100,000-pod trace; traces repeat a few (ask, node selector) pairs, so each pair is
judged once. Gangs are filtered afterwards (``engine.gangs.hostable_gangs``).
"""

from __future__ import annotations

from collections.abc import Sequence

from autoscaler.policy.fit import constraints_fit
from autoscaler.policy.types import GPUAsk
from simulations.simulator.engine import hami
from simulations.simulator.engine.config import SimConfig
from simulations.simulator.traces.model import TracePod

Key = tuple[GPUAsk, tuple[tuple[str, str], ...]]  # what the verdict depends on


def hostable_pods(pods: Sequence[TracePod], config: SimConfig) -> list[TracePod]:
    """The pods of ``pods`` a fresh cell of ``config``'s pool could host, in trace order."""
    shape, template = config.policy_config.shape, config.policy_config.node_template
    verdicts: dict[Key, bool] = {}
    kept = []
    for pod in pods:
        key = (pod.ask, pod.node_selector)
        ok = verdicts.get(key)
        if ok is None:
            ok = verdicts[key] = (
                hami.fits_fresh_cell(pod.ask, shape)
                and constraints_fit(pod.constraints(), template).ok
            )
        if ok:
            kept.append(pod)
    return kept
