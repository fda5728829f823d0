"""The expander across pools: one pending pod, one pool (priority, then least waste, then name).

What these prove: a pod several pools could serve is kept by exactly one of them, chosen by
priority, then least waste on a fresh cell (memory + cores fractions, exact), then the pool
key; every other pool that matched it says who took it and why, and the taker says whom it
beat; a pod no pool fits stays with every pool that matched it (each reports it
unschedulable); an ineligible pool never takes; the answer does not depend on the order of
the pools or of the pods (every pool's task computes it alone and must agree); the API's
priority is bounded to -1000..1000 (the webhook names the field) and absent means 0.
"""

from __future__ import annotations

import copy
import random
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.policy.expander import Choice, PoolOption, assign, waste
from autoscaler.policy.types import (
    CellShape,
    GPUAsk,
    NodeTemplate,
    PendingPod,
    PlacementConstraints,
)
from gpucellpool.api.autoscaling import AutoscalingSpec
from tests.unit.test_webhook_rules import POOL as WEBHOOK_POOL
from webhook.rules import validate_create

SMALL = CellShape(gpus=1, memory_mib=24576, cores_percent=100, slots=10)
BIG = CellShape(gpus=1, memory_mib=81920, cores_percent=100, slots=10)
PLAIN = NodeTemplate()


def pod(key: str, mem: int = 20000, cores: int = 50, gpus: int = 1, **selector: str) -> PendingPod:
    return PendingPod(key, GPUAsk(gpus, mem, None, cores), 0.0, PlacementConstraints(selector))


def option(key: str, priority: int = 0, shape: CellShape = SMALL, **labels: str) -> PoolOption:
    return PoolOption(key, priority, shape, NodeTemplate(labels))


def test_waste_is_unused_memory_plus_unused_cores_of_the_whole_cell() -> None:
    assert waste(pod("p", 12288, 50), SMALL) == Fraction(1, 2) + Fraction(1, 2)
    two = CellShape(gpus=2, memory_mib=24576, cores_percent=100, slots=10)
    # one GPU of two taken whole: half the cell's memory and cores unused
    assert waste(pod("p", 24576, 100), two) == Fraction(1, 2) + Fraction(1, 2)
    assert waste(pod("p", 30000), SMALL) is None  # does not fit one GPU


def test_priority_wins_over_waste_and_the_loser_says_so() -> None:
    p = pod("ns/p")
    shares = assign(
        {"a/low": [p], "b/high": [p]},
        {"a/low": option("a/low"), "b/high": option("b/high", 5, BIG)},
    )
    assert shares["b/high"].kept == (p,) and shares["a/low"].kept == ()
    given_away = shares["a/low"].given_away[0]
    assert (given_away.taker, given_away.reason) == ("b/high", Choice.PRIORITY)
    assert "priority 5 > 0" in given_away.message
    taken = shares["b/high"].taken[0]
    assert (taken.others, taken.reason) == (("a/low",), Choice.PRIORITY)


def test_same_priority_least_waste_picks_the_tighter_cell() -> None:
    p = pod("ns/p", mem=20000)
    shares = assign(
        {"a/big": [p], "z/small": [p]},
        {"a/big": option("a/big", shape=BIG), "z/small": option("z/small")},
    )
    assert shares["z/small"].kept == (p,) and shares["a/big"].kept == ()
    assert shares["a/big"].given_away[0].reason is Choice.LEAST_WASTE
    assert shares["z/small"].taken[0].reason is Choice.LEAST_WASTE


def test_full_tie_goes_to_the_name_that_sorts_first() -> None:
    p = pod("ns/p")
    shares = assign({"ns/b": [p], "ns/a": [p]}, {"ns/b": option("ns/b"), "ns/a": option("ns/a")})
    assert shares["ns/a"].kept == (p,) and shares["ns/b"].kept == ()
    assert shares["ns/b"].given_away[0].reason is Choice.NAME


def test_a_higher_priority_pool_that_cannot_host_the_pod_does_not_take_it() -> None:
    p = pod("ns/p", gpu="a100")
    options = {
        "ns/h100": option("ns/h100", 9, gpu="h100"),
        "ns/a100": option("ns/a100", gpu="a100"),
    }
    shares = assign({"ns/h100": [p], "ns/a100": [p]}, options)
    assert shares["ns/a100"].kept == (p,) and shares["ns/h100"].kept == ()
    assert shares["ns/h100"].given_away[0].reason is Choice.FIT
    assert shares["ns/a100"].taken[0].reason is Choice.FIT


def test_a_pod_no_pool_fits_stays_with_every_pool_that_matched_it() -> None:
    p = pod("ns/p", mem=100000)
    shares = assign({"ns/a": [p], "ns/b": [p]}, {"ns/a": option("ns/a"), "ns/b": option("ns/b")})
    assert shares["ns/a"].kept == (p,) and shares["ns/b"].kept == (p,)
    assert not shares["ns/a"].given_away and not shares["ns/b"].taken


