"""One policy, two worlds: the simulator replays exactly what the live operator would run.

A user tests a policy on a trace before trusting it; that is only honest if the simulator's
default configuration is what a freshly created autoscaling pool maps to, and if the simulator
calls the production ``decide`` itself rather than a copy.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autoscaler.policy import decide as decide_module
from autoscaler.policy.config import policy_config_from_spec
from autoscaler.policy.policy_config import PolicyConfig
from gpucellpool.api import GPUCellPool
from simulations.simulator.engine import policy as sim_policy

# Knobs that describe the pool itself rather than the policy's defaults.
POOL_FACTS = {"min_replicas", "max_replicas", "shape", "node_template"}


def _minimal_autoscaling_pool() -> GPUCellPool:
    body: dict[str, Any] = {
        "apiVersion": "cells.kubeswift.io/v1alpha1",
        "kind": "GPUCellPool",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "cell": {
                "guestTemplate": {"guestClassRef": {"name": "c"}, "imageRef": {"name": "i"}},
                "gpu": {"dra": {"resourceClaimTemplateName": "t"}},
            },
            "bootstrap": {"joinSecretRef": {"name": "join"}},
            "workloadCluster": {"kubeconfigSecretRef": {"name": "kc"}},
            "autoscaling": {
                "enabled": True,
                "minReplicas": 0,
                "maxReplicas": 50,
                "scaleDown": "Auto",
            },
        },
    }
    return GPUCellPool.model_validate(body)


def test_simulator_defaults_equal_a_fresh_autoscaling_pool() -> None:
    live = policy_config_from_spec(_minimal_autoscaling_pool().spec)
    simulated = PolicyConfig()
    differing = {
        f.name
        for f in dataclasses.fields(PolicyConfig)
        if f.name not in POOL_FACTS and getattr(live, f.name) != getattr(simulated, f.name)
    }
    assert differing == set(), {n: (getattr(live, n), getattr(simulated, n)) for n in differing}


def test_simulator_calls_the_production_decide() -> None:
    assert vars(sim_policy)["decide"] is decide_module.decide
    assert "gpucellpool" in {sim_policy.ProductionPolicy().name}
