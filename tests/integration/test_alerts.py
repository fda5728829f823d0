"""The chart's alert rules under the real promtool: syntax, one unit test per alert, mutations.

The rules live in one file (charts/gpucellpool/files/prometheus-rules.yaml); the chart embeds
it verbatim (tests/integration/test_chart_webhook_metrics.py proves the rendered PrometheusRule
equals it). promtool's unit tests compare annotations too, so the cases run against a copy with the
annotations stripped; the annotation templates themselves are checked by `promtool check
rules` on the real file. Every alert must have a case that fires it: replacing its expression
with one that never fires must make `promtool test rules` fail.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.binary_support import required_binary

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts/gpucellpool/files/prometheus-rules.yaml"
CASES = Path(__file__).with_name("test_alerts_promtool.yaml")
RUNBOOK = "https://github.com/kubeswift-io/gpucellpool/blob/main/docs/runbook.md#"
NEVER = "vector(1) == 2"


@pytest.fixture(scope="module")
def promtool() -> Path:
    return required_binary("promtool")


def _rules() -> dict[str, Any]:
    rules: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return rules


def _alerts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in doc["groups"] for rule in group["rules"]]


def _run(promtool: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], capture_output=True, text=True, cwd=cwd,
                          timeout=60, check=False)  # fmt: skip


def _unit_test(
    promtool: Path, tmp: Path, doc: dict[str, Any], only: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the cases (those testing alert ``only``, when given) against ``doc``."""
    for rule in _alerts(doc):
        rule.pop("annotations", None)
    (tmp / "rules.yaml").write_text(yaml.safe_dump(doc))
    cases = yaml.safe_load(CASES.read_text())
    if only is not None:
        cases["tests"] = [
            case for case in cases["tests"]
            if any(check["alertname"] == only for check in case["alert_rule_test"])
        ]  # fmt: skip
        assert cases["tests"], f"no promtool case for {only}"
    cases["rule_files"] = ["rules.yaml"]
    (tmp / "cases.yaml").write_text(yaml.safe_dump(cases))
    return _run(promtool, "test", "rules", "cases.yaml", cwd=tmp)


def test_check_rules_accepts_the_file(promtool: Path) -> None:
    proc = _run(promtool, "check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_alerts(_rules()))} rules found" in proc.stdout


def test_check_rules_rejects_a_broken_rule(promtool: Path, tmp_path: Path) -> None:
    """The check above could fail: a bad expression or annotation template is refused."""
    for field, bad in (("expr", "sum by (pool (x)"), ("annotations", {"summary": "{{ $value "})):
        doc = _rules()
        doc["groups"][0]["rules"][0][field] = bad
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump(doc))
        assert _run(promtool, "check", "rules", str(tmp_path / "bad.yaml")).returncode != 0


def test_every_alert_passes_its_unit_test(promtool: Path, tmp_path: Path) -> None:
    proc = _unit_test(promtool, tmp_path, _rules())
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_has_a_case_that_fires_it(promtool: Path, tmp_path: Path) -> None:
    for index, rule in enumerate(_alerts(_rules())):
        doc = _rules()
        _alerts(doc)[index]["expr"] = NEVER
        proc = _unit_test(promtool, tmp_path, doc, only=rule["alert"])
        assert proc.returncode != 0, f"no promtool case notices {rule['alert']} never firing"
        assert rule["alert"] in proc.stdout + proc.stderr


def test_every_alert_has_a_case_where_it_stays_quiet(promtool: Path, tmp_path: Path) -> None:
    """An alert that always fires must fail some case too (each has an exp_alerts: [])."""
    for index, rule in enumerate(_alerts(_rules())):
        doc = _rules()
        _alerts(doc)[index]["expr"] = "vector(1)"
        _alerts(doc)[index]["for"] = "0m"
        proc = _unit_test(promtool, tmp_path, doc, only=rule["alert"])
        assert proc.returncode != 0, f"no promtool case notices {rule['alert']} always firing"


def test_alerts_are_documented_and_graded() -> None:
    names = [rule["alert"] for rule in _alerts(_rules())]
    assert len(names) == len(set(names))
    docs = (ROOT / "docs/observability.md").read_text()
    for rule in _alerts(_rules()):
        notes = rule["annotations"]
        assert notes["runbook_url"] == RUNBOOK + rule["alert"].lower()
        assert notes["summary"] and notes["description"]
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert f"`{rule['alert']}`" in docs, f"{rule['alert']} missing from docs/observability.md"
    assert {"GPUCellPoolPendingNotServed", "GPUCellPoolMetricsStale", "GPUCellPoolScaleFlapping",
            "GPUCellPoolCRDDrift"} <= set(names)  # fmt: skip
