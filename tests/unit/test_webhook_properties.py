"""Property tests: the admission rules never raise and always return a well-formed verdict.

The rules face whatever an apiserver (or an attacker with create rights) sends, so they must be
total: 10,000 generated objects, from near-valid pools with a few mutations at random paths
(random JSON of any type, deleted fields, tricky keys) to pure junk, go through create, update
and scale; each verdict must be consistent (allowed exactly when there is no reason), bounded,
made of non-empty path/message pairs, deterministic, and the input must not be mutated.
"""

from __future__ import annotations

import copy
import json
import random
import time
import zlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.rules import (
    FieldError,
    RuleSettings,
    Verdict,
    validate_create,
    validate_scale,
    validate_update,
)
from webhook.rules.guest_fields import KNOWN, NESTED_KNOWN
from webhook.rules.paths import get
from webhook.rules.verdict import MAX_REASONS

BASE: dict[str, Any] = {
    "apiVersion": "cells.kubeswift.io/v1alpha1",
    "kind": "GPUCellPool",
    "metadata": {"name": "prop", "namespace": "cells"},
    "spec": {
        "replicas": 2,
        "cell": {
            "guestTemplate": {
                "guestClassRef": {"name": "c"},
                "imageRef": {"name": "i"},
                "interfaces": [{"name": "mgmt", "primary": True}, {"name": "node"}],
            },
            "gpu": {"backend": "DRA", "dra": {"resourceClaimTemplateName": "t"}},
            "nodeIPFrom": "node",
        },
        "bootstrap": {"joinSecretRef": {"name": "join"}},
        "workloadCluster": {"kubeconfigSecretRef": {"name": "kc"}},
        "autoscaling": {
            "enabled": True,
            "minReplicas": 0,
            "maxReplicas": 4,
            "scaleDown": "Auto",
            "behavior": {
                "scaleUp": {"policies": [{"type": "Cells", "value": 1, "periodSeconds": 60}]}
            },
            "prometheus": {"url": "https://prom:9090"},
        },
    },
    "status": {
        "replicas": 2,
        "conditions": [{"type": "WorkloadClusterReachable", "status": "False", "reason": "X"}],
    },
}

BASE_JSON = json.dumps(BASE)
TRICKY_KEYS = sorted(
    KNOWN
    | NESTED_KNOWN
    | {"NodeName", "\u017feedProfileRef", "hostPath", "snapshot.kubeswift.io/active-restore"}
    | {"enabled", "maxReplicas", "minReplicas", "replicas", "provisioner", "backend", "dra"}
    | {"native", "clusterAPI", "conditions", "status", "type", "url", "spec", "metadata", ""}
)
keys = st.one_of(st.sampled_from(TRICKY_KEYS), st.text(max_size=12))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["True", "DRA", "Native", "ClusterAPI", "sriov", "windows", "0s", "10m"]),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)
WORDS = ["True", "DRA", "Native", "ClusterAPI", "sriov", "SRIOV", "vhost-user", "windows"]
WORDS += ["0s", "10m", "-1s", "https://u:p@h", "ftp://x", "NodePort", "", "\u017f", "a" * 300]


def _rand_scalar(rng: random.Random) -> Any:
    kind = rng.randrange(7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, 1, 2, -1, 4, 9, 10001, 2**63, -(2**70)])
    if kind == 3:
        return rng.choice([0.5, 1.0, -3.25, float("inf"), float("nan"), 1e300])
    if kind == 4:
        return "".join(chr(rng.randrange(32, 0x2FF)) for _ in range(rng.randrange(6)))
    return rng.choice(WORDS)


def _rand_key(rng: random.Random) -> str:
    if rng.random() < 0.8:
        return rng.choice(TRICKY_KEYS)
    return "".join(chr(rng.randrange(32, 0x2FF)) for _ in range(rng.randrange(1, 8)))


