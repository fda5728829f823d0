"""A run keeps exactly the pods a fresh cell could host, judged once per (ask, selector).

Why this file exists: ``engine.hostable`` memoises the per-pod fit of a trace's pods (issue 14,
simulator speed); the kept pods and the unschedulable count must be what judging every pod on
its own gives, for asks too big for the cell shape and node selectors the template lacks.
"""

from __future__ import annotations

import random

from autoscaler.policy.fit import constraints_fit
from autoscaler.policy.policy_config import PolicyConfig
from autoscaler.policy.types import CellShape, GPUAsk, NodeTemplate
from simulations.simulator.engine import SimConfig, hami
from simulations.simulator.engine.hostable import hostable_pods
from simulations.simulator.engine.policy import ProductionPolicy
from simulations.simulator.engine.sim import Simulation
from simulations.simulator.traces import TracePod

ASKS = (
    GPUAsk(memory_percent=100, cores_percent=100),
    GPUAsk(gpu_count=2, memory_percent=50, cores_percent=50),
    GPUAsk(gpu_count=8),  # more GPUs than a 4-GPU cell has
    GPUAsk(memory_mib=10**7),  # more memory than a GPU has
)
SELECTORS = ((), (("zone", "a"),), (("zone", "b"),))


def test_kept_pods_are_those_a_fresh_cell_hosts_one_by_one() -> None:
    rng = random.Random(3)
    shape = CellShape(gpus=4)
    config = SimConfig(
        policy_config=PolicyConfig(shape=shape, node_template=NodeTemplate(labels={"zone": "a"}))
    )
    pods = [
        TracePod(f"p{i}", float(i), 60.0, rng.choice(ASKS), node_selector=rng.choice(SELECTORS))
        for i in range(400)
    ]
    template = config.policy_config.node_template
    plain = [
        p
        for p in pods
        if hami.fits_fresh_cell(p.ask, shape) and constraints_fit(p.constraints(), template).ok
    ]
    kept = hostable_pods(pods, config)
    assert kept == plain
    assert 0 < len(kept) < len(pods) / 2  # both verdicts occur
    assert Simulation(pods, ProductionPolicy(), config).unschedulable == len(pods) - len(kept)
