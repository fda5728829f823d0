"""Interpret a HAMi allocation query result into per-node, per-GPU readings plus a verdict.

Why this module exists: whether utilisation may be trusted is the decision that guards
scale-down, so it is made here, in pure code, from the result and ``now`` alone. Every
reason for distrust (a NaN, an infinity, a negative or garbage value, a series whose newest
sample is older than ``stale_after``, a node that should report but does not, a GPU missing
one of the required series, a result of the wrong type) is written down as one problem line,
and any problem makes the verdict unfresh. Nothing ever defaults to zero.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.policy.types import GPUUsage, MetricsHealth
from autoscaler.signals.hami_metrics import (
    MIB,
    REQUIRED,
    GPUReading,
    MetricsReading,
    NodeReading,
    Quantity,
    Schema,
    summarise,
    unavailable,
)
from autoscaler.signals.promql import QueryResult, Series, parse_sample_value


@dataclass(frozen=True, slots=True)
class _Picked:
    """The newest sample of one (node, GPU, quantity), over duplicate series."""

    name: str
    labels: dict[str, str]
    timestamp: float
    raw: str


_Key = tuple[str, Quantity]  # (device uuid, quantity)


def interpret_usage(
    result: QueryResult,
    schema: Schema,
    node_names: Iterable[str],
    *,
    now: float,
    stale_after_seconds: float,
    lookback_seconds: float,
) -> MetricsReading:
    """Per-node GPU allocations from a :func:`usage_query` result, with a freshness verdict."""
    if result.result_type != "matrix":
        detail = f"expected a matrix result from a range selector, got {result.result_type}"
        return unavailable(detail, 0.0, schema.family)
    wanted = sorted(set(node_names))
    problems: list[str] = []
    picked = _pick_newest(result.series, schema, set(wanted), problems)
    if schema.slot_series:
        _count_slots(result.series, schema, picked)
    nodes: dict[str, NodeReading] = {}
    for node in wanted:
        if node in picked:
            current = current_gpus(picked[node], schema)
            nodes[node] = _node_reading(node, current, schema, now, problems)
            if nodes[node].age_seconds > stale_after_seconds:
                problems.append(
                    f"node {node}: newest sample is {nodes[node].age_seconds:.1f}s old "
                    f"(stale after {stale_after_seconds:g}s)"
                )
    missing = [node for node in wanted if node not in picked]
    if missing:
        problems.append(
            f"no samples for node(s) {', '.join(missing)} in the last {lookback_seconds:g}s"
        )
    ages = [n.age_seconds for n in nodes.values()] + ([lookback_seconds] if missing else [])
    age = max(ages, default=0.0)
    if problems:
        detail = summarise(problems)
    else:
        gpus = sum(len(n.gpus) for n in nodes.values())
        detail = f"{schema.family} metrics: {len(nodes)} node(s), {gpus} GPU(s), age {age:.1f}s"
    health = MetricsHealth(fresh=not problems, age_seconds=age, detail=detail)
    return MetricsReading(health, nodes, schema.family, tuple(problems))


def _pick_newest(
    series: Sequence[Series], schema: Schema, wanted: set[str], problems: list[str]
) -> dict[str, dict[_Key, _Picked]]:
    """Group series by node and (GPU, quantity), keeping the one with the newest sample.

    Duplicates are normal: after a HAMi scheduler leader change the old leader's series stays
    in the lookback window with older samples, and two scrape jobs give two series.
    """
    picked: dict[str, dict[_Key, _Picked]] = defaultdict(dict)
    for s in series:
        name = s.labels.get("__name__", "")
        quantity = schema.quantity_of(name)
        node = s.labels.get(schema.node_label)
        if quantity is None or node not in wanted or not s.samples:
            continue
        uuid = s.labels.get(schema.uuid_label)
        if not uuid:
            problems.append(f"node {node}: {name} series without a {schema.uuid_label} label")
            continue
        timestamp, raw = s.newest
        current = picked[node].get((uuid, quantity))
        if current is None or timestamp > current.timestamp:
            picked[node][(uuid, quantity)] = _Picked(name, dict(s.labels), timestamp, raw)
    return picked


def _count_slots(
    series: Sequence[Series], schema: Schema, picked: dict[str, dict[_Key, _Picked]]
) -> None:
    """Slots used per GPU where the family has no slot series (HAMi-DRA): the pods whose
    per-pod series is in the same (or a newer) scrape as the GPU's allocated-memory sample.

    A pod that left keeps its old samples in the lookback window; counting only series as
    new as the GPU's own newest sample counts the pods the exporter still reports.
    """
    newest: dict[tuple[str, str, str], float] = {}
    for s in series:
        if s.labels.get("__name__") != schema.slot_series or not s.samples:
            continue
        node, uuid = s.labels.get(schema.node_label, ""), s.labels.get(schema.uuid_label, "")
        key = (node, uuid, f"{s.labels.get('namespace', '')}/{s.labels.get('pod', '')}")
        newest[key] = max(newest.get(key, 0.0), s.newest[0])
    for node, entries in picked.items():
        for (uuid, quantity), entry in list(entries.items()):
            if quantity is not Quantity.MEMORY_ALLOCATED:
                continue
            count = sum(
                1
                for (n, u, _), at in newest.items()
                if n == node and u == uuid and at >= entry.timestamp
            )
            slot = _Picked(str(schema.slot_series), entry.labels, entry.timestamp, str(count))
            entries[(uuid, Quantity.SLOTS_USED)] = slot


def current_gpus(entries: dict[_Key, _Picked], schema: Schema) -> dict[_Key, _Picked]:
    """Of GPUs reported at the same device index of a node, only the newest-reporting one.

    A node name outlives its GPUs: a cell drained and created again at the same index joins
    as a Node of the same name with another GPU at the same device index, and the old GPU's
    series stay in the lookback window. Counting it would make the new Node read as stale (the
    old GPU's last sample is its oldest) and as one GPU more than it has. GPUs at different
    indexes are all kept: one of them going silent is staleness, never hidden here.
    """
    newest: dict[str, float] = defaultdict(float)
    slot_of: dict[str, str] = {}
    for (uuid, _), entry in entries.items():
        newest[uuid] = max(newest[uuid], entry.timestamp)
        index = entry.labels.get(schema.index_label, "")
        slot_of[uuid] = f"index:{index}" if index else f"uuid:{uuid}"
    winner: dict[str, str] = {}
    for uuid, slot in slot_of.items():
        if slot not in winner or newest[uuid] > newest[winner[slot]]:
            winner[slot] = uuid
    kept = set(winner.values())
    return {key: entry for key, entry in entries.items() if key[0] in kept}


def _node_reading(
    node: str, entries: dict[_Key, _Picked], schema: Schema, now: float, problems: list[str]
) -> NodeReading:
    by_gpu: dict[str, dict[Quantity, _Picked]] = defaultdict(dict)
    for (uuid, quantity), entry in entries.items():
        by_gpu[uuid][quantity] = entry
    gpus = [_gpu_reading(node, uuid, by_gpu[uuid], schema, problems) for uuid in by_gpu]
    gpus.sort(key=lambda g: (g.index is None, g.index if g.index is not None else 0, g.uuid))
    age = max([0.0, *(now - entry.timestamp for entry in entries.values())])
    return NodeReading(node=node, gpus=tuple(gpus), age_seconds=age)


def _gpu_reading(
    node: str, uuid: str, entries: dict[Quantity, _Picked], schema: Schema, problems: list[str]
) -> GPUReading:
    values: dict[Quantity, float | int | None] = {}
    for quantity, entry in entries.items():
        value, why = convert(quantity, entry.raw)
        if why:
            shown = entry.raw[:24]
            problems.append(f"node {node} GPU {uuid}: {entry.name} value {shown!r} {why}")
        values[quantity] = value
    for quantity in REQUIRED:
        if quantity not in entries:
            name = schema.names.get(quantity, schema.slot_series)
            problems.append(f"node {node} GPU {uuid}: no {name} series")
    index_text = next(iter(entries.values())).labels.get(schema.index_label, "")
    mem, limit, slots = (values.get(q) for q in _INT_QUANTITIES)
    return GPUReading(
        uuid=uuid,
        index=int(index_text) if index_text.isdigit() else None,
        memory_allocated_mib=int(mem) if mem is not None else None,
        memory_limit_mib=int(limit) if limit is not None else None,
        cores_allocated_percent=_percent(values.get(Quantity.CORES_ALLOCATED), schema),
        cores_limit_percent=_percent(values.get(Quantity.CORES_LIMIT), schema),
        slots_used=int(slots) if slots is not None else None,
    )


_INT_QUANTITIES = (Quantity.MEMORY_ALLOCATED, Quantity.MEMORY_LIMIT, Quantity.SLOTS_USED)


def _percent(value: float | int | None, schema: Schema) -> float | None:
    """A core value on the 0-100 scale. HAMi-DRA exports 0-1 ratios: 0.3 x 100 is rounded
    to 9 decimals so float error (30.000000000000004) does not ceil to a core more."""
    if value is None or schema.cores_percent_per_unit == 1.0:
        return None if value is None else float(value)
    return round(float(value) * schema.cores_percent_per_unit, 9)


def convert(quantity: Quantity, raw: str) -> tuple[float | int | None, str]:
    """A raw sample in the quantity's unit (MiB, percent, slots), or None and why not.

    Allocated memory rounds up and limits round down to whole MiB, so a value that is not an
    exact MiB multiple never makes a GPU look emptier than it is.
    """
    value = parse_sample_value(raw)
    if value is None:
        return None, "is not a finite number"
    if value < 0:
        return None, "is negative"
    if quantity is Quantity.SLOTS_USED and not value.is_integer():
        return None, "is not a whole number of slots"
    rounding = _ROUNDING.get(quantity)
    return (rounding(value) if rounding else value), ""


def _slots(value: float) -> int:
    return int(value)


def _mib_up(value: float) -> int:
    return math.ceil(value / MIB)


def _mib_down(value: float) -> int:
    return math.floor(value / MIB)


_ROUNDING = {
    Quantity.MEMORY_ALLOCATED: _mib_up,
    Quantity.MEMORY_LIMIT: _mib_down,
    Quantity.SLOTS_USED: _slots,
}


# ---------------------------------------------------------------------------------------------
# Cross-check against the pods' HAMi annotations
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Discrepancy:
    """A node whose allocation total differs between Prometheus and the pod annotations."""

    node: str
    quantity: str  # memory_mib | cores_percent | slots
    metrics: int
    annotations: int

    def __str__(self) -> str:
        return (
            f"node {self.node}: {self.quantity} allocated {self.metrics} per HAMi metrics, "
            f"{self.annotations} per pod annotations"
        )


def cross_check(
    reading: MetricsReading, annotated: Mapping[str, Sequence[GPUUsage]]
) -> tuple[Discrepancy, ...]:
    """Per-node totals on which Prometheus and the pods' annotations disagree.

    Only nodes with a complete reading on both sides are compared; totals, not per-GPU
    values, because annotations and metrics may order a node's GPUs differently. A metric
    total above the annotations is HAMi holding an allocation no live pod explains
    (hami-facts §4.4, HAMi #2923); below means pods not yet counted by the scheduler.
    """
    measured = reading.usage_by_node()
    found: list[Discrepancy] = []
    for node in sorted(set(measured) & set(annotated)):
        for quantity in ("memory_mib", "cores_percent", "slots"):
            metrics = sum(getattr(gpu, quantity) for gpu in measured[node])
            annotations = sum(getattr(gpu, quantity) for gpu in annotated[node])
            if metrics != annotations:
                found.append(Discrepancy(node, quantity, metrics, annotations))
    return tuple(found)
