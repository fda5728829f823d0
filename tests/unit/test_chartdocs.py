"""The chart README is generated from the values and cannot drift; LICENSE and versions agree.

``gpucellpool.operator.chartdocs`` renders the values table from values.yaml's comments and defaults
and values.schema.json's types. These tests fail when the committed README is stale, when a value
has no description, and when the chart's appVersion, the project version or the licence
disagree.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest
import yaml

from gpucellpool.operator import chartdocs

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpucellpool"


@pytest.fixture
def chart_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "chart"
    copy.mkdir()
    for name in ("Chart.yaml", "values.yaml", "values.schema.json", "README.md"):
        shutil.copy(CHART / name, copy / name)
    return copy


def test_committed_readme_is_what_the_values_render() -> None:
    assert not chartdocs.drifted(), "run python -m gpucellpool.operator.chartdocs"
    assert chartdocs.main(["--check"]) == 0


def test_check_fails_on_a_stale_readme_and_passes_once_regenerated(chart_copy: Path) -> None:
    values = chart_copy / "values.yaml"
    values.write_text(values.read_text().replace("replicaCount: 2", "replicaCount: 3"))
    assert chartdocs.main(["--check", "--chart", str(chart_copy)]) == 1
    assert chartdocs.main(["--chart", str(chart_copy)]) == 0
    assert "| `replicaCount` | integer | `3` |" in (chart_copy / "README.md").read_text()
    assert chartdocs.main(["--check", "--chart", str(chart_copy)]) == 0


def test_every_value_is_a_row_with_type_default_and_description() -> None:
    values_text = (CHART / "values.yaml").read_text()
    schema = json.loads((CHART / "values.schema.json").read_text())
    rows = {row.key: row for row in chartdocs.rows(values_text, schema)}
    for key in ("image.repository", "image.tag", "image.digest", "replicaCount",
                "podDisruptionBudget.minAvailable", "podDisruptionBudget.maxUnavailable",
                "podSecurityContext", "securityContext", "networkPolicy.webhookFrom",
                "networkPolicy.metricsFrom", "networkPolicy.egress",
                "webhook.rules.strictGuestTemplate", "webhook.rules.allowedPrometheusHosts",
                "monitoring.serviceMonitor.authorization.credentials.name",
                "monitoring.prometheusRule.disabledAlerts",
                "monitoring.prometheusRule.extraRules"):  # fmt: skip
        assert key in rows, key
    assert "image" not in rows and "webhook.rules" not in rows  # sections are not rows
    assert all(row.description and row.type for row in rows.values())
    assert rows["replicaCount"].default == "2" and rows["replicaCount"].type == "integer"
    assert rows["podDisruptionBudget.minAvailable"].type == "integer or string"
    assert rows["webhook.rules.allowedSriovResources"].type == "list of string"
    assert json.loads(rows["podSecurityContext"].default)["runAsUser"] == 65532


def test_a_value_without_any_description_fails_the_render(chart_copy: Path) -> None:
    values = chart_copy / "values.yaml"
    values.write_text(values.read_text() + "\nundocumented: 1\n")
    schema_path = chart_copy / "values.schema.json"
    schema = json.loads(schema_path.read_text())
    schema["properties"]["undocumented"] = {"type": "integer"}
    schema_path.write_text(json.dumps(schema))
    with pytest.raises(chartdocs.ChartDocsError, match="undocumented"):
        chartdocs.render(chart_copy)
    assert chartdocs.main(["--chart", str(chart_copy)]) == 1
    schema["properties"]["undocumented"]["description"] = "from the schema"
    schema_path.write_text(json.dumps(schema))
    assert "| `undocumented` | integer | `1` | from the schema |" in chartdocs.render(chart_copy)


def test_a_value_missing_from_the_schema_fails_the_render(chart_copy: Path) -> None:
    values = chart_copy / "values.yaml"
    values.write_text(values.read_text() + "\n# A stray key.\nstray: true\n")
    with pytest.raises(chartdocs.ChartDocsError, match=r"stray: in values\.yaml but not in"):
        chartdocs.render(chart_copy)


def test_comments_follow_nesting_and_reset_at_blank_lines() -> None:
    text = "# top\n\n# about a\na:\n  # about b\n  b: 1\n  c: 2\n# about d\nd:\n  - x\n"
    assert chartdocs.comments(text) == {"a": "about a", "a.b": "about b", "d": "about d"}


def test_table_cells_escape_pipes_and_angle_brackets() -> None:
    row = chartdocs.Row("k", "string", '"a|b"', "Secret <fullname>-x, a | b")
    line = chartdocs.table([row]).splitlines()[-1]
    assert line == '| `k` | string | `"a\\|b"` | Secret &lt;fullname&gt;-x, a \\| b |'


def test_chart_app_version_is_the_project_version_without_a_v() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == project["version"]
    assert not str(chart["appVersion"]).startswith("v")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"] == {**values["image"], "repository": "localhost/gpucellpool/operator",
                               "tag": "", "digest": ""}  # fmt: skip


def test_license_is_the_apache_2_text_the_metadata_names() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 10_000
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["annotations"]["artifacthub.io/license"] == "Apache-2.0"
