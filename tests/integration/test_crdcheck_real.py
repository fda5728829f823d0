"""The startup CRD drift check against a real apiserver serving an OLDER GPUCellPool CRD.

The session's CRD (installed by the harness) is saved, replaced by a copy of the generated one
with ``spec.updatePolicy`` removed and ``spec.autoscaling.drain.mode`` narrowed to
``WaitForIdle`` (what an operator upgrade without a CRD upgrade looks like), and the check is
run through the real kubernetes-asyncio adapters: both differences must be reported (and
nothing else new), with the fix command in the log line, a Warning Event on the CRD and the
gauge. The saved CRD is re-applied afterwards and must be Established and identical again.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gpucellpool.api import crdgen
from gpucellpool.kube.events import EventSink, ObjectEvents, rest_creator
from gpucellpool.operator import crdcheck
from gpucellpool.operator.crdcheck import FindingKind, Outcome
from simulations.harness import ClusterEndpoint
from tests.integration.test_loop_helpers import client_for
from tests.integration.test_webhook_env import kubectl, wait_until
from webhook.kube import KubeCrdReader

REMOVED = "spec.updatePolicy"
NARROWED = "spec.autoscaling.drain.mode"
SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields")


def _node(crd: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in dotted.split("."):
        node = node["properties"][part]
    return node  # type: ignore[no-any-return]


def older_crd() -> dict[str, Any]:
    """The generated CRD as an older release would have shipped it."""
    crd = copy.deepcopy(crdgen.crd())
    del _node(crd, "spec")["properties"]["updatePolicy"]
    mode = _node(crd, NARROWED)
    mode["enum"] = ["WaitForIdle"]
    if "default" in mode and mode["default"] not in mode["enum"]:
        del mode["default"]  # an older release would not default to a value it lacks
    return crd


async def _get_crd(infra: ClusterEndpoint) -> dict[str, Any]:
    out = await kubectl(infra, "get", "crd", crdcheck.CRD_NAME, "-o", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)  # type: ignore[no-any-return]


async def _apply(infra: ClusterEndpoint, crd: dict[str, Any]) -> None:
    clean = {k: v for k, v in crd.items() if k != "status"}
    clean["metadata"] = {k: v for k, v in crd["metadata"].items() if k not in SERVER_FIELDS}
    proc = await kubectl(infra, "apply", "--server-side", "--force-conflicts", "-f", "-",
                         input=json.dumps(clean))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    done = await kubectl(infra, "wait", "--for=condition=Established", "--timeout=60s",
                         "crd", crdcheck.CRD_NAME)  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.fixture
async def session_crd(infra: ClusterEndpoint) -> AsyncIterator[dict[str, Any]]:
    """The CRD as the session installed it; put back (and checked) after the test."""
    saved = await _get_crd(infra)
    try:
        yield saved
    finally:
        await _apply(infra, saved)

        async def restored() -> bool:
            now = await _get_crd(infra)
            return crdcheck.compare(now, saved) == [] and crdcheck.compare(saved, now) == []

        await wait_until("the session CRD to be restored", restored, seconds=30)


async def test_drift_against_an_older_crd_is_reported(
    infra: ClusterEndpoint,
    session_crd: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = await client_for(infra)
    try:
        reader = KubeCrdReader(api)
        sink = EventSink(rest_creator(api), time.time, "gpucellpool", "test")
        events = ObjectEvents(sink, "CheckCRD")
        baseline = await crdcheck.run_check(reader)
        assert baseline.outcome in (Outcome.MATCHES, Outcome.DRIFT), baseline.message()
        await _apply(infra, older_crd())
        registry = CollectorRegistry()
        with caplog.at_level(logging.INFO, logger="gpucellpool.operator.crdcheck"):
            report = await crdcheck.run_check(reader, events, crdcheck.drift_gauge(registry))
    finally:
        await api.close()
    assert report.outcome is Outcome.DRIFT
    new = set(report.findings) - set(baseline.findings)
    assert {(f.kind, f.path) for f in new} == {
        (FindingKind.FIELD_MISSING, REMOVED),
        (FindingKind.ENUM_NARROWED, NARROWED),
    }, [str(f) for f in new]
    narrowed = next(f for f in new if f.kind is FindingKind.ENUM_NARROWED)
    assert "Evict" in narrowed.detail
    line = caplog.records[-1].getMessage()
    assert REMOVED in line and NARROWED in line and crdcheck.FIX_COMMAND in line
    assert registry.get_sample_value(
        "gpucellpool_crd_drift_findings", {"kind": "FieldMissing"}
    ) == sum(1 for f in report.findings if f.kind is FindingKind.FIELD_MISSING)

    async def event_recorded() -> Any:
        selector = f"--field-selector=involvedObject.name={crdcheck.CRD_NAME}"
        out = await kubectl(infra, "get", "events", "-n", "default", "-o", "json", selector)
        items = json.loads(out.stdout)["items"]
        return [e for e in items if e["reason"] == "CRDDrift" and e["type"] == "Warning"]

    recorded = await wait_until("the CRDDrift event", event_recorded, seconds=30)
    assert recorded[0]["involvedObject"]["name"] == crdcheck.CRD_NAME
    assert REMOVED in recorded[0]["message"]


async def test_generated_crd_served_back_matches(
    infra: ClusterEndpoint, session_crd: dict[str, Any]
) -> None:
    """The generated CRD, stored and served back by the apiserver, yields no findings: the
    round trip (defaulting, key order, int/float) produces no phantom drift."""
    assert session_crd["metadata"]["name"] == crdcheck.CRD_NAME
    await _apply(infra, crdgen.crd())
    api = await client_for(infra)
    try:
        report = await asyncio.wait_for(crdcheck.run_check(KubeCrdReader(api)), 30)
    finally:
        await api.close()
    assert report.outcome is Outcome.MATCHES, report.message()
