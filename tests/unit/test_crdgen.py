"""The generated CRD: structural, complete, deterministic, and its drift check catches edits."""

from __future__ import annotations

import argparse
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucellpool import cli
from gpucellpool.api import GPUCellPool, crdgen
from gpucellpool.api.conditions import CapacityProviderReason, CellShapeReason, ConditionType
from gpucellpool.api.crdgen import openapi_schema
from gpucellpool.api.reference import render_api_docs
from tests.unit.test_api_models import MINIMAL

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    rendered: dict[str, Any] = yaml.safe_load(crdgen.render_crd())
    return rendered


@pytest.fixture(scope="module")
def schema(crd: dict[str, Any]) -> dict[str, Any]:
    openapi: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return openapi


def walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every schema node with its path."""
    if isinstance(node, dict):
        yield path, node
        for key, sub in node.get("properties", {}).items():
            yield from walk(sub, f"{path}.{key}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                yield from walk(node[key], f"{path}[{key}]")


def sub(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node = schema
    for part in path.split("."):
        node = node["items"] if part == "[]" else node["properties"][part]
    return node


FORBIDDEN_KEYWORDS = {"$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "const", "title"}


def test_schema_is_structural(schema: dict[str, Any]) -> None:
    for path, node in walk(schema):
        assert not FORBIDDEN_KEYWORDS & node.keys(), path
        assert "type" in node, f"{path} has no type"
        assert node.get("default") is not None or "default" not in node, path
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            assert bound not in node or isinstance(node[bound], bool), path
        if node["type"] == "object" and path != ".metadata":  # metadata: the apiserver's own
            typed = "properties" in node or "additionalProperties" in node
            assert typed or node.get("x-kubernetes-preserve-unknown-fields"), path
            assert node.get("additionalProperties") is not False, path


def test_identity_and_subresources(crd: dict[str, Any]) -> None:
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "gpucellpools.cells.kubeswift.io"
    assert (spec["group"], spec["scope"], spec["names"]["kind"]) == (
        "cells.kubeswift.io", "Namespaced", "GPUCellPool")  # fmt: skip
    assert spec["names"]["shortNames"] == ["cellpool"]
    version = spec["versions"][0]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }


def test_printer_columns_show_the_decision_not_spec(crd: dict[str, Any]) -> None:
    columns = {c["name"]: c for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert list(columns)[:5] == ["Desired", "Ready", "GPUs", "Available", "Reason"]
    assert columns["Desired"]["jsonPath"] == ".status.desiredReplicas"
    assert columns["Reason"]["jsonPath"] == ".status.lastDecision.reason"
    assert columns["Age"]["type"] == "date"


@pytest.mark.parametrize(
    ("path", "key", "value"),
    [
        ("spec.replicas", "default", 1),
        ("spec.replicas", "minimum", 0),
        ("spec.cell.provisioner", "enum", ["SwiftGuest", "ClusterAPI"]),
        ("spec.cell.gpu.count", "enum", [1]),
        ("spec.cell.gpu.dra.hugepages", "enum", ["", "1Gi", "2Mi"]),
        ("spec.cell.gpu.dra.requestName", "default", "gpu"),
        ("spec.cell.guestTemplate", "x-kubernetes-preserve-unknown-fields", True),
        ("spec.bootstrap.readyTimeout", "default", "15m"),
        ("spec.autoscaling.scaleDown", "enum", ["Manual", "Auto"]),
        ("spec.autoscaling.maxReplicas", "minimum", 1),
        ("spec.autoscaling.behavior.scaleUp.policies.[].value", "minimum", 1),
        ("spec.autoscaling.behavior.scaleUp.policies.[].periodSeconds", "maximum", 1800),
        ("spec.autoscaling.behavior.scaleDown.stabilizationWindowSeconds", "default", 600),
        ("spec.autoscaling.cellShape.gpuMemoryMiB", "minimum", 1),
        ("spec.cell.nodeIPFrom", "default", ""),
        ("status.cells", "x-kubernetes-list-type", "atomic"),
        ("status.lastDecision", "x-kubernetes-map-type", "atomic"),
        ("status.demand", "x-kubernetes-map-type", "atomic"),
        ("status.utilization", "x-kubernetes-map-type", "atomic"),
        ("status.physicalCapacity", "x-kubernetes-map-type", "atomic"),
        ("status.workloadCapacity", "x-kubernetes-map-type", "atomic"),
        ("status.cellDeviceShape", "x-kubernetes-map-type", "atomic"),
        ("status.conditions", "x-kubernetes-list-map-keys", ["type"]),
        ("status.conditions.[].status", "enum", ["True", "False", "Unknown"]),
        ("status.physicalCapacity.freeGPUsInCluster", "nullable", True),
    ],
)
def test_schema_carries_defaults_enums_bounds_and_list_types(
    schema: dict[str, Any], path: str, key: str, value: object
) -> None:
    assert sub(schema, path)[key] == value


@pytest.mark.parametrize(
    ("path", "required"),
    [
        ("", {"spec"}),
        ("spec", {"cell", "workloadCluster"}),
        ("spec.cell", {"guestTemplate", "gpu"}),
        ("status.cells.[]", {"name", "index", "phase"}),
        ("status.conditions.[]", {"type", "status", "lastTransitionTime", "reason"}),
    ],
)
def test_required_fields_and_list_map_keys_are_required(
    schema: dict[str, Any], path: str, required: set[str]
) -> None:
    assert set((sub(schema, path) if path else schema).get("required", [])) == required


def test_legacy_windows_have_no_schema_default(schema: dict[str, Any]) -> None:
    for path in ("spec.autoscaling.stabilizationWindow",
                 "spec.autoscaling.scaleDownStabilizationWindow"):  # fmt: skip
        assert "default" not in sub(schema, path), path


def test_descriptions_come_from_field_docstrings(schema: dict[str, Any]) -> None:
    described = [p for p, n in walk(schema) if n.get("description")]
    assert len(described) > 100
    assert "minimum time between two scale-ups" in sub(
        schema, "spec.autoscaling.stabilizationWindow")["description"]  # fmt: skip


def _rules(schema: dict[str, Any]) -> dict[str, str]:
    return {r["message"]: p for p, n in walk(schema) for r in n.get("x-kubernetes-validations", [])}


def test_cel_rules_sit_on_the_objects_they_constrain(schema: dict[str, Any]) -> None:
    rules = _rules(schema)
    expected = {
        "maxReplicas is required when autoscaling is enabled": ".spec.autoscaling",
        "minReplicas must be less than or equal to maxReplicas": ".spec.autoscaling",
        "minReplicas is required when scaleDown is Auto": ".spec.autoscaling",
        "backend DRA requires dra and forbids native": ".spec.cell.gpu",
        "backend Native requires native and forbids dra": ".spec.cell.gpu",
        "kind must end with Template": ".spec.cell.clusterAPI.bootstrapConfigTemplateRef",
        "deviceClassName is required when mode is DRA": ".spec.capacity.hami",
    }
    for message, path in expected.items():
        assert rules[message] == path
    assert any(m.startswith("clusterAPI is required") for m in rules)
    assert any(m.startswith("metadata.name must be at most 57") for m in rules)


def test_cel_rules_stay_out_of_lists(schema: dict[str, Any]) -> None:
    """Rules under an array multiply their cost by maxItems; keep them all at object level."""
    for path, node in walk(schema):
        if node.get("x-kubernetes-validations"):
            assert "[items]" not in path, path


def test_strings_compared_by_cel_are_bounded(schema: dict[str, Any]) -> None:
    for path in (
        "spec.cell.clusterAPI.bootstrapConfigTemplateRef.kind",
        "spec.cell.gpu.dra.resourceClaimName",
        "spec.capacity.hami.deviceClassName",
    ):
        assert "maxLength" in sub(schema, path), path


def test_render_is_deterministic_and_checked_in() -> None:
    files = crdgen.render_files()
    assert files == crdgen.render_files()
    assert crdgen.check({ROOT / rel: text for rel, text in files.items()}) == []
    crd_paths = [p for p in files if p.suffix == ".yaml"]
    assert len(crd_paths) == 2 and files[crd_paths[0]] == files[crd_paths[1]]


# Optional objects whose presence changes meaning (or that need required fields): left absent.
KEEP_ABSENT = (
    "cell.clusterAPI",
    "cell.gpu.native",
    "autoscaling.cellShape",
    "autoscaling.prometheus",
    "autoscaling.demand.namespaceSelector",
    "autoscaling.demand.podSelector",
    "workloadCluster.node",
)


def _apiserver_defaults(node: dict[str, Any], obj: dict[str, Any], path: str = "") -> None:
    """Apply schema defaults the way the apiserver does, materialising optional objects."""
    for key, prop in node.get("properties", {}).items():
        here = f"{path}.{key}" if path else key
        if key not in obj and "default" in prop:
            obj[key] = prop["default"]
        elif key not in obj and "properties" in prop and here not in KEEP_ABSENT:
            obj[key] = {}
        if isinstance(obj.get(key), dict) and prop.get("properties"):
            _apiserver_defaults(prop, obj[key], here)


def test_apiserver_defaults_equal_model_defaults(schema: dict[str, Any]) -> None:
    """Every scalar default the apiserver would fill equals the model's own default."""
    spec = copy.deepcopy(MINIMAL["spec"])
    _apiserver_defaults(sub(schema, "spec"), spec)
    assert spec["autoscaling"]["prewarm"]["bootTime"] == "5m"  # the walk reached nested objects
    served = GPUCellPool.model_validate({**MINIMAL, "spec": spec}).spec.to_api()
    plain = GPUCellPool.model_validate(MINIMAL).spec.to_api()
    scalars = list(_scalars(plain))
    assert len(scalars) > 30
    for path, want in scalars:
        assert _get(served, path) == want, path


