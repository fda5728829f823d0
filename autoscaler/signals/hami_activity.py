"""Measured GPU use from HAMi's vGPU monitor: per-GPU utilisation and idle pods (pure).

Why this module exists: allocation says what pods reserved; the monitor says what they do with
it (hami-facts §4.2). Two readings come from it: each GPU's host utilisation
(``hami_host_gpu_utilization_ratio``, 0-100, by ``node``) for status and metrics, and each
container's time since its last kernel launch (``hami_container_last_kernel_elapsed_seconds``,
by ``namespace``/``pod``) to find idle pods, the signal of ``scaleDownOn: Usage``. The same
honesty as the allocation reading applies: a NaN, garbage, negative or stale sample and a
node that should report but does not are problem lines, and any problem makes the reading
unfresh, so nothing reads as idle or as 0 % by accident. A pod with no container series has
not touched its GPU yet (the monitor shows a container only after that, HAMi #1794): it is
"unmeasured", never idle.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.signals.hami_metrics import MetricFamily, summarise
from autoscaler.signals.promql import QueryResult, Series, any_of, duration, parse_sample_value


class Verdict(enum.StrEnum):
    """Why a reading can or cannot be trusted (the MetricsAvailable reasons)."""

    FRESH = "Fresh"
    UNREACHABLE = "Unreachable"  # the query failed: transport, HTTP status, timeout
    STALE = "Stale"  # a node's newest sample is too old, or a node has none
    UNPARSEABLE = "Unparseable"  # a value is not a finite non-negative number, or wrong shape


@dataclass(frozen=True, slots=True)
class ActivitySchema:
    """Names and labels of the monitor's series in one metric family."""

    family: MetricFamily
    host_utilisation: str
    container_utilisation: str
    last_kernel: str
    node_label: str
    uuid_label: str
    namespace_label: str
    pod_label: str
    container_label: str


ACTIVITY_SCHEMAS: Mapping[MetricFamily, ActivitySchema] = {
    MetricFamily.CURRENT: ActivitySchema(
        MetricFamily.CURRENT,
        "hami_host_gpu_utilization_ratio",
        "hami_container_device_utilization_ratio",
        "hami_container_last_kernel_elapsed_seconds",
        "node",
        "device_uuid",
        "namespace",
        "pod",
        "container",
    ),
    MetricFamily.LEGACY: ActivitySchema(
        MetricFamily.LEGACY,
        "HostCoreUtilization",
        "Device_utilization_desc_of_container",
        "Device_last_kernel_of_container",
        "nodeid",
        "deviceuuid",
        "podnamespace",
        "podname",
        "ctrname",
    ),
}


def _regex(values: Sequence[str]) -> str:
    return any_of(values).replace("\\", "\\\\").replace('"', '\\"')


def host_query(schema: ActivitySchema, nodes: Sequence[str], lookback_seconds: float) -> str:
    """Raw per-GPU host utilisation samples of ``nodes`` (a range selector: real timestamps)."""
    name, node = schema.host_utilisation, schema.node_label
    return f'{name}{{{node}=~"{_regex(nodes)}"}}[{duration(lookback_seconds)}]'


def container_query(schema: ActivitySchema, pods: Sequence[str], lookback_seconds: float) -> str:
    """Raw container utilisation and last-kernel samples of the pods named ``pods``."""
    names = any_of([schema.container_utilisation, schema.last_kernel])
    matcher = f'{schema.pod_label}=~"{_regex(pods)}"'
    return f'{{__name__=~"{names}",{matcher}}}[{duration(lookback_seconds)}]'


@dataclass(frozen=True, slots=True)
class PodActivity:
    """One pod's measured use: summed container utilisation and the least idle container."""

    key: str  # namespace/name
    utilisation_percent: float
    idle_seconds: float  # time since the most recent kernel of any of its containers


@dataclass(frozen=True, slots=True)
class ActivityReading:
    """What the monitor said, whether to trust it, and why not."""

    verdict: Verdict
    detail: str
    age_seconds: float = 0.0
    gpu_utilisation: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # by node
    pods: Mapping[str, PodActivity] = field(default_factory=dict)  # by namespace/name
    problems: tuple[str, ...] = ()

    @property
    def fresh(self) -> bool:
        return self.verdict is Verdict.FRESH

    def mean_gpu_percent(self) -> float | None:
        """Mean host utilisation over every GPU read (None when none was)."""
        values = [v for gpus in self.gpu_utilisation.values() for v in gpus]
        return sum(values) / len(values) if values else None


def failed(verdict: Verdict, detail: str, age_seconds: float = 0.0) -> ActivityReading:
    """A reading with no data: the query failed or answered in the wrong shape."""
    return ActivityReading(verdict, detail, max(0.0, age_seconds), problems=(detail,))


@dataclass(slots=True)
class _Problems:
    stale: list[str] = field(default_factory=list)
    garbage: list[str] = field(default_factory=list)