def test_an_ineligible_pool_never_takes() -> None:
    p = pod("ns/p")
    shares = assign({"ns/a": [p], "ns/gone": [p]}, {"ns/a": option("ns/a", -5)})
    assert shares["ns/a"].kept == (p,) and shares["ns/gone"].kept == ()
    assert shares["ns/gone"].given_away[0].reason is Choice.INELIGIBLE


def test_uncontested_pods_are_kept_in_the_pool_s_order() -> None:
    pods = [pod(f"ns/p{i}") for i in (3, 1, 2)]
    share = assign({"ns/a": pods}, {"ns/a": option("ns/a")})["ns/a"]
    assert share.kept == tuple(pods) and not share.given_away and not share.taken


# -- properties ----------------------------------------------------------------------------

SHAPES = [SMALL, BIG, CellShape(gpus=2, memory_mib=40960, cores_percent=100, slots=4)]
pools = st.lists(
    st.builds(
        option,
        st.sampled_from(["a/x", "a/y", "b/x", "c/z"]),
        st.integers(-2, 2),
        st.sampled_from(SHAPES),
    ),
    min_size=1,
    max_size=4,
    unique_by=lambda o: o.key,
)
pods = st.lists(
    st.builds(
        pod,
        st.sampled_from([f"ns/p{i}" for i in range(8)]),
        st.integers(1000, 90000),
        st.sampled_from([0, 30, 100]),
        st.integers(1, 3),
    ),
    max_size=8,
    unique_by=lambda p: p.key,
)


@st.composite
def worlds(draw: st.DrawFn) -> tuple[dict[str, list[PendingPod]], dict[str, PoolOption]]:
    options = {o.key: o for o in draw(pools)}
    all_pods = draw(pods)
    wanted = {key: [p for p in all_pods if draw(st.booleans())] for key in options}
    return wanted, options


@given(worlds(), st.randoms(use_true_random=False))
def test_each_fitting_pod_is_kept_by_exactly_one_pool_whatever_the_order(
    world: tuple[dict[str, list[PendingPod]], dict[str, PoolOption]], rnd: random.Random
) -> None:
    wanted, options = world
    shares = assign(wanted, options)
    keys = list(wanted)
    rnd.shuffle(keys)
    shuffled = {k: rnd.sample(wanted[k], len(wanted[k])) for k in keys}
    again = assign(shuffled, dict(reversed(list(options.items()))))
    for pool in wanted:
        assert {p.key for p in shares[pool].kept} == {p.key for p in again[pool].kept}
        assert shares[pool].given_away == again[pool].given_away
        assert shares[pool].taken == again[pool].taken
    for key in {p.key for ps in wanted.values() for p in ps}:
        matched = [pool for pool in wanted if any(p.key == key for p in wanted[pool])]
        keepers = [pool for pool in matched if any(p.key == key for p in shares[pool].kept)]
        givers = [g for pool in matched for g in shares[pool].given_away if g.pod == key]
        if len(keepers) == 1:  # a fitting pod: one keeper, every other matcher gave it to it
            assert len(givers) == len(matched) - 1
            assert all(g.taker == keepers[0] for g in givers)
        else:  # no pool fits it: every matcher keeps it, nobody gives it away
            assert keepers == matched and not givers


@given(worlds())
def test_the_taker_ranks_first_among_the_pools_that_fit(
    world: tuple[dict[str, list[PendingPod]], dict[str, PoolOption]],
) -> None:
    wanted, options = world
    shares = assign(wanted, options)
    for pool, share in shares.items():
        for given_away in share.given_away:
            taker = options[given_away.taker]
            mine = options[pool]
            pending = next(p for p in wanted[pool] if p.key == given_away.pod)
            my_waste = waste(pending, mine.shape)
            if given_away.reason is Choice.PRIORITY:
                assert taker.priority > mine.priority
            elif given_away.reason is Choice.LEAST_WASTE:
                assert taker.priority == mine.priority
                taker_waste = waste(pending, taker.shape)
                assert my_waste is not None and taker_waste is not None
                assert taker_waste < my_waste
            elif given_away.reason is Choice.NAME:
                assert taker.priority == mine.priority and taker.key < mine.key
            else:
                assert given_away.reason is Choice.FIT and my_waste is None


# -- the API field -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "ok"), [(-1000, True), (1000, True), (1001, False), (-1001, False)]
)
def test_priority_is_bounded_and_the_webhook_names_the_field(value: int, ok: bool) -> None:
    obj = copy.deepcopy(WEBHOOK_POOL)
    obj["spec"]["autoscaling"] = {"enabled": True, "minReplicas": 0, "maxReplicas": 2}
    obj["spec"]["autoscaling"]["priority"] = value
    verdict = validate_create(obj)
    assert verdict.allowed is ok, verdict.message()
    if not ok:
        assert "spec.autoscaling.priority" in {r.path for r in verdict.reasons}


def test_a_manifest_without_priority_means_priority_zero() -> None:
    assert AutoscalingSpec.model_validate({}).priority == 0