def _rand_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth >= 3 or roll < 0.55:
        return _rand_scalar(rng)
    if roll < 0.75:
        return [_rand_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {_rand_key(rng): _rand_json(rng, depth + 1) for _ in range(rng.randrange(4))}


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _paths(v, (*prefix, i))
    return found


def _mutate(obj: Any, rng: random.Random, edits: int) -> Any:
    """Apply random edits: replace a value, delete it, or add a (tricky) key."""
    for _ in range(edits):
        path = rng.choice(_paths(obj))
        if not path:
            return _rand_json(rng)
        parent = obj
        for step in path[:-1]:
            parent = parent[step]
        action = rng.randrange(3)
        if action == 0:
            del parent[path[-1]]
        elif action == 1 and isinstance(parent[path[-1]], dict):
            parent[path[-1]][_rand_key(rng)] = _rand_json(rng)
        else:
            parent[path[-1]] = _rand_json(rng)
    return obj


def _well_formed(verdict: Verdict) -> None:
    assert isinstance(verdict, Verdict)
    assert verdict.allowed is (not verdict.reasons)
    assert len(verdict.reasons) <= MAX_REASONS and len(verdict.warnings) <= MAX_REASONS
    for item in verdict.reasons + verdict.warnings:
        assert isinstance(item, FieldError)
        assert isinstance(item.path, str) and item.path
        assert isinstance(item.message, str) and item.message
    assert isinstance(verdict.message(), str)


SETTINGS = [
    RuleSettings(),
    RuleSettings(strict_guest_template=True),
    RuleSettings(
        allowed_sriov_resources=frozenset({"intel.com/sriov_netdevice"}),
        allow_blank_data_disks=True,
        allowed_prometheus_hosts=frozenset({"prom"}),
    ),
]


def _check_all(old: Any, new: Any, scale: Any, strict: int) -> None:
    rules = SETTINGS[strict]
    before = repr((old, new, scale))  # cheap, exact fingerprint (NaN-safe, unlike ==)
    created = validate_create(new, rules)
    _well_formed(created)
    _well_formed(validate_update(old, new, rules))
    _well_formed(validate_scale(old, scale, rules))
    assert validate_create(new, rules) == created, "rules must be deterministic"
    assert repr((old, new, scale)) == before, "rules must not mutate their input"


def _shaped(rng: random.Random) -> dict[str, Any]:
    """guestTemplate fields with the right shape and random contents (where rules look)."""

    def pick(*options: Any) -> Any:
        return rng.choice([*options, _rand_json(rng)])

    interface = {
        "name": pick("node", "a b", "x/y"),
        "type": pick("sriov", "SRIOV", "vhost-user", "bridge", None),
        "resourceName": pick("intel.com/sriov_netdevice", None),
        "networkRef": pick({"name": pick("n", "ns/n"), "namespace": pick("cells", "kube-system")}),
        "primary": pick(True, False),
        "mac": pick("02:00:00:00:00:01", "x;reboot"),
    }
    return {
        "interfaces": [{k: v for k, v in interface.items() if rng.random() < 0.7}],
        "dataDiskRefs": [
            {"name": pick("d"), rng.choice(["imageRef", "pvcRef", "blank"]): _rand_json(rng)}
        ],
        "network": {"ports": [{"expose": pick("NodePort", "ClusterIP")}], "binding": pick("nat")},
        "osType": pick("linux", "Windows"),
    }


def _case(seed: int, junk: bool, edits: int, mutate_old: bool, strict: int) -> tuple[Any, ...]:
    rng = random.Random(seed)
    new = _rand_json(rng) if junk else _mutate(json.loads(BASE_JSON), rng, edits)
    template = get(new, "spec", "cell", "guestTemplate")
    if isinstance(template, dict) and rng.random() < 0.5:
        shaped = _shaped(rng)
        for key in rng.sample(sorted(shaped), rng.randrange(1, len(shaped) + 1)):
            template[key] = shaped[key]
    old = _mutate(json.loads(BASE_JSON), rng, edits) if mutate_old else BASE
    scale = {"spec": {"replicas": _rand_scalar(rng)}} if rng.random() < 0.7 else _rand_json(rng)
    return old, new, scale, strict


generated = st.builds(
    _case,
    st.integers(0, 2**32 - 1),
    st.integers(0, 9).map(lambda n: n == 0),
    st.integers(1, 4),
    st.booleans(),
    st.integers(0, 2),
)
SPECS_PER_EXAMPLE = 10
"""Each Hypothesis example checks 10 seeded specs: 1,000 examples = 10,000 specs. Hypothesis's
own engine costs about 3 ms per example on the 2-core CI box, three times the rules, so
batching keeps 10,000 specs well under 30 s of CPU; the one-spec-per-example variant with
max_examples=10,000 is the ``bench``-marked test below."""


@settings(max_examples=1_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(generated)
def test_rules_are_total_on_10000_generated_specs(case: tuple[Any, Any, Any, int]) -> None:
    """Seeded mutations of a valid pool (and 10 % pure junk), 10 per example."""
    old, new, scale, strict = case
    seed = zlib.crc32(repr(case).encode())  # reproducible (str hash is salted)
    _check_all(old, new, scale, strict)
    for k in range(1, SPECS_PER_EXAMPLE):
        _check_all(*_case(seed + k, (seed + k) % 10 == 0, 1 + k % 4, k % 2 == 0, k % 3))


BENCH_ONLY = pytest.mark.skipif(
    "'bench' not in (config.getoption('markexpr') or '').replace('not bench', '')",
    reason="benchmark: run with -m bench",
)


@pytest.mark.bench
@BENCH_ONLY
@settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(generated)
def test_bench_rules_total_10000_hypothesis_examples(case: tuple[Any, Any, Any, int]) -> None:
    """The benchmarked variant: max_examples=10,000, one spec each (``pytest -m bench``)."""
    _check_all(*case)


@pytest.mark.bench
@BENCH_ONLY
def test_bench_time_per_verdict() -> None:
    """Median/p99 time of validate_create over 10,000 seeded specs (printed; ``-m bench``)."""
    timings = []
    for seed in range(10_000):
        _, new, _, strict = _case(seed, seed % 10 == 0, 1 + seed % 4, False, seed % 3)
        started = time.perf_counter()
        _well_formed(validate_create(new, SETTINGS[strict]))
        timings.append(time.perf_counter() - started)
    timings.sort()
    p50, p99 = timings[len(timings) // 2], timings[int(len(timings) * 0.99)]
    print(f"validate_create over 10,000 specs: p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms")
    assert p50 < 0.005, "median verdict should take well under 5 ms"


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(json_values, json_values, json_values, st.integers(0, 2))
def test_rules_are_total_on_shrinkable_junk(old: Any, new: Any, scale: Any, strict: int) -> None:
    """Hypothesis-native junk (shrinks to a minimal counterexample if a rule ever raises)."""
    _check_all(old, new, scale, strict)


def test_samples_under_mutation_keep_known_good_base() -> None:
    """The generator's base object is itself admitted (so mutations start from valid)."""
    verdict = validate_create(copy.deepcopy(BASE))
    assert verdict.allowed, verdict.message()


@pytest.mark.parametrize("depth", [50, 500, 5000])
def test_deeply_nested_guest_template_is_refused_not_raised(depth: int) -> None:
    nested: Any = {"leaf": 1}
    for _ in range(depth):
        nested = {"x": [nested]}
    obj = copy.deepcopy(BASE)
    obj["spec"]["cell"]["guestTemplate"]["deep"] = nested
    started = time.perf_counter()
    _well_formed(validate_create(obj))
    _well_formed(validate_create(obj, SETTINGS[1]))
    assert time.perf_counter() - started < 5


def test_huge_guest_template_is_refused() -> None:
    obj = copy.deepcopy(BASE)
    obj["spec"]["cell"]["guestTemplate"]["bulk"] = [{"k": i} for i in range(20_000)]
    verdict = validate_create(obj)
    assert not verdict.allowed
    assert "spec.cell.guestTemplate" in verdict.paths()
