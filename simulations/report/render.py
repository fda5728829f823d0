"""Render policy summaries: a rich table on a terminal, Markdown, or JSON.

Why this module exists: the same comparison goes to a human at a terminal, into
docs/benchmarks.md, and into a file a notebook or CI reads; each form is a few lines here
rather than in the CLI.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulations.report.summary import PolicySummary

HEADERS = (
    "policy",
    "cell-hours",
    "x oracle",
    "wait p50",
    "p95",
    "p99",
    "max",
    "> 1 boot",
    "cells +/-",
    "evictions",
    "util",
)


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "0 s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def row(s: PolicySummary) -> list[str]:
    ratio = "-" if math.isnan(s.cost_ratio) else f"{s.cost_ratio:.2f}"
    return [
        s.policy,
        f"{s.cost_cell_hours:,.0f}",
        ratio,
        _duration(s.wait_p50_seconds),
        _duration(s.wait_p95_seconds),
        _duration(s.wait_p99_seconds),
        _duration(s.wait_max_seconds),
        f"{100 * s.waited_longer_than_boot:.1f} %",
        f"+{s.scale_up_cells}/-{s.scale_down_cells}",
        str(s.evictions),
        f"{100 * s.mean_utilisation:.0f} %",
    ]


def markdown(summaries: Sequence[PolicySummary]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(row(s)) + " |" for s in summaries]
    return "\n".join(lines) + "\n"


def rich_table(summaries: Sequence[PolicySummary], title: str = "") -> Any:
    from rich.table import Table  # noqa: PLC0415 (only needed on a terminal)

    table = Table(title=title or None)
    for i, header in enumerate(HEADERS):
        table.add_column(header, justify="left" if i == 0 else "right")
    for s in summaries:
        table.add_row(*row(s))
    return table


def write_json(
    path: Path | str, summaries: Sequence[PolicySummary], meta: Mapping[str, Any]
) -> None:
    payload = {"meta": dict(meta), "policies": [s.as_dict() for s in summaries]}
    Path(path).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