def _scalars(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _scalars(value, f"{prefix}.{key}" if prefix else key)
    elif not isinstance(obj, list):
        yield prefix, obj


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[part]
    return obj


# ---- drift ---------------------------------------------------------------------------------


@pytest.fixture
def generated(tmp_path: Path) -> dict[Path, str]:
    files = {tmp_path / rel: text for rel, text in crdgen.render_files().items()}
    crdgen.write(files)
    return files


def test_check_passes_on_fresh_output(generated: dict[Path, str]) -> None:
    assert crdgen.check(generated) == []


def test_check_reports_a_removed_field(generated: dict[Path, str]) -> None:
    path = next(p for p in generated if p.parts[-3:-1] == ("gpucellpool", "crds"))
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip() == "headroomCells:")
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next(i for i in range(start + 1, len(lines))
               if len(lines[i]) - len(lines[i].lstrip()) <= indent)  # fmt: skip
    path.write_text("".join(lines[:start] + lines[end:]))
    problems = crdgen.check(generated)
    assert len(problems) == 1
    assert str(path) in problems[0] and "+" in problems[0] and "headroomCells:" in problems[0]


def test_check_reports_a_changed_enum(generated: dict[Path, str]) -> None:
    path = next(p for p in generated if p.parts[-2:-1] == ("crds",) and "charts" not in p.parts)
    path.write_text(path.read_text().replace("- WaitForIdle\n", "- WaitForever\n", 1))
    problems = crdgen.check(generated)
    assert len(problems) == 1
    assert "-                        - WaitForever" in problems[0].replace(
        "  - Wait", "- Wait"
    ) or ("WaitForever" in problems[0] and "WaitForIdle" in problems[0])


