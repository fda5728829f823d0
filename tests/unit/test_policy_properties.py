"""Property tests of decide: bounds, stale metrics, forecast never removes, determinism."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.policy.decide import decide
from autoscaler.policy.decision import Reason
from autoscaler.policy.policy_config import PolicyConfig, RatePolicy, RatePolicyType, ScalingRules
from autoscaler.policy.types import (
    CellShape,
    CellState,
    CellView,
    GPUAsk,
    GPUUsage,
    MetricsHealth,
    Observation,
    PendingPod,
    PolicyMemory,
)

NOW = 50_000.0
SHAPE = CellShape(gpus=2, memory_mib=24000, cores_percent=100, slots=4)

asks = st.builds(
    GPUAsk,
    gpu_count=st.integers(1, 3),
    memory_mib=st.one_of(st.none(), st.integers(500, 26000)),
    memory_percent=st.one_of(st.none(), st.integers(1, 100)),
    cores_percent=st.sampled_from([0, 10, 50, 100]),
)
usages = st.builds(
    GPUUsage,
    memory_mib=st.integers(0, 24000),
    cores_percent=st.sampled_from([0, 30, 100]),
    slots=st.integers(0, 4),
)


@st.composite
def cells(draw: st.DrawFn) -> tuple[CellView, ...]:
    out = []
    for i in range(draw(st.integers(0, 8))):
        state = draw(st.sampled_from(list(CellState)))
        gpus = tuple(draw(st.lists(usages, min_size=2, max_size=2)))
        pods = sum(g.slots for g in gpus)
        out.append(CellView(f"c{i}", i, state, NOW - 3000, gpus=gpus, pods=pods))
    return tuple(out)


@st.composite
def observations(draw: st.DrawFn) -> Observation:
    pending = tuple(
        PendingPod(f"ns/p{i}", a, NOW - 10) for i, a in enumerate(draw(st.lists(asks, max_size=12)))
    )
    return Observation(
        pending,
        draw(cells()),
        MetricsHealth(fresh=draw(st.booleans())),
        draw(st.one_of(st.none(), st.integers(0, 10))),
        draw(st.booleans()),
    )


@st.composite
def configs(draw: st.DrawFn) -> PolicyConfig:
    lo = draw(st.integers(0, 4))
    hi = draw(st.integers(max(lo, 1), 12))
    rate = draw(st.sampled_from([(), (RatePolicy(RatePolicyType.CELLS, 2, 60.0),)]))
    return PolicyConfig(
        min_replicas=lo,
        max_replicas=hi,
        shape=SHAPE,
        scale_up=ScalingRules(draw(st.sampled_from([0.0, 60.0])), rate),
        scale_down=ScalingRules(draw(st.sampled_from([0.0, 300.0])), rate),
        scale_down_delay_after_scale_up_seconds=draw(st.sampled_from([0.0, 600.0])),
        max_cells_in_flight=draw(st.integers(0, 4)),
        disruption_budget=draw(st.integers(0, 3)),
        headroom_cells=draw(st.integers(0, 2)),
        prewarm=draw(st.booleans()),
        packing_heuristic=draw(st.sampled_from(["first-fit", "best-fit", "arrival"])),
    )


@st.composite
def memories(draw: st.DrawFn) -> PolicyMemory:
    names = [f"c{i}" for i in range(8)]
    ages = st.sampled_from([0.0, 100.0, 5000.0])
    idle = {n: NOW - draw(ages) for n in names if draw(st.booleans())}
    recs = tuple((NOW - t, draw(st.integers(0, 12))) for t in draw(st.lists(st.floats(1, 900))))
    count = draw(st.integers(0, 8))
    samples = tuple((NOW - 60.0 * k, float(draw(st.integers(0, 12)))) for k in range(count, 0, -1))
    last_up = draw(st.one_of(st.none(), st.sampled_from([NOW - 100, NOW - 5000])))
    return PolicyMemory(
        last_scale_up_at=last_up, recommendations=recs, idle_since=idle, demand_samples=samples
    )


def current(obs: Observation) -> int:
    return sum(1 for c in obs.cells if c.state in (CellState.READY, CellState.BOOTING))


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(obs=observations(), mem=memories(), cfg=configs())
def test_desired_within_min_and_max(obs: Observation, mem: PolicyMemory, cfg: PolicyConfig) -> None:
    d = decide(obs, mem, cfg, NOW)
    assert d.desired_replicas >= cfg.min_replicas
    if current(obs) <= cfg.max_replicas:
        assert d.desired_replicas <= cfg.max_replicas
    if d.victims:
        assert d.desired_replicas == current(obs) - len(d.victims)
    assert d.reason.value and d.message


@SETTINGS
@given(obs=observations(), mem=memories(), cfg=configs())
def test_never_scales_down_on_stale_metrics_or_unreachable_cluster(
    obs: Observation, mem: PolicyMemory, cfg: PolicyConfig
) -> None:
    stale = replace(obs, metrics=MetricsHealth(fresh=False, detail="stale"))
    for o in (stale, replace(obs, workload_cluster_reachable=False)):
        d = decide(o, mem, cfg, NOW)
        assert d.victims == ()
        assert d.desired_replicas >= min(current(o), max(cfg.max_replicas, cfg.min_replicas))


@SETTINGS
@given(obs=observations(), mem=memories(), cfg=configs())
def test_forecast_never_removes_a_cell(
    obs: Observation, mem: PolicyMemory, cfg: PolicyConfig
) -> None:
    with_forecast = decide(obs, mem, replace(cfg, prewarm=True), NOW)
    without = decide(obs, mem, replace(cfg, prewarm=False), NOW)
    assert with_forecast.desired_replicas >= without.desired_replicas
    assert set(with_forecast.victims) <= set(without.victims)


@SETTINGS
@given(obs=observations(), mem=memories(), cfg=configs())
def test_decide_is_deterministic(obs: Observation, mem: PolicyMemory, cfg: PolicyConfig) -> None:
    assert decide(obs, mem, cfg, NOW) == decide(obs, mem, cfg, NOW)


@SETTINGS
@given(obs=observations(), mem=memories(), cfg=configs())
def test_victims_are_ready_cells_within_budget_and_never_with_a_backlog(
    obs: Observation, mem: PolicyMemory, cfg: PolicyConfig
) -> None:
    d = decide(obs, mem, cfg, NOW)
    ready = {c.name for c in obs.cells if c.state == CellState.READY}

    def busy(c: CellView) -> bool:
        return c.pods > 0 or any(g.slots for g in c.gpus)

    draining = sum(1 for c in obs.cells if c.state == CellState.DRAINING and busy(c))
    by_name = {c.name: c for c in obs.cells}
    booting = {c.name for c in obs.cells if c.state == CellState.BOOTING}
    cancelled = set(d.victims) - ready
    assert cancelled <= booting  # a cancelled surplus boot (the hedge), never a Draining cell
    if cancelled:  # cancelled boots run nothing and are marked so (VictimInUse re-checks)
        assert d.reason == Reason.SPARES_CANCELLED
        assert set(d.victims) == set(d.empty_victims)
    assert len(set(d.victims)) == len(d.victims)
    busy_victims = [v for v in d.victims if busy(by_name[v])]
    assert len(busy_victims) <= max(0, cfg.disruption_budget - draining)
    if d.cells_needed > 0:
        assert d.victims == ()
        assert d.desired_replicas >= min(current(obs), max(cfg.max_replicas, cfg.min_replicas))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    obs=observations(),
    mem=memories(),
    cfg=configs(),
    gpus=st.integers(1, 3),
    extra=st.lists(usages, max_size=4),
)
def test_decide_tolerates_cells_that_disagree_with_the_shape(
    obs: Observation, mem: PolicyMemory, cfg: PolicyConfig, gpus: int, extra: list[GPUUsage]
) -> None:
    odd = tuple(replace(c, gpus=tuple(extra)) for c in obs.cells)
    config = replace(cfg, shape=replace(cfg.shape, gpus=gpus))
    d = decide(replace(obs, cells=odd), mem, config, NOW)
    assert d.desired_replicas >= config.min_replicas
    assert d.reason.value