def interpret_activity(
    host: QueryResult,
    containers: QueryResult | None,
    schema: ActivitySchema,
    nodes: Iterable[str],
    pods: Iterable[str],
    *,
    now: float,
    stale_after_seconds: float,
) -> ActivityReading:
    """Per-GPU utilisation of ``nodes`` and activity of ``pods`` (``namespace/name``)."""
    for result in (host, containers):
        if result is not None and result.result_type != "matrix":
            detail = f"expected a matrix result from a range selector, got {result.result_type}"
            return failed(Verdict.UNPARSEABLE, detail)
    problems = _Problems()
    wanted = sorted(set(nodes))
    gpus, ages = _host(host.series, schema, set(wanted), now, problems)
    for node in wanted:
        if node not in gpus:
            problems.stale.append(f"node {node}: no {schema.host_utilisation} samples")
        elif ages[node] > stale_after_seconds:
            problems.stale.append(
                f"node {node}: newest {schema.host_utilisation} sample is {ages[node]:.1f}s old "
                f"(stale after {stale_after_seconds:g}s)"
            )
    series = containers.series if containers is not None else ()
    activity = _pods(series, schema, set(pods), now, stale_after_seconds, problems)
    age = max(ages.values(), default=0.0)
    listed = problems.garbage + problems.stale
    if problems.garbage:
        verdict = Verdict.UNPARSEABLE
    elif problems.stale:
        verdict = Verdict.STALE
    else:
        verdict = Verdict.FRESH
    detail = summarise(listed) if listed else _summary(gpus, activity, age)
    return ActivityReading(verdict, detail, age, gpus, activity, tuple(listed))


def _summary(
    gpus: Mapping[str, tuple[float, ...]], pods: Mapping[str, PodActivity], age: float
) -> str:
    count = sum(len(v) for v in gpus.values())
    return f"monitor: {len(gpus)} node(s), {count} GPU(s), {len(pods)} pod(s), age {age:.1f}s"


def _value(raw: str, what: str, problems: _Problems) -> float | None:
    value = parse_sample_value(raw)
    if value is None or value < 0:
        why = "is not a finite number" if value is None else "is negative"
        problems.garbage.append(f"{what} value {raw[:24]!r} {why}")
        return None
    return value


def _newest(
    series: Series, key: tuple[str, ...], seen: dict[tuple[str, ...], tuple[float, str]]
) -> None:
    """Keep the newest sample per key over duplicate series (two scrape jobs, restarts)."""
    sample = series.newest
    if key not in seen or sample[0] > seen[key][0]:
        seen[key] = sample


def _host(
    series: Sequence[Series],
    schema: ActivitySchema,
    wanted: set[str],
    now: float,
    problems: _Problems,
) -> tuple[dict[str, tuple[float, ...]], dict[str, float]]:
    seen: dict[tuple[str, ...], tuple[float, str]] = {}
    for s in series:
        node = s.labels.get(schema.node_label, "")
        if node in wanted and s.samples:
            _newest(s, (node, s.labels.get(schema.uuid_label, "")), seen)
    by_node: dict[str, list[float]] = defaultdict(list)
    ages: dict[str, float] = {}
    for (node, uuid), (timestamp, raw) in sorted(seen.items()):
        ages[node] = max(ages.get(node, 0.0), now - timestamp)
        value = _value(raw, f"node {node} GPU {uuid}: {schema.host_utilisation}", problems)
        if value is not None:
            by_node[node].append(min(value, 100.0))
    return {node: tuple(by_node.get(node, ())) for node in ages}, ages


def _pods(
    series: Sequence[Series],
    schema: ActivitySchema,
    wanted: set[str],
    now: float,
    stale_after_seconds: float,
    problems: _Problems,
) -> dict[str, PodActivity]:
    seen: dict[tuple[str, ...], tuple[float, str]] = {}
    for s in series:
        key = f"{s.labels.get(schema.namespace_label, '')}/{s.labels.get(schema.pod_label, '')}"
        if key in wanted and s.samples:
            name = s.labels.get("__name__", "")
            container = s.labels.get(schema.container_label, "")
            _newest(s, (key, container, s.labels.get(schema.uuid_label, ""), name), seen)
    util: dict[str, float] = defaultdict(float)
    idle: dict[str, float] = {}
    for (key, container, _, name), (timestamp, raw) in sorted(seen.items()):
        age = now - timestamp
        if age > stale_after_seconds:
            continue  # a container that ended; the pod's live containers speak for it
        value = _value(raw, f"pod {key} container {container}: {name}", problems)
        if value is None:
            continue
        if name == schema.last_kernel:
            idle[key] = min(idle.get(key, float("inf")), value + age)
        else:
            util[key] += value
    return {key: PodActivity(key, util.get(key, 0.0), idle[key]) for key in sorted(idle)}


@dataclass(frozen=True, slots=True)
class IdleVerdict:
    """Which cells are idle (every pod idle for the window), and the counts behind it."""

    idle_cells: frozenset[str]
    pods: int  # pods on the cells that the monitor measures
    idle_pods: int


def idle_cells(
    pods_by_cell: Mapping[str, Sequence[str]], reading: ActivityReading, window_seconds: float
) -> IdleVerdict:
    """Cells holding at least one pod, all measured and idle for ``window_seconds``.

    Nothing is idle from an unfresh reading: usage-driven scale-down freezes with it.
    """
    if not reading.fresh:
        return IdleVerdict(frozenset(), 0, 0)
    cells: set[str] = set()
    measured = idle = 0
    for cell, keys in pods_by_cell.items():
        known = [reading.pods[k] for k in keys if k in reading.pods]
        quiet = [p for p in known if p.idle_seconds >= window_seconds]
        measured, idle = measured + len(known), idle + len(quiet)
        if keys and len(quiet) == len(keys):
            cells.add(cell)
    return IdleVerdict(frozenset(cells), measured, idle)
