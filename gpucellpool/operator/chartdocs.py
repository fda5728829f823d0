"""The chart README, generated from the chart's values
(``python -m gpucellpool.operator.chartdocs``).

Why this module exists: a values table written by hand drifts the day a key is added. The
README's table is rendered from ``values.yaml`` (every default, and the ``#`` comment above
each key as its description) and ``values.schema.json`` (each key's type, and a description
where the comment is missing); a key with neither fails the render, so every value stays
documented. ``--check`` fails when the committed README differs (``make drift``).

A *section* is a closed object in the schema (``additionalProperties: false``) with a
non-empty default; its keys get rows of their own. Any other value - a scalar, a list, an
open Kubernetes object such as ``resources`` or ``securityContext`` - is one row.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpucellpool.operator import chartdocs_text

CHART_DIR = Path(__file__).resolve().parents[2] / "charts" / "gpucellpool"
README = "README.md"
_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w-]*):(?:\s|$)")


class ChartDocsError(ValueError):
    """The values cannot be documented (a key lacks a description or a schema entry)."""


@dataclass(frozen=True)
class Row:
    """One documented value: dotted key, type, default (JSON) and description."""

    key: str
    type: str
    default: str
    description: str


def comments(values_text: str) -> dict[str, str]:
    """Each dotted key's comment: the ``#`` lines directly above it (a blank line resets)."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    for line in values_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        match = _KEY_LINE.match(line)
        if match is None:  # a blank line, a list item or a flow value's continuation
            pending = []
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        if pending:
            out[".".join(key for _, key in stack)] = " ".join(pending)
        pending = []
    return out


def type_of(schema: dict[str, Any], value: object) -> str:
    """A short type name from the schema (``anyOf`` alternatives joined by "or")."""
    if "anyOf" in schema:
        return " or ".join(dict.fromkeys(type_of(alt, value) for alt in schema["anyOf"]))
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items", {}).get("type")
        return f"list of {items}" if isinstance(items, str) else "list"
    if isinstance(kind, list):
        return " or ".join(kind)
    if isinstance(kind, str):
        return kind
    return {bool: "boolean", int: "integer", str: "string", list: "list"}.get(type(value), "object")


def _is_section(schema: dict[str, Any], value: object) -> bool:
    closed = schema.get("additionalProperties") is False and "properties" in schema
    return closed and isinstance(value, dict) and bool(value)


Leaf = tuple[str, Any, dict[str, Any]]


def walk(values: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> Iterator[Leaf]:
    """(dotted key, default, schema) of every documented value, in values.yaml's order."""
    properties = schema.get("properties", {})
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if key not in properties:
            raise ChartDocsError(f"{dotted}: in values.yaml but not in values.schema.json")
        node = properties[key]
        if _is_section(node, value):
            yield from walk(value, node, f"{dotted}.")
        else:
            yield dotted, value, node


def rows(values_text: str, schema: dict[str, Any]) -> list[Row]:
    """The table's rows; raises ``ChartDocsError`` naming every undocumented key."""
    notes = comments(values_text)
    values = yaml.safe_load(values_text) or {}
    out, missing = [], []
    for key, value, node in walk(values, schema):
        description = notes.get(key) or node.get("description", "")
        if not description:
            missing.append(key)
        default = json.dumps(value, separators=(", ", ": "))
        out.append(Row(key, type_of(node, value), default, description))
    if missing:
        undocumented = ", ".join(missing)
        raise ChartDocsError(f"no comment in values.yaml or schema description: {undocumented}")
    return out


def _cell(text: str) -> str:
    """Table-safe text: pipes escaped, and ``<name>`` kept visible (not taken as HTML)."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def table(table_rows: Sequence[Row]) -> str:
    lines = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for row in table_rows:
        cells = (f"`{row.key}`", row.type, f"`{row.default}`", row.description)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def render(chart_dir: Path = CHART_DIR) -> str:
    """The README text for the chart in ``chart_dir``."""
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    values_text = (chart_dir / "values.yaml").read_text()
    schema = json.loads((chart_dir / "values.schema.json").read_text())
    fills = {"@VERSION@": str(chart["version"]), "@APP_VERSION@": str(chart["appVersion"]),
             "@TABLE@": table(rows(values_text, schema))}  # fmt: skip
    text = chartdocs_text.README
    for marker, fill in fills.items():
        text = text.replace(marker, fill)
    return text


def drifted(chart_dir: Path = CHART_DIR) -> bool:
    """True when the README is missing or differs from what ``render`` produces."""
    path = chart_dir / README
    return not path.exists() or path.read_text() != render(chart_dir)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucellpool.operator.chartdocs")
    parser.add_argument("--check", action="store_true", help="fail if the README is stale")
    parser.add_argument("--chart", type=Path, default=CHART_DIR, help="the chart directory")
    args = parser.parse_args(argv)
    try:
        if args.check:
            if drifted(args.chart):
                print(f"stale: {args.chart / README} "
                      "(run python -m gpucellpool.operator.chartdocs)",
                      file=sys.stderr)  # fmt: skip
                return 1
            return 0
        (args.chart / README).write_text(render(args.chart))
    except (ChartDocsError, OSError, yaml.YAMLError, json.JSONDecodeError) as exc:
        print(f"chartdocs: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
