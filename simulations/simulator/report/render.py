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

from simulations.simulator.report.summary import PolicySummary

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
    if math.isnan(seconds):
        return "-"  # no pod was simulated: there is no wait to report
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


def unhostable_note(summaries: Sequence[PolicySummary]) -> str:
    """A line saying how many pods no cell can ever host ('' when none): they are counted,
    not simulated, so they appear in no wait and no cost."""
    count = max((s.unschedulable for s in summaries), default=0)
    if not count:
        return ""
    return (
        f"{count} unhostable pods (they ask more than one cell has, or a node selector no cell "
        "matches): not simulated, in no wait or cost"
    )


def markdown(summaries: Sequence[PolicySummary]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(row(s)) + " |" for s in summaries]
    note = unhostable_note(summaries)
    gangs = gang_markdown(summaries)
    return "\n".join(lines) + "\n" + (f"\n{note}\n" if note else "") + gangs


# A second table, only for traces with gangs (the first stays as it is for every trace)
GANG_HEADERS = (
    "policy",
    "gangs",
    "gang start p50",
    "p95",
    "max",
    "unstarted",
    "partial-gang GPU-h",
    "other pods p95",
)
GANG_LEGEND = (
    "gang start: from a gang's last member arriving to its last member placed; partial-gang "
    "GPU-h: GPUs held by members of gangs not yet started (paid, unused); other pods p95: wait "
    "of the pods outside gangs"
)


def has_gangs(summaries: Sequence[PolicySummary]) -> bool:
    return any(s.gangs for s in summaries)


def gang_row(s: PolicySummary) -> list[str]:
    return [
        s.policy,
        str(s.gangs),
        _duration(s.gang_wait_p50_seconds),
        _duration(s.gang_wait_p95_seconds),
        _duration(s.gang_wait_max_seconds),
        str(s.gangs_unstarted),
        f"{s.partial_gang_gpu_hours:,.1f}",
        _duration(s.solo_wait_p95_seconds),
    ]


def gang_markdown(summaries: Sequence[PolicySummary]) -> str:
    """The gang table in Markdown ('' when the trace has no gangs)."""
    if not has_gangs(summaries):
        return ""
    lines = ["| " + " | ".join(GANG_HEADERS) + " |", "|" + "---|" * len(GANG_HEADERS)]
    lines += ["| " + " | ".join(gang_row(s)) + " |" for s in summaries if s.gangs]
    return "\n" + "\n".join(lines) + f"\n\n{GANG_LEGEND}\n"


def gang_rich_table(summaries: Sequence[PolicySummary]) -> Any:
    """The gang table for a terminal, or None when the trace has no gangs."""
    if not has_gangs(summaries):
        return None
    from rich import box  # noqa: PLC0415 (only needed on a terminal)
    from rich.table import Table  # noqa: PLC0415

    table = Table(caption=GANG_LEGEND, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for i, header in enumerate(GANG_HEADERS):
        table.add_column(header, justify="left" if i == 0 else "right", overflow="fold")
    for s in summaries:
        if s.gangs:  # the oracle does not simulate gangs
            table.add_row(*gang_row(s))
    return table


# The terminal table's short headers; LEGEND spells them out under the table.
SHORT_HEADERS = (
    "policy",
    "cell-h",
    "x orc",
    "p50",
    "p95",
    "p99",
    "max",
    ">boot",
    "cells",
    "evict",
    "util",
)
LEGEND = (
    "cell-h: cell-hours paid; x orc: times the oracle's; p50..max: pod wait; >boot: pods that "
    "waited longer than one boot; cells: added/removed"
)


def _short_duration(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    if seconds < 100:
        return f"{seconds:.0f}s"
    if seconds < 6000:
        return f"{seconds / 60:.0f}m"
    if seconds < 360000:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.0f}d"


def _count(n: int) -> str:
    return f"{n / 1000:.0f}k" if n >= 10000 else str(n)


def short_row(s: PolicySummary) -> list[str]:
    """``row`` in at most 6 characters a column (the policy name excepted)."""
    ratio = "-" if math.isnan(s.cost_ratio) else f"{s.cost_ratio:.2f}"
    return [
        s.policy,
        _count(round(s.cost_cell_hours))
        if s.cost_cell_hours >= 1e5
        else f"{s.cost_cell_hours:,.0f}",
        ratio,
        *(
            _short_duration(x)
            for x in (
                s.wait_p50_seconds,
                s.wait_p95_seconds,
                s.wait_p99_seconds,
                s.wait_max_seconds,
            )
        ),
        f"{100 * s.waited_longer_than_boot:.0f}%",
        f"+{_count(s.scale_up_cells)}/-{_count(s.scale_down_cells)}",
        _count(s.evictions),
        f"{100 * s.mean_utilisation:.0f}%",
    ]


def rich_table(summaries: Sequence[PolicySummary], title: str = "") -> Any:
    """A table that fits 100 columns: short headers with a legend, light borders, numbers never
    wrapped, and policy names folded onto a second line rather than cut."""
    from rich import box  # noqa: PLC0415 (only needed on a terminal)
    from rich.table import Table  # noqa: PLC0415

    note = unhostable_note(summaries)
    table = Table(
        title=title or None,
        caption=LEGEND + (f"\n{note}" if note else ""),
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        collapse_padding=True,
    )
    for i, header in enumerate(SHORT_HEADERS):
        if i == 0:
            table.add_column(header, justify="left", overflow="fold", min_width=12)
        else:
            table.add_column(header, justify="right", no_wrap=True)
    for s in summaries:
        table.add_row(*short_row(s))
    return table


def write_json(
    path: Path | str, summaries: Sequence[PolicySummary], meta: Mapping[str, Any]
) -> None:
    policies = [
        {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in s.as_dict().items()}
        for s in summaries
    ]  # NaN (nothing measured) as null: valid JSON
    payload = {"meta": dict(meta), "policies": policies}
    Path(path).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
