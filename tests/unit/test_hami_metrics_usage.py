"""Pure tests: turning a HAMi allocation query result into readings and a freshness verdict.

Every unusable value (NaN, infinities, negatives, garbage, stale, missing) must make the
verdict unfresh with a detail naming the node and series, and must never read as zero.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.policy.types import GPUUsage
from autoscaler.signals.hami_metrics import CURRENT, LEGACY, MIB, MetricFamily, Quantity, Schema
from autoscaler.signals.hami_usage import Discrepancy, convert, cross_check, interpret_usage
from autoscaler.signals.promql import QueryResult, Series

NOW = 1_800_000_000.0
STALE = 60.0
LOOKBACK = 180.0


def gpu_series(
    node: str,
    uuid: str,
    index: int | None = 0,
    *,
    mem_mib: float = 4096,
    limit_mib: float = 24576,
    cores: str = "30",
    slots: str = "2",
    age: float = 5.0,
    schema: Schema = CURRENT,
    skip: tuple[Quantity, ...] = (),
    raw_mem: str | None = None,
    extra: dict[str, str] | None = None,
) -> list[Series]:
    """The five per-GPU series HAMi's scheduler exports for one GPU."""
    raw = {
        Quantity.MEMORY_ALLOCATED: raw_mem if raw_mem is not None else repr(mem_mib * MIB),
        Quantity.MEMORY_LIMIT: repr(limit_mib * MIB),
        Quantity.CORES_ALLOCATED: cores,
        Quantity.CORES_LIMIT: "100",
        Quantity.SLOTS_USED: slots,
    }
    labels = {schema.node_label: node, schema.uuid_label: uuid, "zone": "vGPU", **(extra or {})}
    if index is not None:
        labels[schema.index_label] = str(index)
    return [
        Series(
            {"__name__": schema.names[q], **labels},
            ((NOW - age - 15, "0"), (NOW - age, value)),
        )
        for q, value in raw.items()
        if q not in skip
    ]


def read(series: list[Series], nodes: list[str], schema: Schema = CURRENT, kind: str = "matrix"):  # type: ignore[no-untyped-def]
    return interpret_usage(
        QueryResult(kind, tuple(series)),
        schema,
        nodes,
        now=NOW,
        stale_after_seconds=STALE,
        lookback_seconds=LOOKBACK,
    )


def test_healthy_current_metrics() -> None:
    series = gpu_series("cell-0", "GPU-a", 0) + gpu_series(
        "cell-0", "GPU-b", 1, mem_mib=0, cores="0", slots="0", age=10
    )
    reading = read(series, ["cell-0"])
    assert reading.health.fresh, reading.problems
    assert reading.health.age_seconds == pytest.approx(10.0)
    assert reading.family is MetricFamily.CURRENT
    assert reading.health.detail == "hami metrics: 1 node(s), 2 GPU(s), age 10.0s"
    node = reading.nodes["cell-0"]
    assert [g.uuid for g in node.gpus] == ["GPU-a", "GPU-b"]
    assert node.gpus[0].memory_limit_mib == 24576
    assert node.gpus[0].cores_limit_percent == 100.0
    assert reading.usage_by_node() == {"cell-0": (GPUUsage(4096, 30, 2), GPUUsage(0, 0, 0))}
    assert reading.reporting_nodes == frozenset({"cell-0"})


def test_legacy_names_and_labels() -> None:
    series = gpu_series("cell-0", "GPU-a", 0, schema=LEGACY, mem_mib=8192, cores="50", slots="3")
    reading = read(series, ["cell-0"], LEGACY)
    assert reading.health.fresh, reading.problems
    assert reading.family is MetricFamily.LEGACY
    assert reading.usage_by_node() == {"cell-0": (GPUUsage(8192, 50, 3),)}


