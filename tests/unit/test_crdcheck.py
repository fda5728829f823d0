"""CRD drift: the pure comparison on edited copies of the generated CRD, and the shell.

Every finding kind is produced by one precise edit of the CRD this build generates, so each
test fails if ``compare`` misses that kind of drift or reports noise on an identical CRD.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gpucellpool.api import crdgen
from gpucellpool.operator import crdcheck
from gpucellpool.operator.crdcheck import FindingKind, Outcome

Schema = dict[str, Any]


def generated() -> Schema:
    return crdgen.crd()


def props(crd: Schema, *path: str) -> Schema:
    node = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for name in path:
        node = node["properties"][name]
    return node  # type: ignore[no-any-return]


def kinds(served: Schema) -> list[tuple[FindingKind, str]]:
    return [(f.kind, f.path) for f in crdcheck.compare(served, generated())]


def test_identical_crd_has_no_findings() -> None:
    assert crdcheck.compare(generated(), generated()) == []


def test_missing_field_is_reported_once_at_its_parent() -> None:
    served = generated()
    del props(served, "spec")["properties"]["autoscaling"]
    assert kinds(served) == [(FindingKind.FIELD_MISSING, "spec.autoscaling")]


def test_enum_narrowed_and_widened() -> None:
    served = generated()
    node = props(served, "spec", "autoscaling", "scaleDown")
    want = list(node["enum"])
    node["enum"] = [*want[:-1], "Sometimes"]
    found = crdcheck.compare(served, generated())
    by_kind = {f.kind: f for f in found}
    assert set(by_kind) == {FindingKind.ENUM_NARROWED, FindingKind.ENUM_WIDENED}
    assert want[-1] in by_kind[FindingKind.ENUM_NARROWED].detail
    assert "Sometimes" in by_kind[FindingKind.ENUM_WIDENED].detail
    assert all(f.path == "spec.autoscaling.scaleDown" for f in found)


def _first_default(node: Schema, path: str = "") -> tuple[str, Schema] | None:
    if "default" in node:
        return path, node
    for name, sub in (node.get("properties") or {}).items():
        hit = _first_default(sub, f"{path}.{name}" if path else name)
        if hit:
            return hit
    return None


def test_default_difference() -> None:
    served = generated()
    hit = _first_default(props(served, "spec"), "spec")
    assert hit is not None, "the generated CRD has scalar defaults"
    path, node = hit
    node["default"] = "something-else"
    found = crdcheck.compare(served, generated())
    assert [(f.kind, f.path) for f in found] == [(FindingKind.DEFAULT_DIFFERS, path)]


def test_validation_differences_bounds_pattern_and_cel() -> None:
    served = generated()
    props(served, "spec", "replicas")["minimum"] = 1
    spec = props(served, "spec")
    rules = spec.get("x-kubernetes-validations") or []
    assert rules, "the generated spec carries CEL rules"
    dropped = rules.pop(0)["rule"]
    served_root = served["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    served_root["x-kubernetes-validations"].append({"rule": "true", "message": "extra"})
    found = crdcheck.compare(served, generated())
    details = [(f.kind, f.path, f.detail) for f in found]
    assert all(k is FindingKind.VALIDATION_DIFFERS for k, _, _ in details)
    assert any(p == "spec.replicas" and "minimum" in d for _, p, d in details)
    assert any(p == "spec" and "CEL rule missing" in d and dropped in d for _, p, d in details)
    assert any(p == "" and "not in this build: true" in d for _, p, d in details)


def test_pattern_and_type_changes() -> None:
    served = generated()
    node = props(served, "spec", "bootstrap", "readyTimeout")
    assert "pattern" in node
    node["pattern"] = ".*"
    props(served, "spec", "replicas")["type"] = "string"
    found = {(f.path, f.detail.split(" ")[0]) for f in crdcheck.compare(served, generated())}
    assert ("spec.bootstrap.readyTimeout", "pattern") in found
    assert ("spec.replicas", "type") in found


def test_wholly_missing_version_and_subresource() -> None:
    served = generated()
    served["spec"]["versions"][0]["name"] = "v1alpha0"
    assert kinds(served) == [(FindingKind.VERSION_MISSING, "")]
    served = generated()
    served["spec"]["versions"][0]["served"] = False
    assert kinds(served) == [(FindingKind.VERSION_MISSING, "")]
    served = generated()
    del served["spec"]["versions"][0]["subresources"]["scale"]
    assert kinds(served) == [(FindingKind.SUBRESOURCE_MISSING, "")]


def test_descriptions_are_ignored() -> None:
    served = generated()
    props(served, "spec")["description"] = "older words"
    assert crdcheck.compare(served, generated()) == []


class Reader:
    def __init__(self, crd: Mapping[str, Any] | None, error: Exception | None = None) -> None:
        self.crd, self.error = crd, error

    async def get_crd(self, name: str) -> Mapping[str, Any] | None:
        assert name == "gpucellpools.cells.kubeswift.io"
        if self.error:
            raise self.error
        return self.crd


class Events:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[tuple[str, str, str]] = []
        self.fail = fail

    async def emit(self, involved: Mapping[str, str], kind: str, reason: str, message: str) -> None:
        if self.fail:
            raise OSError("events forbidden")
        assert involved["kind"] == "CustomResourceDefinition"
        self.sent.append((kind, reason, message))


def gauge_values(registry: CollectorRegistry) -> dict[str, float]:
    return {
        s.labels["kind"]: s.value
        for m in registry.collect()
        for s in m.samples
        if s.name == "gpucellpool_crd_drift_findings"
    }


async def test_run_check_reports_drift_everywhere(caplog: pytest.LogCaptureFixture) -> None:
    served = generated()
    del props(served, "spec")["properties"]["autoscaling"]
    registry, events = CollectorRegistry(), Events()
    with caplog.at_level(logging.INFO):
        report = await crdcheck.run_check(Reader(served), events, crdcheck.drift_gauge(registry))
    assert report.outcome is Outcome.DRIFT
    line = caplog.records[-1]
    assert line.levelno == logging.ERROR
    assert "spec.autoscaling" in line.getMessage()
    assert crdcheck.FIX_COMMAND in line.getMessage()
    assert "crds/cells.kubeswift.io_gpucellpools.yaml" in crdcheck.FIX_COMMAND
    assert events.sent and events.sent[0][:2] == ("Warning", "CRDDrift")
    values = gauge_values(registry)
    assert values["FieldMissing"] == 1 and values["EnumNarrowed"] == 0


async def test_run_check_matches() -> None:
    registry, events = CollectorRegistry(), Events()
    report = await crdcheck.run_check(Reader(generated()), events, crdcheck.drift_gauge(registry))
    assert report.outcome is Outcome.MATCHES and not events.sent
    assert set(gauge_values(registry).values()) == {0.0}


@pytest.mark.parametrize(
    ("reader", "why"),
    [
        (Reader(None), "not installed"),
        (Reader(None, PermissionError("forbidden: needs get")), "forbidden"),
        (Reader(None, RuntimeError("boom")), "boom"),
    ],
)
async def test_run_check_is_never_fatal(reader: Reader, why: str) -> None:
    registry = CollectorRegistry()
    report = await crdcheck.run_check(reader, Events(), crdcheck.drift_gauge(registry))
    assert report.outcome is Outcome.NOT_COMPARED and why in report.message()
    assert gauge_values(registry) == {}


async def test_failing_event_sink_does_not_fail_the_check() -> None:
    served = generated()
    del props(served, "spec")["properties"]["replicas"]
    report = await crdcheck.run_check(
        Reader(served), Events(fail=True), crdcheck.drift_gauge(CollectorRegistry())
    )
    assert report.outcome is Outcome.DRIFT


def test_drift_gauge_is_per_registry_even_when_ids_are_reused() -> None:
    first = CollectorRegistry()
    gauge = crdcheck.drift_gauge(first)
    assert crdcheck.drift_gauge(first) is gauge
    stale_id = id(first)
    del first
    for _ in range(1000):  # a new registry may land on the collected one's address
        fresh = CollectorRegistry()
        if id(fresh) == stale_id:
            break
    other = crdcheck.drift_gauge(fresh)
    other.labels(kind="FieldMissing").set(3)
    assert fresh.get_sample_value("gpucellpool_crd_drift_findings", {"kind": "FieldMissing"}) == 3
