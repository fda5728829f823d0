"""Pure tests: measured use from HAMi's monitor series, its verdict, idle pods and idle cells.

A NaN, garbage or negative sample, a stale or missing node and a result of the wrong shape
must each make the reading unfresh with a line naming the node or pod, and an unfresh reading
must make no cell idle (usage-driven scale-down freezes); a pod the monitor does not report is
never idle.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.signals.hami_activity import (
    ACTIVITY_SCHEMAS,
    ActivityReading,
    ActivitySchema,
    Verdict,
    container_query,
    host_query,
    idle_cells,
    interpret_activity,
)
from autoscaler.signals.hami_metrics import MetricFamily
from autoscaler.signals.promql import QueryResult, Series

NOW = 1_800_000_000.0
STALE = 60.0
CURRENT = ACTIVITY_SCHEMAS[MetricFamily.CURRENT]
LEGACY = ACTIVITY_SCHEMAS[MetricFamily.LEGACY]


def host(
    node: str, uuid: str, value: str = "40", age: float = 5.0, s: ActivitySchema = CURRENT
) -> Series:
    labels = {"__name__": s.host_utilisation, s.node_label: node, s.uuid_label: uuid}
    return Series(labels, ((NOW - age - 15, "0"), (NOW - age, value)))


def container(
    pod: str,
    *,
    util: str = "30",
    kernel: str = "0",
    age: float = 5.0,
    name: str = "main",
    s: ActivitySchema = CURRENT,
) -> list[Series]:
    namespace, _, pod_name = pod.partition("/")
    labels = {s.namespace_label: namespace, s.pod_label: pod_name, s.container_label: name}
    labels[s.uuid_label] = "GPU-1"
    return [
        Series({"__name__": s.container_utilisation, **labels}, ((NOW - age, util),)),
        Series({"__name__": s.last_kernel, **labels}, ((NOW - age, kernel),)),
    ]


def read(
    hosts: list[Series],
    pods: list[Series],
    nodes: list[str],
    keys: list[str],
    s: ActivitySchema = CURRENT,
) -> ActivityReading:
    return interpret_activity(
        QueryResult("matrix", tuple(hosts)),
        QueryResult("matrix", tuple(pods)),
        s,
        nodes,
        keys,
        now=NOW,
        stale_after_seconds=STALE,
    )


def test_fresh_reading_gives_gpu_utilisation_and_pod_idle_times() -> None:
    r = read(
        [host("n1", "a", "40"), host("n1", "b", "120"), host("n2", "c", "20")],
        [*container("ns/busy", util="55"), *container("ns/quiet", util="0", kernel="900")],
        ["n1", "n2"],
        ["ns/busy", "ns/quiet"],
    )
    assert r.verdict is Verdict.FRESH and r.fresh
    assert r.gpu_utilisation == {"n1": (40.0, 100.0), "n2": (20.0,)}  # >100 capped per GPU
    assert r.mean_gpu_percent() == pytest.approx(160 / 3)
    assert r.pods["ns/busy"].utilisation_percent == 55 and r.pods["ns/busy"].idle_seconds == 5
    assert r.pods["ns/quiet"].idle_seconds == 905  # the sample's age adds to the value


def test_legacy_names_read_the_same() -> None:
    r = read(
        [host("n1", "a", "10", s=LEGACY)],
        container("ns/p", kernel="70", s=LEGACY),
        ["n1"],
        ["ns/p"],
        LEGACY,
    )
    assert r.fresh and r.gpu_utilisation == {"n1": (10.0,)} and r.pods["ns/p"].idle_seconds == 75


@pytest.mark.parametrize("raw", ["NaN", "+Inf", "-Inf", "-1", "garbage", ""])
def test_garbage_host_value_is_unparseable_never_zero(raw: str) -> None:
    r = read([host("n1", "a", raw)], [], ["n1"], [])
    assert r.verdict is Verdict.UNPARSEABLE and not r.fresh
    assert "node n1 GPU a" in r.detail
    assert r.gpu_utilisation["n1"] == ()  # the value is dropped, not read as 0


def test_garbage_last_kernel_is_unparseable_and_the_pod_not_idle() -> None:
    r = read([host("n1", "a")], container("ns/p", kernel="NaN"), ["n1"], ["ns/p"])
    assert r.verdict is Verdict.UNPARSEABLE and "pod ns/p" in r.detail
    assert "ns/p" not in r.pods


def test_stale_node_and_missing_node() -> None:
    r = read([host("n1", "a", age=90)], [], ["n1", "n2"], [])
    assert r.verdict is Verdict.STALE
    assert "node n1: newest hami_host_gpu_utilization_ratio sample is 90.0s old" in r.detail
    assert "node n2: no hami_host_gpu_utilization_ratio samples" in r.detail


def test_wrong_result_type_is_unparseable() -> None:
    r = interpret_activity(
        QueryResult("vector"), None, CURRENT, ["n1"], [], now=NOW, stale_after_seconds=STALE
    )
    assert r.verdict is Verdict.UNPARSEABLE and "matrix" in r.detail


def test_newest_duplicate_wins_and_a_stale_container_is_ignored() -> None:
    old = container("ns/p", kernel="0", age=50, name="c")
    new = container("ns/p", kernel="600", age=2, name="c")
    gone = container("ns/p", kernel="0", age=STALE + 1, name="ended")
    r = read([host("n1", "a")], [*old, *new, *gone], ["n1"], ["ns/p"])
    assert r.fresh and r.pods["ns/p"].idle_seconds == 602


def test_pod_is_as_busy_as_its_busiest_container() -> None:
    series = [*container("ns/p", kernel="900", name="a"), *container("ns/p", kernel="3", name="b")]
    r = read([host("n1", "a")], series, ["n1"], ["ns/p"])
    assert r.pods["ns/p"].idle_seconds == 8


def test_queries_escape_names_and_use_range_selectors() -> None:
    q = host_query(CURRENT, ["n.1", "n2"], 180)
    assert q == 'hami_host_gpu_utilization_ratio{node=~"n\\\\.1|n2"}[180000ms]'
    q = container_query(LEGACY, ["p-1"], 60)
    assert (
        "Device_last_kernel_of_container" in q and 'podname=~"p-1"' in q and q.endswith("[60000ms]")
    )


def _fresh(idle_s: dict[str, float]):  # type: ignore[no-untyped-def]
    pods = [s for key, v in idle_s.items() for s in container(key, kernel=repr(v), age=0)]
    return read([host("n1", "a")], pods, ["n1"], list(idle_s))


def test_idle_cells_need_every_pod_idle_and_measured() -> None:
    reading = _fresh({"ns/a": 700, "ns/b": 700, "ns/c": 10})
    cells = {
        "all-idle": ["ns/a", "ns/b"],
        "mixed": ["ns/a", "ns/c"],
        "unmeasured": ["ns/a", "ns/x"],
        "empty": [],
    }
    v = idle_cells(cells, reading, 600)
    assert v.idle_cells == frozenset({"all-idle"})
    assert (v.pods, v.idle_pods) == (5, 4)  # ns/x unmeasured: neither counted nor idle


def test_unfresh_reading_makes_nothing_idle() -> None:
    pods = container("ns/a", kernel="7000")
    stale = read([host("n1", "a", age=900)], pods, ["n1"], ["ns/a"])
    assert not stale.fresh
    assert idle_cells({"c": ["ns/a"]}, stale, 600).idle_cells == frozenset()


@given(
    st.dictionaries(st.sampled_from(["ns/a", "ns/b", "ns/c"]), st.floats(0, 5000), min_size=1),
    st.floats(60, 3000),
)
def test_idle_cell_iff_all_its_pods_idle_for_the_window(
    idle_s: dict[str, float], window: float
) -> None:
    reading = _fresh(idle_s)
    v = idle_cells({"cell": list(idle_s)}, reading, window)
    assert ("cell" in v.idle_cells) == all(value >= window for value in idle_s.values())