def test_legacy_series_are_not_read_with_the_current_schema() -> None:
    reading = read(gpu_series("cell-0", "GPU-a", schema=LEGACY), ["cell-0"], CURRENT)
    assert not reading.health.fresh
    assert reading.nodes == {}


@pytest.mark.parametrize(
    ("field", "raw", "why"),
    [
        ("cores", "NaN", "'NaN' is not a finite number"),
        ("cores", "+Inf", "'+Inf' is not a finite number"),
        ("slots", "-Inf", "'-Inf' is not a finite number"),
        ("slots", "-1", "'-1' is negative"),
        ("slots", "2.5", "'2.5' is not a whole number of slots"),
        ("cores", "thirty", "'thirty' is not a finite number"),
        ("raw_mem", "NaN", "'NaN' is not a finite number"),
        ("raw_mem", "-1048576", "'-1048576' is negative"),
        ("raw_mem", "", "'' is not a finite number"),
    ],
)
def test_unusable_values_make_the_reading_unfresh_never_zero(
    field: str, raw: str, why: str
) -> None:
    bad = gpu_series("cell-0", "GPU-a", **{field: raw})  # type: ignore[arg-type]
    good = gpu_series("cell-1", "GPU-b")
    reading = read(bad + good, ["cell-0", "cell-1"])
    assert not reading.health.fresh
    assert "node cell-0 GPU GPU-a: " in reading.health.detail
    assert why in reading.health.detail
    assert reading.nodes["cell-0"].usage() is None  # unknown, not zero
    assert reading.usage_by_node() == {"cell-1": (GPUUsage(4096, 30, 2),)}  # partial data kept


def test_the_offending_series_is_named() -> None:
    reading = read(gpu_series("cell-0", "GPU-a", cores="NaN"), ["cell-0"])
    assert reading.problems == (
        "node cell-0 GPU GPU-a: hami_gpu_core_allocated_ratio value 'NaN' is not a finite number",
    )


def test_long_garbage_is_truncated_in_the_detail() -> None:
    reading = read(gpu_series("cell-0", "GPU-a", cores="x" * 500), ["cell-0"])
    assert "x" * 24 in reading.health.detail
    assert "x" * 25 not in reading.health.detail


@pytest.mark.parametrize(("age", "fresh"), [(0.0, True), (59.9, True), (60.0, True), (60.1, False)])
def test_staleness_boundary(age: float, fresh: bool) -> None:
    reading = read(gpu_series("cell-0", "GPU-a", age=age), ["cell-0"])
    assert reading.health.fresh is fresh
    assert reading.health.age_seconds == pytest.approx(age)
    if not fresh:
        assert reading.health.detail == "node cell-0: newest sample is 60.1s old (stale after 60s)"
        assert reading.usage_by_node()  # the old values are still shown, just not trusted


def test_node_age_is_that_of_its_stalest_series() -> None:
    series = gpu_series("cell-0", "GPU-a", age=5) + gpu_series("cell-0", "GPU-b", 1, age=90)
    reading = read(series, ["cell-0"])
    assert reading.nodes["cell-0"].age_seconds == pytest.approx(90)
    assert not reading.health.fresh


def test_missing_nodes_are_named_and_age_is_the_lookback() -> None:
    reading = read(gpu_series("cell-0", "GPU-a"), ["cell-2", "cell-0", "cell-1"])
    assert not reading.health.fresh
    assert reading.health.detail == "no samples for node(s) cell-1, cell-2 in the last 180s"
    assert reading.health.age_seconds == LOOKBACK
    assert set(reading.usage_by_node()) == {"cell-0"}


def test_empty_result_is_unfresh() -> None:
    reading = read([], ["cell-0"])
    assert not reading.health.fresh
    assert reading.nodes == {}
    assert "no samples for node(s) cell-0" in reading.health.detail


def test_no_nodes_wanted_and_empty_result_is_fresh() -> None:
    assert read([], []).health.fresh