def test_check_reports_stale_docs_and_missing_files(generated: dict[Path, str]) -> None:
    docs = next(p for p in generated if p.suffix == ".md")
    docs.write_text(docs.read_text().replace("hami-scheduler", "default-scheduler"))
    crd_copy = next(p for p in generated if "charts" in p.parts)
    crd_copy.unlink()
    problems = crdgen.check(generated)
    assert len(problems) == 2
    assert any("default-scheduler" in p for p in problems)
    assert any(str(crd_copy) in p for p in problems)


def test_cli_check_exits_1_with_a_diff_then_0_after_regenerating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["crd", "--root", str(tmp_path), "--check"]) == 1
    assert "differs from the models" in capsys.readouterr().out
    assert cli.main(["crd", "--root", str(tmp_path)]) == 0
    assert (tmp_path / "crds" / "cells.kubeswift.io_gpucellpools.yaml").exists()
    assert cli.main(["crd", "--root", str(tmp_path), "--check"]) == 0


def test_run_accepts_the_parser_it_builds(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    crdgen.add_arguments(parser)
    args = parser.parse_args(["--root", str(tmp_path)])
    assert crdgen.run(args) == 0
    assert (tmp_path / "docs" / "api.md").read_text().startswith("# GPUCellPool API reference")


@pytest.mark.parametrize(
    "node",
    [
        {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        {"type": "number", "exclusiveMinimum": 0},
    ],
)
def test_generator_refuses_shapes_a_crd_cannot_express(node: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"cannot express|exclusive bound"):
        crdgen.structural(node, {})


def test_every_condition_type_and_reason_has_a_meaning_in_the_api_reference() -> None:

    text = render_api_docs(openapi_schema())
    rows = {line.split("|")[1].strip(" `"): line.split("|")[2].strip() for line in
            text.splitlines() if line.startswith("| `")}  # fmt: skip
    for member in (*ConditionType, *CapacityProviderReason, *CellShapeReason):
        assert rows.get(member.value), f"{member.value} has no meaning in docs/api.md"
