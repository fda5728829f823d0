"""The provisioner's rule gate: which message it writes, when it re-runs the rules, and that a
passing pass clears ``Degraded`` (the end-to-end proof is
tests/integration/test_provisioner_rule_gate.py, on a real apiserver)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpucellpool.api.pool import GPUCellPool
from gpucellpool.operator.provisioner_wiring import pool_rules
from provisioner.rule_gate import RuleGate, degraded_message, degraded_patch
from provisioner.status import PassSummary, conditions
from provisioner.workload import Reachability
from simulations.twin.scenario import swiftguest_pool
from webhook.rules import FieldError, RuleSettings

AT = {"lastTransitionTime": "2026-11-30T10:00:00Z"}


def _pool(**template: Any) -> dict[str, Any]:
    raw = swiftguest_pool("p", "ns", 1)
    raw["metadata"].update(uid="u-1", generation=1, resourceVersion="7")
    raw["spec"]["cell"]["guestTemplate"].update(template)
    return raw


def test_the_message_names_fields_and_counts_the_rest() -> None:
    breaches = [FieldError(f"spec.f{i}", "remove it") for i in range(5)]
    text = degraded_message(breaches)
    assert "breaks 5 admission rules" in text and "nothing is launched" in text
    assert "spec.f0: remove it; spec.f1: remove it; spec.f2: remove it (and 2 more)" in text
    assert "\n" not in text


def test_the_operator_rules_are_the_webhook_rules_with_its_settings() -> None:
    default, allowing = (
        pool_rules(RuleSettings()),
        pool_rules(RuleSettings(allowed_storage_classes=frozenset({"fast"}))),
    )
    assert default(_pool()) == ()
    assert [b.path for b in default(_pool(nodeName="n"))] == ["spec.cell.guestTemplate.nodeName"]
    storage = _pool(storage={"storageClassName": "fast"})
    assert default(storage) and allowing(storage) == ()


async def test_the_gate_runs_the_rules_once_per_generation() -> None:
    seen: list[Mapping[str, Any]] = []

    def rules(raw: Mapping[str, Any]) -> tuple[FieldError, ...]:
        seen.append(raw)
        return (FieldError("spec.x", "no"),)

    gate = RuleGate(rules)
    raw = _pool()
    assert [b.path for b in await gate.breaches(raw)] == ["spec.x"]
    assert await gate.breaches(raw) and len(seen) == 1
    raw["metadata"]["generation"] = 2
    await gate.breaches(raw)
    assert len(seen) == 2
    assert await RuleGate(None).breaches(raw) == ()


def test_degraded_is_set_then_cleared_by_a_pass_that_runs() -> None:
    raw = _pool(nodeName="n")
    row = {"name": "p-0", "index": 0, "phase": "Ready"}
    theirs = {"type": "ScalingActive", "status": "True", "reason": "ScaledUp", **AT}
    raw["status"] = {"cells": [row], "readyCells": 1, "conditions": [theirs]}
    breaches = pool_rules(RuleSettings())(raw)
    patch = degraded_patch(GPUCellPool.model_validate(raw), breaches, 100.0)
    assert patch["metadata"] == {"name": "p", "namespace": "ns"}  # an apply: no precondition
    (degraded,) = [c for c in patch["status"]["conditions"] if c["type"] == "Degraded"]
    assert degraded["status"] == "True" and degraded["reason"] == "AdmissionRulesFailed"
    assert "spec.cell.guestTemplate.nodeName" in degraded["message"]
    assert [c["type"] for c in patch["status"]["conditions"]] == ["Degraded"], "ours only"
    # rows and counts are sent back as stored (an apply would remove what it leaves out)
    assert patch["status"]["cells"] == [row] and patch["status"]["readyCells"] == 1

    fixed = {**_pool(), "status": {"conditions": patch["status"]["conditions"]}}
    summary = PassSummary(Reachability(True, "Reachable", ""), 1)
    after = conditions(GPUCellPool.model_validate(fixed), [], summary, 200.0)
    (cleared,) = [c for c in after if c["type"] == "Degraded"]
    assert cleared["status"] == "False" and cleared["reason"] == "AdmissionRulesPass"
    never = conditions(GPUCellPool.model_validate(_pool()), [], summary, 200.0)
    assert "Degraded" not in {c["type"] for c in never}, "only a pool once degraded carries it"