@pytest.mark.parametrize(
    "missing", [Quantity.MEMORY_ALLOCATED, Quantity.CORES_ALLOCATED, Quantity.SLOTS_USED]
)
def test_missing_required_series(missing: Quantity) -> None:
    reading = read(gpu_series("cell-0", "GPU-a", skip=(missing,)), ["cell-0"])
    assert not reading.health.fresh
    assert reading.health.detail == f"node cell-0 GPU GPU-a: no {CURRENT.names[missing]} series"
    assert reading.nodes["cell-0"].usage() is None


@pytest.mark.parametrize("missing", [Quantity.MEMORY_LIMIT, Quantity.CORES_LIMIT])
def test_limits_are_optional(missing: Quantity) -> None:
    reading = read(gpu_series("cell-0", "GPU-a", skip=(missing,)), ["cell-0"])
    assert reading.health.fresh, reading.problems


def test_duplicate_series_newest_sample_wins() -> None:
    old_leader = gpu_series("cell-0", "GPU-a", cores="NaN", age=100, extra={"pod": "sched-old"})
    new_leader = gpu_series("cell-0", "GPU-a", cores="40", age=3, extra={"pod": "sched-new"})
    reading = read(old_leader + new_leader, ["cell-0"])
    assert reading.health.fresh, reading.problems
    assert reading.usage_by_node() == {"cell-0": (GPUUsage(4096, 40, 2),)}
    reading = read(new_leader + old_leader, ["cell-0"])
    assert reading.usage_by_node() == {"cell-0": (GPUUsage(4096, 40, 2),)}


def test_newest_sample_of_a_series_is_used_even_if_older_ones_were_bad() -> None:
    name = CURRENT.names[Quantity.SLOTS_USED]
    series = [s for s in gpu_series("cell-0", "GPU-a") if s.labels["__name__"] != name]
    labels = {"__name__": name, "node": "cell-0", "device_uuid": "GPU-a", "device_index": "0"}
    series.append(Series(labels, ((NOW - 20, "NaN"), (NOW - 4, "1"))))
    reading = read(series, ["cell-0"])
    assert reading.health.fresh, reading.problems
    assert reading.nodes["cell-0"].gpus[0].slots_used == 1


def test_wrong_result_type() -> None:
    reading = read(gpu_series("cell-0", "GPU-a"), ["cell-0"], kind="vector")
    assert not reading.health.fresh
    assert reading.health.detail == "expected a matrix result from a range selector, got vector"


def test_series_without_uuid_is_a_problem() -> None:
    series = gpu_series("cell-0", "GPU-a")
    series.append(Series({"__name__": "hami_gpu_shared_count", "node": "cell-0"}, ((NOW, "1"),)))
    reading = read(series, ["cell-0"])
    assert not reading.health.fresh
    assert "hami_gpu_shared_count series without a device_uuid label" in reading.health.detail


def test_foreign_series_are_ignored() -> None:
    series = gpu_series("cell-0", "GPU-a") + gpu_series("other", "GPU-z", cores="NaN")
    series.append(Series({"__name__": "hami_build_info", "node": "cell-0"}, ((NOW, "1"),)))
    reading = read(series, ["cell-0"])
    assert reading.health.fresh, reading.problems
    assert set(reading.nodes) == {"cell-0"}


def test_future_samples_clamp_age_to_zero() -> None:
    reading = read(gpu_series("cell-0", "GPU-a", age=-30), ["cell-0"])
    assert reading.health.fresh
    assert reading.health.age_seconds == 0.0


def test_gpus_sorted_by_index_and_unknown_index_last() -> None:
    series = (
        gpu_series("cell-0", "GPU-c", None)
        + gpu_series("cell-0", "GPU-b", 1)
        + gpu_series("cell-0", "GPU-a", 0)
    )
    gpus = read(series, ["cell-0"]).nodes["cell-0"].gpus
    assert [(g.uuid, g.index) for g in gpus] == [("GPU-a", 0), ("GPU-b", 1), ("GPU-c", None)]


@pytest.mark.parametrize(
    ("quantity", "raw", "value"),
    [
        (Quantity.MEMORY_ALLOCATED, str(4096 * MIB), 4096),
        (Quantity.MEMORY_ALLOCATED, str(MIB + 1), 2),  # rounds up: never looks emptier
        (Quantity.MEMORY_LIMIT, str(2 * MIB - 1), 1),  # rounds down
        (Quantity.MEMORY_ALLOCATED, "0", 0),
        (Quantity.CORES_ALLOCATED, "33.5", 33.5),
        (Quantity.CORES_LIMIT, "100", 100.0),
        (Quantity.SLOTS_USED, "3", 3),
        (Quantity.SLOTS_USED, "3e0", 3),
    ],
)
def test_convert_units(quantity: Quantity, raw: str, value: float) -> None:
    assert convert(quantity, raw) == (value, "")


@given(
    raw=st.one_of(
        st.sampled_from(["NaN", "+Inf", "-Inf", "nan", "inf", "", " ", "null", "0x10"]),
        st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False).map(repr),
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz!@#", min_size=1, max_size=8),
    ),
    quantity=st.sampled_from(list(Quantity)),
)
def test_no_bad_value_ever_converts(raw: str, quantity: Quantity) -> None:
    value, why = convert(quantity, raw)
    assert value is None, f"{raw!r} converted to {value!r}"
    assert why


def test_cross_check_compares_node_totals() -> None:
    series = (
        gpu_series("cell-0", "GPU-a", 0, mem_mib=4096, cores="30", slots="2")
        + gpu_series("cell-0", "GPU-b", 1, mem_mib=0, cores="0", slots="0")
        + gpu_series("cell-1", "GPU-c", 0, mem_mib=8192, cores="50", slots="1")
        + gpu_series("cell-2", "GPU-d", 0, cores="NaN")
    )
    reading = read(series, ["cell-0", "cell-1", "cell-2"])
    annotated = {
        "cell-0": [GPUUsage(0, 0, 0), GPUUsage(4096, 30, 2)],  # same totals, other GPU order
        "cell-1": [GPUUsage(0, 0, 0)],  # HAMi still holds an allocation no pod explains
        "cell-2": [GPUUsage(1, 1, 1)],  # incomplete reading: not compared
        "cell-3": [GPUUsage(1, 1, 1)],  # not in the reading: not compared
    }
    found = cross_check(reading, annotated)
    assert found == (
        Discrepancy("cell-1", "memory_mib", 8192, 0),
        Discrepancy("cell-1", "cores_percent", 50, 0),
        Discrepancy("cell-1", "slots", 1, 0),
    )
    assert str(found[0]) == (
        "node cell-1: memory_mib allocated 8192 per HAMi metrics, 0 per pod annotations"
    )


def test_a_node_recreated_under_its_name_reads_its_new_gpu_only() -> None:
    """A cell drained and created again at its index: the old GPU's series linger (age 90)."""
    series = gpu_series("cell-0", "GPU-old", 0, mem_mib=24576, age=90) + gpu_series(
        "cell-0", "GPU-new", 0, mem_mib=0, cores="0", slots="0", age=2
    )
    reading = read(series, ["cell-0"])
    assert reading.health.fresh, reading.problems
    assert [g.uuid for g in reading.nodes["cell-0"].gpus] == ["GPU-new"]
    assert reading.nodes["cell-0"].age_seconds == pytest.approx(2)
    # The legacy names carry the index as deviceidx: same rule.
    legacy = gpu_series("cell-0", "GPU-old", 0, age=90, schema=LEGACY) + gpu_series(
        "cell-0", "GPU-new", 0, age=2, schema=LEGACY
    )
    assert read(legacy, ["cell-0"], schema=LEGACY).health.fresh
